#!/usr/bin/env bash
# The README followed top to bottom in a fresh clone and fresh venvs, on this CPU machine.
set -u
log() { printf '\n=== %s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }
step() { log "$*"; local t0=$SECONDS; bash -c "$*"; local rc=$?; log "exit $rc in $((SECONDS - t0)) s: $*"; }
top=$(mktemp -d /tmp/readme-run.XXXX); cd "$top"
git clone -q /work/main nf4kernel && cd nf4kernel
log "commit $(git rev-parse --short HEAD), python3 $(python3 --version 2>&1), $(nproc) cores"
export PIP_PROGRESS_BAR=off
step 'python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements/dev.txt > ../dev-install.log 2>&1'
step '. .venv/bin/activate && nox -s tests > ../tests.log 2>&1'
step '. .venv/bin/activate && nox -s bench > ../bench.log 2>&1'
step '. .venv/bin/activate && asv publish > ../publish.log 2>&1'
step '. .venv/bin/activate && (asv preview --port 8931 > ../preview.log 2>&1 & p=$!; for i in $(seq 60); do curl -sf -o /dev/null http://127.0.0.1:8931/index.html && break; sleep 1; done; curl -s -o /dev/null -w "served index.html: HTTP %{http_code}\n" http://127.0.0.1:8931/index.html; kill -INT $p; wait $p)'
step 'du -sh .nox .nox/* | sort -h'
step 'grep -ciE "Downloading (nvidia|cuda)" ../dev-install.log ../tests.log ../bench.log || true'
step 'grep -c Traceback ../tests.log ../bench.log ../publish.log ../preview.log || true'
step 'ls .asv/html/vendor | head; grep -c "https://" .asv/html/index.html || true'
# Install, then Use and Fine-tuning, as a user who is not in the checkout's venv would.
step 'python3 -m venv ../user && . ../user/bin/activate && (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install . && pip install bitsandbytes==0.50.2 transformers peft) > ../user-install.log 2>&1'
step 'python3 - <<PY
import re
s = open("README.md").read()
for i, code in enumerate(re.findall(r"\`\`\`python\n(.*?)\`\`\`", s, re.S)):
    open(f"../example{i}.py", "w").write(code)
PY'
step 'cd .. && . user/bin/activate && python example0.py'
step 'cd .. && . user/bin/activate && python example1.py 2>&1 | grep -v "Writing model shards\|Loading weights"'
log done
