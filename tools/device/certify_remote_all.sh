#!/usr/bin/env bash
# Both GPU lanes on one host in one detached session, longer than one device command may run:
# certify_remote_cuda.sh, then certify_remote_vulkan.sh (the Vulkan lane and the CUDA+Vulkan
# mixed route, bound to the CUDA run just made).
#   certify_remote_all.sh start CARRY VULKAN_CARRY [MODEL ...]
#                                                    returns at once (setsid: outlives the command);
#                                                    each MODEL is certified on both lanes after the
#                                                    embedded one (VULKAN_MODELS="..." names the
#                                                    Vulkan lane's instead) and routed
#   certify_remote_all.sh wait OUT_DIR SECONDS       progress; once finished, copies console.txt and
#                                                    the run/compat archives into OUT_DIR (exit 0,
#                                                    or 1 if a run failed), else exit 3 after SECONDS
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stash=/tmp/lanes-stash/all
case "${1:-}" in
start)
  rm -rf "$stash"; mkdir -p "$stash/out/cuda" "$stash/out/vulkan"
  carry=$2 vcarry=$3; shift 3
  # shellcheck disable=SC2206
  vulkan_models=(${VULKAN_MODELS-"$@"})
  # shellcheck disable=SC2016
  setsid nohup bash -c '
    here=$0 carry=$1 stash=$2 vcarry=$3 nv=$4; shift 4
    bash "$here/certify_remote_cuda.sh" "$carry" "$stash/out/cuda" "${@:nv+1}"; echo "cuda certification exit status $?"
    bash "$here/certify_remote_vulkan.sh" "$carry" "$vcarry" "$stash/out/vulkan" "${@:1:nv}"
    echo "vulkan certification and route exit status $?"
    echo "all finished"' "$here" "$carry" "$stash" "$vcarry" "${#vulkan_models[@]}" "${vulkan_models[@]}" "$@" \
    > "$stash/console.txt" 2>&1 < /dev/null &
  echo "started: console $stash/console.txt"
  ;;
wait)
  out=$2 deadline=$((SECONDS + $3))
  [ -f "$stash/console.txt" ] || { echo "no run on this machine (started afresh?)"; exit 4; }
  until grep -q "^all finished" "$stash/console.txt" || [ "$SECONDS" -ge "$deadline" ]; do sleep 5; done
  grep -E '^\[runner\]|exit status|^route |compatib|rror|^runner:' "$stash/console.txt" | tail -60
  grep -q "^all finished" "$stash/console.txt" || { echo "still running"; exit 3; }
  mkdir -p "$out"
  cp "$stash/console.txt" "$out/"
  for f in "$stash"/out/cuda/*.tar.xz* "$stash"/out/cuda/kl_probe.txt; do [ -e "$f" ] && cp "$f" "$out/cuda_$(basename "$f")"; done
  for f in "$stash"/out/vulkan/*.tar.xz*; do [ -e "$f" ] && cp "$f" "$out/vulkan_$(basename "$f")"; done
  ls -la "$out"
  # Finished is not passed: either lane's runner or the route exiting non-zero fails this command.
  if grep -qE "exit status [1-9]" "$stash/console.txt"; then echo "a run failed (see console.txt)"; exit 1; fi
  ;;
*)
  echo "usage: certify_remote_all.sh start CARRY VULKAN_CARRY | wait OUT_DIR SECONDS" >&2; exit 2
  ;;
esac
