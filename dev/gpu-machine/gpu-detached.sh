#!/usr/bin/env bash
# A device-machine job longer than one device call (10 minutes at most): `start` runs
# dev/gpu-machine/gpu-session.sh's steps in a process session of their own, which the device tool leaves
# running after the call returns, for as long as the machine is held; `wait`, in the next call (sent
# within the machine's 30 s idle window, or the machine and the job are gone), waits for it and
# brings back what it wrote. Each call waits at most WAIT_S seconds (default 540), then returns, so
# a long job takes as many `wait` calls as it needs.
#   bash dev/gpu-machine/gpu-detached.sh start env rehearse:noop   # first call: starts the steps, then waits
#   bash dev/gpu-machine/gpu-detached.sh wait                      # every later call: waits, then collects
# The job writes under /tmp/detached/out; each call brings it back as $OUT/detached-out.tgz.
# gpu-session.sh is copied first: the next call replaces the working tree under a running bash.
set -uo pipefail
KEEP=/tmp/detached
OUT=${OUT:-/tmp/out}
WAIT_S=${WAIT_S:-540}
case ${1:-} in
  start)
    shift
    [ -e "$KEEP/pid" ] && { echo "a detached job already ran on this machine ($KEEP)"; exit 2; }
    mkdir -p "$KEEP/out"
    cp dev/gpu-machine/gpu-session.sh "$KEEP/gpu-session.sh"
    # shellcheck disable=SC2016  # expanded by the inner bash
    OUT=$KEEP/out REHEARSAL_TIMEOUT=${REHEARSAL_TIMEOUT:-1500} setsid nohup bash -c \
      'bash "$0" "$@"; echo $? > '"$KEEP/exit" "$KEEP/gpu-session.sh" "$@" > "$KEEP/session.log" 2>&1 < /dev/null &
    echo $! > "$KEEP/pid"
    echo "started: $* (pid $(cat "$KEEP/pid"), $(date -u +%H:%M:%S) UTC)" ;;
  wait) [ -e "$KEEP/pid" ] || { echo "no detached job on this machine: it went back, or none was started"; exit 2; } ;;
  *) echo "usage: $0 start STEP... | wait"; exit 2 ;;
esac
start=$SECONDS
while [ ! -e "$KEEP/exit" ] && [ $((SECONDS - start)) -lt "$WAIT_S" ]; do sleep 5; done
# One archive: the device brings back at most 8 files a call (a rehearsal's logs alone are more).
tar czf "$OUT/detached-out.tgz" -C "$KEEP/out" . 2>/dev/null
cp "$KEEP/session.log" "$OUT/detached-session.log"
tail -n 25 "$KEEP/session.log"
newest=$(ls -t "$KEEP"/out/*.log 2>/dev/null | head -n 1)
[ -n "$newest" ] && { echo "--- the end of $(basename "$newest")"; tail -n 12 "$newest"; }
if [ -e "$KEEP/exit" ]; then
  echo "detached job ended: exit $(cat "$KEEP/exit") ($(date -u +%H:%M:%S) UTC)"
  exit "$(cat "$KEEP/exit")"
fi
echo "detached job still running after this call's ${WAIT_S} s ($(date -u +%H:%M:%S) UTC): call \`wait\` again within 30 s"
exit 100
