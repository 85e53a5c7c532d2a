#!/usr/bin/env bash
# One job on a GPU host that outlives a device command (setsid), and its collection later: for work
# longer than one command may run, or started while later commands carry the rest of the inputs.
#   detached.sh start NAME CMD [ARG ...]   runs CMD in its own session and returns at once; CMD gets
#                                          $JOB_OUT (/tmp/lanes-stash/jobs/NAME/out) for its results
#   detached.sh wait NAME OUT SECONDS      waits up to SECONDS; prints the console's tail; once the job
#                                          has finished, copies its results into OUT and exits with
#                                          the job's status (3: still running, its results so far in
#                                          OUT/so-far; 4: no such job here)
set -uo pipefail
jobs=/tmp/lanes-stash/jobs
case "${1:-}" in
start)
  name=$2; shift 2
  rm -rf "${jobs:?}/$name"; mkdir -p "$jobs/$name/out"
  JOB_OUT="$jobs/$name/out" setsid nohup bash -c '"$@"; echo "job exit status $?"' bash "$@" \
    > "$jobs/$name/console.txt" 2>&1 < /dev/null &
  echo "started $name: pid $!, console $jobs/$name/console.txt"
  ;;
wait)
  name=$2 out=$3 deadline=$((SECONDS + $4))
  console="$jobs/$name/console.txt"
  [ -f "$console" ] || { echo "no job $name on this machine (started afresh?)"; exit 4; }
  until grep -q '^job exit status' "$console" || [ "$SECONDS" -ge "$deadline" ]; do sleep 3; done
  tail -n 40 "$console"
  status=$(sed -n 's/^job exit status \([0-9]*\)$/\1/p' "$console" | tail -1)
  if [ -z "$status" ]; then
    # What has finished so far travels back too: a slot that runs out keeps it.
    mkdir -p "$out/so-far"; cp -r "$jobs/$name/out/." "$out/so-far/"
    echo "$name: still running (results so far in $out/so-far)"; exit 3
  fi
  mkdir -p "$out"; cp "$console" "$out/$name.console.txt"; cp -r "$jobs/$name/out/." "$out/"
  exit "$status"
  ;;
*)
  echo "usage: detached.sh start NAME CMD [ARG ...] | wait NAME OUT SECONDS" >&2; exit 2
  ;;
esac
