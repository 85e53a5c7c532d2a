#!/usr/bin/env bash
# Progress of a DETACH=1 certify_remote_vulkan.sh run on this machine: the runner's step lines so
# far; once the run has finished, its results (runner.txt, run.tar.xz, compat.*) are copied into
# OUT_DIR and the exit status line is printed.
#   usage: poll_detached.sh OUT_DIR
set -uo pipefail
stash=/tmp/lanes-stash/vulkan-detached
out=$1; mkdir -p "$out"
[ -f "$stash/console.txt" ] || { echo "no detached run on this machine (machine started afresh?)"; exit 3; }
grep -E '^\[runner\]|^route vs|compatible|exit status|rror' "$stash/console.txt" | tail -25
if grep -q 'detached run exit status' "$stash/console.txt"; then
  cp "$stash"/out/* "$out"/ 2>/dev/null
  echo "finished; results in $out"
else
  # By the pid the start recorded: a pattern would also match a command line that merely names the script.
  echo "still running: $(ps -o etime= -p "$(cat "$stash/pid" 2>/dev/null)" 2>/dev/null || echo '?') elapsed"
fi
