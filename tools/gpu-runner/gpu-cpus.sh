#!/usr/bin/env bash
# gpu-cpus.sh INDEX COUNT: the CPUs of GPU INDEX's share of this host, when COUNT GPUs split the
# cores this process may run on evenly, each core with all its threads (lscpu's core ids), as a list
# for systemd's AllowedCPUs= or taskset -c. Used by jit-runner.sh (installed beside it) and the
# rehearsal's fleet (dev/rehearsal/gpu_leases.py), so one job's test workers can't crowd the timing
# loops of a gate on another GPU (benchmarks/results/fleet-two-h200). Exit 2: bad arguments, or too
# few cores for COUNT GPUs.
set -euo pipefail
index=${1:-} count=${2:-}
case $index$count in *[!0-9]* | "") echo "usage: $0 INDEX COUNT (numbers)" >&2; exit 2 ;; esac
[ -n "$index" ] && [ -n "$count" ] && [ "$index" -lt "$count" ] || { echo "usage: $0 INDEX COUNT, INDEX below COUNT" >&2; exit 2; }
# Only the CPUs this process may run on (a container's, a cgroup's), ranked by core in lscpu's order.
allowed=$(taskset -pc $$ | sed 's/.*: //')
cpus=$(lscpu -p=CPU,CORE | awk -F, -v i="$index" -v g="$count" -v allowed="$allowed" '
  BEGIN {
    n = split(allowed, parts, ",")
    for (k = 1; k <= n; k++) { m = split(parts[k], ends, "-"); for (c = ends[1] + 0; c <= ends[m] + 0; c++) ok[c] = 1 }
  }
  /^#/ || !(($1 + 0) in ok) { next }
  { rows++; cpu[rows] = $1; core[rows] = $2; if (!($2 in rank)) rank[$2] = cores++ }
  END { for (r = 1; r <= rows; r++) if (int(rank[core[r]] * g / cores) == i) list = list (list == "" ? "" : ",") cpu[r]; print list }')
[ -n "$cpus" ] || { echo "no CPU cores left for GPU $index: $count GPUs share too few cores (lscpu -p=CPU,CORE)" >&2; exit 2; }
echo "$cpus"
