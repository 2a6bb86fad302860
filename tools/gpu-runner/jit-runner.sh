#!/usr/bin/env bash
# The GPU host's runner loop: one just-in-time runner per job, each on a fresh workspace, home and
# temp directory, as an unprivileged user that can't read the token this loop holds. When the job
# ends, the runner is gone (GitHub removes a JIT runner after its one job) and so is everything the
# job wrote. Run as root by nf4kernel-gpu-runner@.service (beside this file), one loop per GPU, each
# pinned to its GPU; docs/self-hosted-runner.md.
#
# Environment (the service sets it):
#   GITHUB_ORG       the organization that owns the repository and the runner group
#   RUNNER_GROUP_ID  printed by configure-github.sh
#   RUNNER_TEMPLATE  an unpacked actions/runner release, never written to (default /opt/actions-runner)
#   GPU_TYPE         the GPU's type in .github/gpu-types.toml (h100, h200, t4): the runner's label gpu-<type>
#   GPU_INDEX        the GPU this loop's jobs get, as nvidia-smi numbers it (the unit's instance, %i):
#                    the only GPU device node the job's cgroup may open, and CUDA_VISIBLE_DEVICES (its UUID);
#                    the job's CPUs are this GPU's share of the host's cores
#   JOB_USER         the user jobs run as, owning nothing else (default gpu-job<GPU_INDEX>: one per
#                    GPU, so the jobs of two GPUs can't signal or read each other's processes)
#   JOB_ROOT         where each job's runner, home and temp are made and wiped (default /srv/gpu-job<GPU_INDEX>)
#   CREDENTIALS_DIRECTORY/github-token  set by systemd's LoadCredential=: a fine-grained token (or a
#                    GitHub App's) with "Self-hosted runners: read and write" on the organization and
#                    nothing else. It can register runners; the job user can't read it.
#   ONE_JOB=1        run one job and stop (for trying the setup by hand)
set -euo pipefail

: "${GITHUB_ORG:?}" "${RUNNER_GROUP_ID:?}" "${CREDENTIALS_DIRECTORY:?run under systemd with LoadCredential=github-token:...}"
: "${GPU_TYPE:?the GPU type, as named in .github/gpu-types.toml}" "${GPU_INDEX:?the GPU, as nvidia-smi numbers it}"
case $GPU_TYPE in *[!a-z0-9]* | "") echo "GPU_TYPE: lower-case letters and digits, not '$GPU_TYPE'" >&2; exit 2 ;; esac
case $GPU_INDEX in *[!0-9]* | "") echo "GPU_INDEX: a number, not '$GPU_INDEX'" >&2; exit 2 ;; esac
template=${RUNNER_TEMPLATE:-/opt/actions-runner}
job_user=${JOB_USER:-gpu-job$GPU_INDEX}
job_root=${JOB_ROOT:-/srv/gpu-job$GPU_INDEX}
labels="[\"self-hosted\", \"linux\", \"x64\", \"gpu\", \"gpu-$GPU_TYPE\"]"

# This loop's GPU: its UUID (CUDA_VISIBLE_DEVICES by UUID does not depend on CUDA's device order)
# and its device node's minor number, the one /dev/nvidiaN the job may open besides the driver's
# shared nodes. The other GPUs' nodes stay closed to the job's cgroup (DevicePolicy=closed).
gpu_uuid=$(nvidia-smi -i "$GPU_INDEX" --query-gpu=uuid --format=csv,noheader 2>/dev/null) || gpu_uuid=
gpu_minor=$(nvidia-smi -i "$GPU_INDEX" -q 2>/dev/null | awk -F: '/Minor Number/ {gsub(/ /, "", $2); print $2}') || gpu_minor=
[ -n "$gpu_uuid" ] && [ -n "$gpu_minor" ] || { echo "no GPU $GPU_INDEX here (nvidia-smi -i $GPU_INDEX)" >&2; exit 2; }
# This loop's CPUs: its GPU's even share of the host's cores (gpu-cpus.sh, installed beside this file).
gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || gpu_count=0
gpu_cpus=$("$(dirname "$0")/gpu-cpus.sh" "$GPU_INDEX" "$gpu_count") || exit 2
gpu_only=(-p "AllowedCPUs=$gpu_cpus" -p DevicePolicy=closed -p "DeviceAllow=/dev/nvidia$gpu_minor rw" -p "DeviceAllow=/dev/nvidiactl rw")
gpu_only+=(-p "DeviceAllow=/dev/nvidia-uvm rw" -p "DeviceAllow=/dev/nvidia-uvm-tools rw" --setenv CUDA_VISIBLE_DEVICES="$gpu_uuid")
# The kernel surface a job needs no part of: system calls of other architectures, personalities,
# set-uid files, real-time scheduling, module loading, the clock, swap, reboot, raw I/O. Namespaces
# and mounts stay: bubblewrap builds the PR's sandbox from them, and refuses the sandbox a nested user
# namespace itself (--disable-userns, harness/core/sandbox.py). Nothing here touches /proc, where a
# read-only or hidden entry would stop bubblewrap mounting the sandbox's own.
hardened=(-p SystemCallArchitectures=native -p LockPersonality=yes -p RestrictSUIDSGID=yes -p RestrictRealtime=yes)
hardened+=(-p ProtectKernelModules=yes -p ProtectClock=yes -p "SystemCallFilter=~@swap @reboot @raw-io @obsolete @cpu-emulation")

fresh_workspace() {
  rm -rf --one-file-system "$job_root"
  install -d -o "$job_user" -g "$job_user" -m 0700 "$job_root" "$job_root/home" "$job_root/tmp"
  cp -a "$template" "$job_root/runner"
  chown -R "$job_user:$job_user" "$job_root/runner"
}

jit_config() {
  # One registration, for one job; the name makes each runner traceable in the job's log.
  local name="gpu-$GPU_TYPE-$(hostname -s)-$GPU_INDEX-$(date +%s)"
  curl -fsS -X POST \
    -H "Authorization: Bearer $(cat "$CREDENTIALS_DIRECTORY/github-token")" \
    -H "Accept: application/vnd.github+json" \
    "https://api.github.com/orgs/$GITHUB_ORG/actions/runners/generate-jitconfig" \
    -d "{\"name\": \"$name\", \"runner_group_id\": $RUNNER_GROUP_ID, \"labels\": $labels, \"work_folder\": \"_work\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["encoded_jit_config"])'
}

while true; do
  fresh_workspace
  config=$(jit_config)
  # A transient unit of its own: on exit systemd kills every process the job left behind, and the
  # job sees its own /tmp, a read-only system, no way to gain privileges, its one GPU and its cores.
  systemd-run --wait --collect --quiet --unit "gpu-job$GPU_INDEX-$(date +%s)" "${gpu_only[@]}" "${hardened[@]}" \
    --uid "$job_user" --gid "$job_user" \
    -p PrivateTmp=yes -p ProtectSystem=strict -p ProtectHome=tmpfs -p NoNewPrivileges=yes \
    -p ReadWritePaths="$job_root" -p RuntimeMaxSec=3h \
    --setenv HOME="$job_root/home" --setenv TMPDIR="$job_root/tmp" \
    --setenv XDG_CACHE_HOME="$job_root/home/.cache" \
    "$job_root/runner/run.sh" --jitconfig "$config" || echo "job runner exited with $?"
  fresh_workspace # nothing a job wrote (caches, Triton kernels, pip --user) reaches the next job
  if [ "${ONE_JOB:-0}" = 1 ]; then break; fi
done
