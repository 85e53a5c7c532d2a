#!/usr/bin/env bash
# One slot's CUDA work on a GPU host: the CUDA lane certified on the embedded model and each MODEL
# (certify_remote_cuda.sh), then the CUDA+Vulkan route measured for the models whose Vulkan run is
# committed for this device class (certify_remote_vulkan.sh with VULKAN_RUNS), bound to these CUDA
# runs. Every archive over 15 MB is split into parts (cat to rejoin) so that device commands can
# bring the results back. Meant for `detached.sh start` (a slot's runs outlast one command).
#   usage: cuda_and_route_remote.sh CARRY_DIR VULKAN_CARRY_DIR VULKAN_RUNS_DIR OUT_DIR ROUTE_MODELS [MODEL.gguf ...]
# VULKAN_CARRY_DIR holds the Vulkan lane with the committed run's build evidence (rebind_lane_tar.sh);
# VULKAN_RUNS_DIR holds those runs' runner_report.pb (run/ for the embedded model, run-<stem>/);
# ROUTE_MODELS: "embedded", "models" or "all": which routes have a committed Vulkan run here.
set -uo pipefail
carry=$1 vcarry=$2 vruns=$3 out=$4 routes=$5; shift 5
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/cuda" "$out/route"
overall=0
bash "$repo/tools/device/certify_remote_cuda.sh" "$carry" "$out/cuda" "$@" || overall=1
case "$routes" in
  embedded) VULKAN_RUNS=$vruns bash "$repo/tools/device/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/route" || overall=1 ;;
  models) VULKAN_RUNS=$vruns SKIP_EMBEDDED=1 bash "$repo/tools/device/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/route" "$@" || overall=1 ;;
  all) VULKAN_RUNS=$vruns bash "$repo/tools/device/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/route" "$@" || overall=1 ;;
  *) echo "cuda_and_route_remote.sh: ROUTE_MODELS is embedded, models or all, not '$routes'" >&2; exit 2 ;;
esac
for f in "$out"/*/*.tar.xz; do
  [ -f "$f" ] || continue
  if [ "$(stat -c %s "$f")" -gt 15000000 ]; then split -b 15000000 -d "$f" "$f.part" && rm "$f"; fi
done
(cd "$out" && find . -type f -printf '%s %p\n' | sort -k2)
exit "$overall"
