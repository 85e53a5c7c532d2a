#!/usr/bin/env bash
# One GPU slot's work for locked real models (detached.sh start NAME ...), ordered so that nothing
# shares the host with a speed measurement: the CUDA lane's certification runs alone, then the
# Vulkan lane's; then the CUDA+Vulkan routes bound to those runs (they measure no speed) beside the
# KL probe (diagnosis) and, with ARCH_PROBE=1, the two CUDA reference builds and the bench's
# 7B-shaped model; then the arch probe's bench alone. Each stage's results are in OUT as soon as it
# ends, so a slot that runs out keeps what finished. The embedded model's records stand
# (SKIP_EMBEDDED=1 for both lanes).
#   usage: real_models_remote.sh CARRY VULKAN_CARRY SRC_DIR OUT MODEL.gguf ...
#   KL_PROBE="MODEL.gguf ...": kl_probe_remote.sh on those models; ARCH_ROUNDS (default 4): the arch
#   probe's rounds, on the 7B-shaped model and ARCH_MODELS="MODEL.gguf ...".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
carry=$1 vcarry=$2 src=$3 out=$4; shift 4
mkdir -p "$out/cuda" "$out/vulkan" "$out/route" "$out/arch"
overall=0
stage() { echo "=== $(date -u +%T) $*"; }

stage "CUDA certification"
SKIP_EMBEDDED=1 bash "$here/certify_remote_cuda.sh" "$carry" "$out/cuda" "$@" > "$out/cuda/console.txt" 2>&1
status=$?; tail -n 3 "$out/cuda/console.txt"; echo "CUDA certification exit status $status"; [ "$status" = 0 ] || overall=1

stage "Vulkan certification"
SKIP_EMBEDDED=1 ROUTES=0 bash "$here/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/vulkan" "$@" > "$out/vulkan/console.txt" 2>&1
status=$?; tail -n 3 "$out/vulkan/console.txt"; echo "Vulkan certification exit status $status"; [ "$status" = 0 ] || overall=1

runs=$(mktemp -d /tmp/lanes-vk-runs.XXXXXX)
for model in "$@"; do
  name="run-$(basename "$model" .gguf)"
  cat "$out/vulkan/$name.tar.xz"* | tar -xJf - -C "$runs" "$name/runner_report.pb" || overall=1
done

stage "routes, KL probe${ARCH_PROBE:+, arch probe builds}"
side=()
if [ "${ARCH_PROBE:-0}" = 1 ]; then
  # Below the routes' CPU-lane runs in priority: those have per-command timeouts.
  { nice -n 19 bash "$here/arch_probe_remote.sh" build "$carry" "$src" && nice -n 19 bash "$here/bench_remote.sh" models cuda "$carry"; } \
    > "$out/arch/build.console.txt" 2>&1 &
  side+=($!)
fi
if [ -n "${KL_PROBE:-}" ]; then
  # shellcheck disable=SC2086
  bash "$here/kl_probe_remote.sh" "$carry" "$out/kl_probe.txt" $KL_PROBE > /dev/null 2>&1 &
  side+=($!)
fi
SKIP_EMBEDDED=1 VULKAN_RUNS=$runs bash "$here/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/route" "$@" \
  > "$out/route/console.txt" 2>&1
status=$?; tail -n 3 "$out/route/console.txt"; echo "route exit status $status"; [ "$status" = 0 ] || overall=1
build_status=0
for pid in "${side[@]}"; do wait "$pid" || build_status=1; done
if [ "${ARCH_PROBE:-0}" = 1 ]; then
  tail -n 6 "$out/arch/build.console.txt"
  if [ "$build_status" = 0 ]; then
    stage "arch probe bench"
    # shellcheck disable=SC2086
    bash "$here/arch_probe_remote.sh" run "$carry" "$src" "$out/arch" "${ARCH_ROUNDS:-4}" \
      /tmp/lanes-stash/models/llama7b_q4_0.gguf ${ARCH_MODELS:-} > "$out/arch/console.txt" 2>&1
    tail -n 8 "$out/arch/90a_probe.txt"
  fi
fi
stage "done"
exit "$overall"
