#!/usr/bin/env bash
# One device-machine session: unpack the offline bundle (bitsandbytes, unsloth, nox, asv for the
# GPU image's Python 3.12), then run the steps named on the command line, logs under $OUT.
#   bash dev/gpu-machine/gpu-session.sh env tests sweep perf gate
#   bash dev/gpu-machine/gpu-session.sh gate10           # ten gate runs (about 15 min on an H200)
#   bash dev/gpu-machine/gpu-session.sh repo bench backfill:main~12..main regression results
#   bash dev/gpu-machine/gpu-session.sh env rehearse:noop     # gpu.yml for real (dev/rehearsal/rehearse.py), in a fresh clone
#   bash dev/gpu-machine/gpu-session.sh env rehearse:noop:2   # the same with two runners at once, one GPU each
#   bash dev/gpu-machine/gpu-session.sh repo 'rehearse:noop@0,1&' 'rehearse:hostile-timers@2&' 'aa-regression:5@3&' wait
#   bash dev/gpu-machine/gpu-session.sh repo gaps@0 'clock:honest,released@0'   # where the clock's calls lose time; two verdicts
#                                         # side by side on four GPUs, each on its GPU's share of the cores
#   bash dev/gpu-machine/gpu-session.sh node-closed repo beside:4   # two GPUs: nvidia-smi with the other GPU's node closed; no-op regression runs beside a busy GPU
#   bash dev/gpu-machine/gpu-session.sh repo gate-beside-tests gate-beside-tests:pinned   # two GPUs: the gate beside the test job, without and with each side on its own cores
#   bash dev/gpu-machine/gpu-session.sh repo power-noop:10 power-ladder   # the regression check's power
#   bash dev/gpu-machine/gpu-session.sh repo host-ab:f73259b:16   # a planned call's host time against REV's
#   bash dev/gpu-machine/gpu-session.sh repo host-handles:4 ruler  # each private handle's saving; the asv ruler once
# The history steps (repo onwards) work in a clone of .gpu-bundle/repo.bundle (`git bundle create
# .gpu-bundle/repo.bundle main` here first): asv records results per commit, and the device's copy
# of the tree has no .git. A clone left by an earlier call on the same (warm) machine is reused.
set -uo pipefail
OUT=${OUT:-/tmp/out}
TREE=$PWD  # the device's copy of the tree: `repo` moves into a clone, later steps still find the bundle here
mkdir -p "$OUT" /tmp/site
[ -d /tmp/site/unsloth ] || tar xzf .gpu-bundle/site.tgz -C /tmp
# bubblewrap, the sandbox of every process that runs a PR's kernel: Debian's .deb, unpacked (the GPU
# image has no registry); `apt-get download bubblewrap` on a Debian machine puts it in .gpu-bundle.
for deb in .gpu-bundle/bubblewrap_*.deb; do [ -x /tmp/bw/usr/bin/bwrap ] || [ ! -e "$deb" ] || dpkg -x "$deb" /tmp/bw; done
[ -x /tmp/bw/usr/bin/bwrap ] && export PATH=/tmp/bw/usr/bin:$PATH
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
# plant ATTACK [TREE]: the attack of the dev/rehearsal/attacks.py this directory imports appended
# to TREE's nf4kernel/__init__.py (default: this checkout's).
plant() {
  python3 -c 'import sys; from pathlib import Path; from dev.rehearsal import attacks
try: attacks.plant(Path(sys.argv[2]), sys.argv[1])
except ValueError as error: sys.exit(f"plant: {error}")' "$1" "${2:-.}"
}
timed() { local start=$SECONDS; "$@"; local code=$?; echo "[$* -> exit $code in $((SECONDS - start)) s]"; return $code; }
# gpu.yml's two commands that the two-GPU steps run beside each other, in the current checkout:
# its test job, and the gate's measurement of HEAD's kernel (sandboxed) into JSON.
# on_gpu GPU COMMAND...: on that GPU alone, on its share of the host's cores (the JIT loop's split),
# so that lanes beside each other keep to their own cores (the trusted clock pins its processes).
on_gpu() {
  local gpu=$1 cpus; shift
  cpus=$(bash "$TREE/tools/gpu-runner/gpu-cpus.sh" "$gpu" "$(nvidia-smi -L | wc -l)") || return 2
  CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" "$@"
}
test_job() { python3 -m harness gpu-tests . -- -q -p no:cacheprovider; }
gate_measure() { python3 -m harness gate --measure-only --kernel HEAD --json "$1"; }
run_step() {
  local step=$1
  echo "=== $step"
  case $step in
    env)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
      python3 -c "import sys, torch, triton, bitsandbytes; print(sys.version.split()[0], torch.__version__, triton.__version__, bitsandbytes.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/env.txt" ;;
    tests) python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short tests > "$OUT/tests.log" 2>&1; tail -n 40 "$OUT/tests.log" ;;
    gpu-tests) python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short -m gpu tests > "$OUT/gpu-tests.log" 2>&1; tail -n 15 "$OUT/gpu-tests.log" ;;
    unsloth-patch)
      # nf4kernel.patch() under the real Unsloth. The pytest test runs
      # tests/unsloth_under_the_patch.py in a process of its own, once (47 s on an H100 when it ran
      # alone); its JSON is kept from the test's temporary directory.
      timed python3 -m pytest -q -p no:cacheprovider -rsfE --tb=short --basetemp /tmp/unsloth-patch tests/test_patching.py -k unsloth 2>&1 | tee "$OUT/unsloth-patch-pytest.log" | tail -n 8
      find /tmp/unsloth-patch -name result.json -exec cp {} "$OUT/unsloth-under-the-patch.json" \; 2>/dev/null ;;
    nox-tests) python3 -m nox --no-venv -s tests -- -q -p no:cacheprovider -rfE --tb=short > "$OUT/nox-tests.log" 2>&1; echo "nox exit $?"; tail -n 30 "$OUT/nox-tests.log" ;;
    host-ab:*)
      # The planned call's host time, this tree against REV's nf4kernel, judged against an
      # unchanged torch call in each process (studies/probes/host_ab.py). host-ab:REV[:PAIRS]
      spec=${step#host-ab:}; rev=${spec%%:*}; pairs=${spec#*:}; [ "$pairs" = "$spec" ] && pairs=16
      mkdir -p "/tmp/before-$rev" && git archive "$rev" nf4kernel | tar -x -C "/tmp/before-$rev" || exit 1
      timed python3 -m studies.probes.host_ab "/tmp/before-$rev" --pairs "$pairs" --cpu 5 --json "$OUT/host-ab.json" 2>&1 | tee "$OUT/host-ab.log" | tail -n 3 ;;
    host-handles:*)
      # Each private handle of nf4kernel/_triton_compat.py off in turn against all on, N rounds.
      timed python3 -m studies.probes.host_ab --each-handle --pairs "${step#host-handles:}" --cpu 5 --json "$OUT/host-handles.json" 2>&1 \
        | tee "$OUT/host-handles.log" | tail -n 14 ;;
    ruler)
      # The asv suite's ruler on one weight with every baseline (Unsloth's classic path in its own
      # process included): the figures one asv run records, printed as JSON.
      timed python3 -c "import json; from benchmarks import _ruler; print(json.dumps(_ruler.measure(shapes=['4096x1024'], dtypes=['bfloat16'])))" \
        > "$OUT/ruler.log" 2>&1; tail -n 4 "$OUT/ruler.log" | cut -c1-600 ;;
    repo)
      [ -d /tmp/repo/.git ] || git clone -q -b main "$TREE/.gpu-bundle/repo.bundle" /tmp/repo || exit 1
      cd /tmp/repo && export PYTHONPATH=/tmp/repo:/tmp/site && git log --oneline -1 ;;
    bench) timed python3 -m nox --no-venv -s bench > "$OUT/bench.log" 2>&1; grep -E "^bench:|\[.*exit" "$OUT/bench.log" | tail -n 8 ;;
    backfill:*)
      timed python3 -m nox --no-venv -s backfill -- "${step#backfill:}" --store > "$OUT/backfill.log" 2>&1
      grep -E "^backfill:|^  skipped|\[.*exit" "$OUT/backfill.log" | tail -n 25 ;;
    regression)
      # Two scratch commits on top of main, never pushed: a planted ~2x slowdown (every planned
      # launch made twice) and a no-op. The first must exit 1 naming what got slower, the second 0.
      base=$(git rev-parse main)
      git checkout -q -B scratch-slow "$base" && git apply dev/rehearsal/plants/2x.patch \
        && git -c user.name=gpu -c user.email=gpu@localhost commit -qam "scratch: every planned launch twice (planted 2x)"
      git checkout -q -B scratch-noop "$base" && git -c user.name=gpu -c user.email=gpu@localhost commit -q --allow-empty -m "scratch: no-op"
      git checkout -q main
      timed python3 -m nox --no-venv -s regression -- "$base" scratch-slow > "$OUT/regression-slow.log" 2>&1
      tail -n 12 "$OUT/regression-slow.log"
      timed python3 -m nox --no-venv -s regression -- "$base" scratch-noop > "$OUT/regression-noop.log" 2>&1
      tail -n 6 "$OUT/regression-noop.log" ;;
    power-noop:*|power-ladder)
      # The regression check's power: no-op regression runs and the planted ladder
      # (studies/power.py); each run lands in $OUT/power/runs.jsonl as it ends.
      what=${step#power-}; what=${what%%:*}; runs=${step#power-noop:}
      [ "$what" = noop ] && extra=(--runs "$runs") || extra=()
      timed python3 -m studies.power "$what" --out "$OUT/power" "${extra[@]}" > "$OUT/power-$what.log" 2>&1
      tail -n 20 "$OUT/power-$what.log" ;;
    results) tar czf "$OUT/asv-results.tgz" .asv/results benchmarks/history && ls -la "$OUT" ;;
    main-job)
      # history.yml's measuring step exactly (python -m nox --no-venv -s bench), in a fresh clone of
      # the bundled main, the offline packages alone on the path; its results and log come back.
      clone=/tmp/main-job-$$
      git clone -q -b main "$TREE/.gpu-bundle/repo.bundle" "$clone" || exit 1
      (cd "$clone" && git log --oneline -1 && PYTHONPATH=/tmp/site timed python -m nox --no-venv -s bench) > "$OUT/main-job.log" 2>&1
      tar czf "$OUT/main-job-results.tgz" -C "$clone" .asv/results
      grep -E "^bench:|exit .* in [0-9]+ s\]" "$OUT/main-job.log" | tail -n 8 ;;
    rehearse:*)
      # A fresh clone of the bundled main (git bundle create .gpu-bundle/repo.bundle main), the
      # offline packages only on the path (not this tree), then the scenario; its logs in one archive
      # (the device returns few files).
      # rehearse:SCENARIO[:RUNNERS]: RUNNERS jobs at a time, one GPU each (a fleet on this host);
      # rehearse:SCENARIO@GPUS: its runners on those GPUs (0,1), beside a rehearsal on the others.
      # Two rehearsals on one GPU share its cores too (each clock pins to its share's first cores):
      # their speed figures say nothing (self-pass's gate passed so beside slow at 6ffb2e0).
      spec=${step#rehearse:}; at=(); case $spec in *@*) at=(--gpus "${spec#*@}"); spec=${spec%@*} ;; esac
      scenario=${spec%%:*}; runners=${spec#*:}; [ "$runners" = "$spec" ] && runners=1
      [ ${#at[@]} -gt 0 ] || at=(--runners "$runners")
      clone=/tmp/rehearse-$scenario-$$
      git clone -q -b main "$TREE/.gpu-bundle/repo.bundle" "$clone" || exit 1
      command -v python >/dev/null || { mkdir -p /tmp/pybin && ln -sf "$(command -v python3)" /tmp/pybin/python && export PATH=/tmp/pybin:$PATH && echo "(no python on PATH: linked python3)"; }
      (cd "$clone" && git log --oneline -1 && PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site timed python3 -m nox --no-venv -s rehearse -- \
        "$scenario" "${at[@]}" --out "/tmp/rehearsal-$scenario" --timeout "${REHEARSAL_TIMEOUT:-540}") > "$OUT/rehearse-$scenario.log" 2>&1
      tar czf "$OUT/rehearse-$scenario.tgz" -C /tmp "rehearsal-$scenario"
      grep -E "^rehearsal |exit .* in [0-9]+ s\]" "$OUT/rehearse-$scenario.log" | tail -n 12 ;;
    node-closed)
      # The JIT loop closes every other GPU's device node to a job's cgroup (DevicePolicy=closed):
      # does nvidia-smi, gpu.yml's first step, still exit 0, and does CUDA see its one GPU? With
      # systemd as PID 1, the loop's own properties; else bubblewrap, the other nodes absent, then
      # present but unopenable (a mode-000 file, as an unprivileged user: EACCES where the cgroup
      # gives EPERM). Everything in node-closed.txt.
      {
        echo "pid 1: $(ps -p 1 -o comm=)"; nvidia-smi -L; echo "nvidia-smi exit $?"
        minor=$(nvidia-smi -i 0 -q | awk -F: '/Minor Number/ {gsub(/ /, "", $2); print $2}')
        uuid=$(nvidia-smi -i 0 --query-gpu=uuid --format=csv,noheader)
        echo "GPU 0: /dev/nvidia$minor $uuid"
        cuda_check=(env CUDA_VISIBLE_DEVICES="$uuid" python3 -c "import torch; print('torch sees', torch.cuda.device_count(), torch.cuda.get_device_name(), torch.ones(1, device='cuda').item())")
        if [ "$(ps -p 1 -o comm=)" = systemd ]; then
          closed=(systemd-run --quiet --wait --pipe -p DevicePolicy=closed -p "DeviceAllow=/dev/nvidia$minor rw" -p "DeviceAllow=/dev/nvidiactl rw"
            -p "DeviceAllow=/dev/nvidia-uvm rw" -p "DeviceAllow=/dev/nvidia-uvm-tools rw")
          "${closed[@]}" nvidia-smi; echo "systemd DevicePolicy=closed: nvidia-smi exit $?"
          "${closed[@]}" "${cuda_check[@]}"; echo "systemd DevicePolicy=closed: torch exit $?"
        fi
        shared=(--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --dev-bind "/dev/nvidia$minor" "/dev/nvidia$minor")
        for node in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do [ -e "$node" ] && shared+=(--dev-bind "$node" "$node"); done
        bwrap "${shared[@]}" nvidia-smi -L; echo "other nodes absent: nvidia-smi exit $?"
        bwrap "${shared[@]}" nvidia-smi > /dev/null; echo "other nodes absent: nvidia-smi (table) exit $?"
        bwrap "${shared[@]}" "${cuda_check[@]}"; echo "other nodes absent: torch exit $?"
        : > /tmp/closed-node && chmod 000 /tmp/closed-node
        unopenable=("${shared[@]}")
        for node in /dev/nvidia[0-9]*; do [ "$node" = "/dev/nvidia$minor" ] || unopenable+=(--ro-bind /tmp/closed-node "$node"); done
        as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
        "${as_nobody[@]}" bwrap "${unopenable[@]}" nvidia-smi -L; echo "other nodes unopenable, as nobody: nvidia-smi exit $?"
        "${as_nobody[@]}" bwrap "${unopenable[@]}" nvidia-smi > /dev/null; echo "other nodes unopenable, as nobody: nvidia-smi (table) exit $?"
        "${as_nobody[@]}" bwrap "${unopenable[@]}" env HOME=/tmp "${cuda_check[@]}"; echo "other nodes unopenable, as nobody: torch exit $?"
      } > "$OUT/node-closed.txt" 2>&1
      grep -E "exit|pid 1|GPU 0" "$OUT/node-closed.txt" ;;
    beside:*)
      # The regression check's no-op verdict on GPU 0 (studies.power noop, N runs)
      # while GPU 1 runs gpu.yml's test job or the gate's measurement, in turn (tests, gate, gate),
      # until the no-op runs end. After `repo` (the clone). power's runs.jsonl holds each run
      # (started at the epoch second its name ends with); neighbour.log what GPU 1 ran when.
      runs=${step#beside:}; mkdir -p "$OUT/beside"; rm -f /tmp/beside-done
      (
        n=0
        while [ ! -e /tmp/beside-done ]; do
          n=$((n + 1)); start=$(date +%s)
          if [ $((n % 3)) = 1 ]; then
            what=tests; CUDA_VISIBLE_DEVICES=1 test_job > "$OUT/beside/neighbour-$n-tests.log" 2>&1
          else
            what=gate; CUDA_VISIBLE_DEVICES=1 gate_measure "$OUT/beside/neighbour-$n-gate.json" > "$OUT/beside/neighbour-$n-gate.log" 2>&1
          fi
          code=$?; echo "$n $what $start $(date +%s) exit $code" >> "$OUT/beside/neighbour.log"
        done
      ) &
      neighbour=$!
      sleep 20  # the neighbour's first job under way before the first no-op run starts
      CUDA_VISIBLE_DEVICES=0 timed python3 -m studies.power noop --runs "$runs" --out "$OUT/beside/noop" > "$OUT/beside/noop.log" 2>&1
      touch /tmp/beside-done; wait "$neighbour"
      tail -n 8 "$OUT/beside/noop.log"; cat "$OUT/beside/neighbour.log"
      grep -h "^nf4kernel vs Unsloth" "$OUT"/beside/neighbour-*-gate.log ;;
    gate-beside-tests|gate-beside-tests:pinned)
      # The gate's interval on GPU 0 alone, then while GPU 1 runs gpu.yml's test job (gates one after
      # another until it ends), then alone again: the order confound of a machine's first run is on
      # both sides. :pinned gives each side its GPU's share of the cores (taskset -c with
      # tools/gpu-runner/gpu-cpus.sh, as the JIT loop's AllowedCPUs=). After `repo`. Everything in
      # $OUT/gate-beside-tests[-pinned]/, the verdict lines in its summary.txt.
      pin=${step#gate-beside-tests}; dir="$OUT/gate-beside-tests${pin:+-pinned}"; mkdir -p "$dir"
      on() {  # on GPU COMMAND...: CUDA_VISIBLE_DEVICES=GPU, in a subshell pinned to its cores if asked
        local gpu=$1; shift
        (
          [ -z "$pin" ] || taskset -pc "$(bash "$TREE/tools/gpu-runner/gpu-cpus.sh" "$gpu" 2)" "$BASHPID" > /dev/null || exit 1
          CUDA_VISIBLE_DEVICES=$gpu "$@"
        )
      }
      gate_on_0() {
        on 0 gate_measure "$dir/$1.json" > "$dir/$1.log" 2>&1
        local code=$?
        echo "$1 exit $code at $(date +%s): $(grep -h '^nf4kernel vs Unsloth' "$dir/$1.log" | head -n 1)" | tee -a "$dir/summary.txt"
      }
      gate_on_0 alone-1
      on 1 test_job > "$dir/tests.log" 2>&1 &
      tests=$!; sleep 10; n=0
      while kill -0 "$tests" 2>/dev/null; do n=$((n + 1)); gate_on_0 "beside-tests-$n"; done
      wait "$tests"; code=$?; echo "the test job on GPU 1: exit $code at $(date +%s)" | tee -a "$dir/summary.txt"
      gate_on_0 alone-2 ;;
    clock:*)
      # The gate's verdict (python -m harness gate --kernel REF) on scratch
      # commits over main, each planted with one attack of dev/rehearsal/attacks.py, in lanes of one
      # GPU each, beside each other: clock:LANE0/LANE1, a lane being items joined by commas, an item
      # `honest` (main as it is) or an attack's name. After `repo`. (judged-at: gives an older
      # tree's verdict.)
      # Each run's record and log (gpuLANE-N-ITEM.*, N its place in the lane) come back in one
      # archive; verdicts.txt holds each exit and line.
      # clock:LANES@G: the lanes on GPUs G, G+1...
      spec=${step#clock:}; lane=0; case $spec in *@*) lane=${spec#*@}; spec=${spec%@*} ;; esac
      mkdir -p /tmp/clock-runs; base=$(git rev-parse main)
      for item in $(echo "$spec" | tr ',/' '  '); do
        attack=$item; [ "$attack" = honest ] && continue
        git rev-parse -q --verify "scratch-$attack" > /dev/null && continue
        git checkout -q -B "scratch-$attack" "$base" && plant "$attack" \
          && git -c user.name=gpu -c user.email=gpu@localhost commit -qam "scratch: $attack" || exit 1
      done
      git checkout -q main
      for items in $(echo "$spec" | tr '/' ' '); do
        (
          n=0
          for item in $(echo "$items" | tr ',' ' '); do
            attack=$item; ref=main; [ "$attack" = honest ] || ref="scratch-$attack"
            n=$((n + 1)); name="gpu$lane-$n-$item"  # an item may come twice in a lane: each run keeps its files
            start=$SECONDS
            on_gpu "$lane" python3 -m harness gate --kernel "$ref" \
              --json "/tmp/clock-runs/$name.json" > "/tmp/clock-runs/$name.log" 2>&1
            code=$?
            echo "gpu $lane run $n $item exit $code in $((SECONDS - start)) s: $(grep -ahE "^(PASS|FAIL|nf4kernel vs Unsloth)" "/tmp/clock-runs/$name.log" | tr "\n" " " | cut -c1-400)" \
              | tee -a "$OUT/verdicts.txt"
          done
        ) &
        lane=$((lane + 1))
      done
      wait
      tar czf "$OUT/clock-runs.tgz" -C /tmp clock-runs ;;
    judged-at:*)
      # The gate of another commit's harness on this tree's attacks: judged-at:REV:ITEM,ITEM... (an
      # item `honest` or an attack of dev/rehearsal/attacks.py), each planted on a scratch commit
      # over REV and measured by REV's own `python3 -m harness gate --no-classic --kernel` (the flag
      # an older tree needs to skip its in-process path; today's gate ignores it) in a
      # clone at REV: the verdict an attack gets from that harness. After `repo`. Verdicts in
      # judged-at.txt, each run's record and log in the archive.
      spec=${step#judged-at:}; rev=${spec%%:*}; items=${spec#*:}
      clone=/tmp/judged-$rev; mkdir -p /tmp/judged-runs
      [ -d "$clone/.git" ] || git clone -q /tmp/repo "$clone" || exit 1
      for item in $(echo "$items" | tr ',' ' '); do
        ref=$rev
        if [ "$item" != honest ]; then
          ref=scratch-$item
          # planted with this tree's attacks.py (REV's may lack the attack): from /tmp/repo, not the clone
          (cd "$clone" && git checkout -q -B "$ref" "$rev") && (cd /tmp/repo && plant "$item" "$clone") \
            && (cd "$clone" && git -c user.name=gpu -c user.email=gpu@localhost commit -qam "scratch: $item") || exit 1
        fi
        (cd "$clone" && git checkout -q "$rev" 2>/dev/null || git checkout -q --detach "$rev")
        name="$rev-$item"; start=$SECONDS
        # JUDGED_TIMEOUT_S (default 480): a candidate that never gets ready waits out the clock's 900 s set-up
        (cd "$clone" && PYTHONPATH=$clone:/tmp/site timeout "${JUDGED_TIMEOUT_S:-480}" python3 -m harness gate --no-classic \
          --kernel "$ref" --json "/tmp/judged-runs/$name.json") > "/tmp/judged-runs/$name.log" 2>&1
        code=$?
        echo "judged at $rev: $item exit $code in $((SECONDS - start)) s: $(grep -ahE "^(PASS|FAIL|nf4kernel vs Unsloth)|candidate processes|kept a CUDA" "/tmp/judged-runs/$name.log" | tr "\n" " " | cut -c1-500)" \
          | tee -a "$OUT/judged-at.txt"
      done
      tar czf "$OUT/judged-runs.tgz" -C /tmp judged-runs ;;
    test-job:*)
      # gpu.yml's test job (`python -m harness gpu-tests ../candidate`, from the trusted checkout:
      # /tmp/repo) on each item: `honest` (main) or an attack of dev/rehearsal/attacks.py planted on a
      # scratch commit over main in a clone of its own. After `repo`. Exits in test-job.txt, logs in
      # the archive.
      items=${step#test-job:}; mkdir -p /tmp/test-job-runs
      for item in $(echo "$items" | tr ',' ' '); do
        cand=/tmp/candidate-$item
        [ -d "$cand/.git" ] || git clone -q /tmp/repo "$cand" || exit 1
        if [ "$item" != honest ]; then
          (cd /tmp/repo && plant "$item" "$cand") \
            && (cd "$cand" && git -c user.name=gpu -c user.email=gpu@localhost commit -qam "scratch: $item") || exit 1
        fi
        start=$SECONDS
        (cd /tmp/repo && python3 -m harness gpu-tests "$cand" -- -q) > "/tmp/test-job-runs/$item.log" 2>&1
        code=$?
        echo "test job on $item: exit $code in $((SECONDS - start)) s: $(grep -ahE "^gpu-tests|passed|failed" "/tmp/test-job-runs/$item.log" | tr "\n" " " | cut -c1-600)" \
          | tee -a "$OUT/test-job.txt"
      done
      tar czf "$OUT/test-job-runs.tgz" -C /tmp test-job-runs ;;
    gap@*)
      # What separates the clock's figure from the in-process one, on GPU G (studies/probes/clock_gap.py).
      gpu=${step#gap@}
      timed on_gpu "$gpu" python3 -m studies.probes.clock_gap --json "$OUT/clock-gap.json" > "$OUT/clock-gap.log" 2>&1
      tail -n 6 "$OUT/clock-gap.log" ;;
    gaps@*)
      # Where the clock's call processes lose time: studies/probes/clock_gap.py on GPU G on
      # its share of the cores, on one core (as the clock pins a call process), on one core with CUDA
      # spinning while it waits, and on one core while the core's other thread spins (what the
      # clock's spinning beside a call costs where they share a core). lscpu's cores first.
      gpu=${step#gaps@}; dir=$OUT/gaps; mkdir -p "$dir"; lscpu -e > "$dir/lscpu.txt" 2>&1
      cpus=$(bash "$TREE/tools/gpu-runner/gpu-cpus.sh" "$gpu" "$(nvidia-smi -L | wc -l)") || exit 1
      one=${cpus%%,*}
      other=$(lscpu -p=CPU,CORE | awk -F, -v c="$one" '/^#/ {next} {core[$1] = $2} END {for (x in core) if (x != c && core[x] == core[c]) {print x; exit}}')
      echo "GPU $gpu: cores $cpus; one core $one, its other thread ${other:-none}" | tee "$dir/cores.txt"
      probe() {
        local name=$1; shift
        CUDA_VISIBLE_DEVICES=$gpu timed "$@" --json "$dir/$name.json" > "$dir/$name.log" 2>&1
        echo "--- $name"; grep -A5 "^cores" "$dir/$name.log"
      }
      probe share taskset -c "$cpus" python3 -m studies.probes.clock_gap
      probe one-core taskset -c "$one" python3 -m studies.probes.clock_gap
      probe one-core-spin taskset -c "$one" python3 -m studies.probes.clock_gap --spin
      if [ -n "$other" ]; then
        taskset -c "$other" python3 -c "while True: pass" & spinner=$!
        probe one-core-beside-a-spinning-thread taskset -c "$one" python3 -m studies.probes.clock_gap
        kill "$spinner"
      fi ;;
    aa-regression:* | regression-plant:*)
      # The A/A: gpu.yml's regression job (nox -s regression -- BASE HEAD) of main against a
      # no-op commit over it, N times on GPU G, in a clone of its own: aa-regression:N@G. With
      # regression-plant:PLANT@G, once against main with dev/rehearsal/plants/PLANT.patch applied
      # (host-sync, 2x: what it must call slower). Each run's exit, wall time and verdict in
      # aa-regression.txt; its summary, record and log in the archive, one folder per step.
      # AA_PROCESSES=P: P call processes per kernel (regression's --processes), instead of the policy's.
      spec=${step#*:}; runs=${spec%@*}; gpu=${spec#*@}; [ "$gpu" = "$spec" ] && gpu=0
      head=scratch-noop; case $step in regression-plant:*) head=scratch-$runs; runs=1 ;; esac
      clone=/tmp/aa-$gpu; mkdir -p /tmp/aa-logs; logs=$(mktemp -d "/tmp/aa-logs/gpu-$gpu-$head-XXXX")
      [ -d "$clone/.git" ] || git clone -q -b main "$TREE/.gpu-bundle/repo.bundle" "$clone" || exit 1
      (
        cd "$clone" && git checkout -q -B "$head" main || exit 1
        if [ "$head" = scratch-noop ]; then
          git -c user.name=gpu -c user.email=gpu@localhost commit -q --allow-empty -m "scratch: no-op"
        else
          git apply "dev/rehearsal/plants/${head#scratch-}.patch" && git -c user.name=gpu -c user.email=gpu@localhost commit -qam "scratch: $head"
        fi && git checkout -q main
      ) || exit 1
      for i in $(seq "$runs"); do
        start=$SECONDS
        (cd "$clone" && PYTHONPATH=/tmp/site on_gpu "$gpu" python3 -m nox --no-venv -s regression -- main "$head" \
          ${AA_PROCESSES:+--processes "$AA_PROCESSES"} --summary "$logs/run-$i.md" --record "$logs/run-$i.json") > "$logs/run-$i.log" 2>&1
        code=$?
        echo "gpu $gpu $head run $i exit $code in $((SECONDS - start)) s: $(grep -ahE "^regression: (PASS|FAIL)" "$logs/run-$i.log" | cut -c1-200)" \
          | tee -a "$OUT/aa-regression.txt"
      done
      gzip -f "$logs"/run-*.json; tar czf "$OUT/$(basename "$logs").tgz" -C /tmp/aa-logs "$(basename "$logs")" ;;
    gate5)
      for i in 1 2 3 4 5; do
        python3 -m harness gate --json "$OUT/gate-$i.json" > "/tmp/gate-$i.log" 2>&1; echo "gate run $i exit $?" | tee -a "$OUT/gate-runs.log"
        cat "/tmp/gate-$i.log" >> "$OUT/gate-runs.log"
      done
      tail -n 25 "$OUT/gate-runs.log" ;;
    gate10)
      # Ten gate runs in a row (no classic path: it is not part of the verdict), each record kept:
      # the spread of medians, intervals and added rounds on one machine, with exit codes and wall
      # times. First, what NVML and nvidia-smi answer here (recorded strings for the parser's tests).
      {
        python3 -c "import pynvml; print('pynvml', pynvml.__file__)" 2>&1 | tail -n 1
        q=clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,enforced.power.limit,clocks_event_reasons.active
        nvidia-smi --query-gpu=$q --format=csv,noheader,nounits; echo "nvidia-smi exit $?"
      } > "$OUT/gpu-state-probe.txt" 2>&1
      for i in 1 2 3 4 5 6 7 8 9 10; do
        start=$SECONDS
        python3 -m harness gate --json "$OUT/gate-$i.json" > "$OUT/gate-$i.log" 2>&1
        echo "gate run $i exit $? in $((SECONDS - start)) s" | tee -a "$OUT/gate10.log"
      done
      grep -h "^nf4kernel vs Unsloth\|^none of\|rounds were taken\|^PASS\|^FAIL" "$OUT"/gate-*.log | tail -n 40 ;;
    planted)
      # The gate against planted slowdowns, after an unplanted run of the same tree on this machine:
      # 2x (every planned launch twice) must exit 1 (below the threshold); ~25% (one in two twice) may
      # clear it (a slowdown against the base is the regression check's). Patched in place with git
      # apply (no repository needed) and undone.
      python3 -m harness gate --json "$OUT/planted-base.json" > "$OUT/planted-base.log" 2>&1
      echo "unplanted base: exit $?" | tee "$OUT/planted.log"
      for plant in 2x 25pct; do
        git apply "dev/rehearsal/plants/$plant.patch" || exit 1
        python3 -m harness gate --json "$OUT/planted-$plant.json" > "$OUT/planted-$plant.log" 2>&1
        echo "planted $plant: exit $?" | tee -a "$OUT/planted.log"
        git apply -R "dev/rehearsal/plants/$plant.patch" || exit 1
      done
      grep -h "^nf4kernel vs Unsloth\|^PASS\|^FAIL" "$OUT"/planted-*.log | tail -n 20 ;;
    sweep) python3 -m studies.sweep --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" ;;
    pdl) timed python3 -m studies.probes.pdl_probe 2>&1 | tee "$OUT/pdl-probe.txt" ;;
    ceiling) timed python3 -m studies.probes.challenge_ceiling 2>&1 | grep -v "^Unsloth\|^==\|^ \\\\\|^O^O\|^\"-" | tee "$OUT/challenge-ceiling.log" ;;
    gate3)
      for i in 1 2 3; do
        python3 -m harness gate --json "$OUT/gate-$i.json" > "$OUT/gate-$i.log" 2>&1
        echo "gate run $i exit $?" | tee -a "$OUT/gate3.log"
      done
      grep -h "^nf4kernel vs Unsloth\|^PASS\|^FAIL" "$OUT"/gate-*.log | tail -n 12 ;;
    perf) python3 -m studies.perf --json "$OUT/perf.json" 2>&1 | grep -v "^Unsloth\|^==\|^ \\\\\|^O^O\|^\"-" | tee "$OUT/perf.log" ;;
    *) python3 -m "$step" 2>&1 | tee "$OUT/$step.log" ;;
  esac
}
# A step ending in & runs in the background, beside the next ones (each on GPUs of its own: the
# rehearse step's @GPUS, the lanes' CUDA_VISIBLE_DEVICES); `wait` waits for those started so far.
# Steps joined by + run one after the other (in the background: A+B&).
for step in "$@"; do
  case $step in
    *'&') (IFS=+ read -ra chain <<< "${step%&}"; for one in "${chain[@]}"; do run_step "$one"; done) & ;;
    wait) wait ;;
    *) run_step "$step" ;;
  esac
done
wait
