#!/usr/bin/env bash
# gpu-cpus.sh INDEX COUNT: the CPUs of GPU INDEX's share of this host, when COUNT GPUs split its cores
# evenly, each core with all its threads (lscpu's core ids), as a list for systemd's AllowedCPUs= or
# taskset -c. Used by jit-runner.sh (installed beside it), so one job's test workers can't crowd the
# timing loops of a gate on another GPU (benchmarks/results/fleet-two-h200). Exit 2: bad arguments,
# or too few cores for COUNT GPUs.
set -euo pipefail
index=${1:-} count=${2:-}
case $index$count in *[!0-9]* | "") echo "usage: $0 INDEX COUNT (numbers)" >&2; exit 2 ;; esac
[ -n "$index" ] && [ -n "$count" ] && [ "$index" -lt "$count" ] || { echo "usage: $0 INDEX COUNT, INDEX below COUNT" >&2; exit 2; }
cpus=$(lscpu -p=CPU,CORE | awk -F, -v i="$index" -v g="$count" '
  /^#/ { next }
  { n++; cpu[n] = $1; core[n] = $2; if ($2 + 1 > cores) cores = $2 + 1 }
  END { for (r = 1; r <= n; r++) if (int(core[r] * g / cores) == i) list = list (list == "" ? "" : ",") cpu[r]; print list }')
[ -n "$cpus" ] || { echo "no CPU cores left for GPU $index: $count GPUs share too few cores (lscpu -p=CPU,CORE)" >&2; exit 2; }
echo "$cpus"
