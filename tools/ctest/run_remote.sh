#!/usr/bin/env bash
# Runs a lane's llama.cpp CTest bundle on a host without Bazel (the carry of pack_bundle.sh) and
# writes OUT/ctest.log, OUT/ctest_report.pb and OUT/ctest_report.json. Exit status as run_bundle:
# 0 passed, 1 a test failed/skipped/did not run (each named with its output), 2 unusable input.
#
#   usage: tools/ctest/run_remote.sh CARRY_DIR OUT_DIR [JOBS]
# On a CUDA host the lane's libggml-cuda loads cudart/cuBLAS from the host's toolkit, found as in
# tools/device/certify_remote_cuda.sh. For Vulkan, export the loader and ICD environment that
# tools/device/certify_remote_vulkan.sh sets up (LD_LIBRARY_PATH, VK_DRIVER_FILES) first.
set -euo pipefail
carry=$(cd "$1" && pwd); out=$2; jobs=${3:-4}
repo=$(cd "$(dirname "$0")/../.." && pwd)
lane=$(cat "$carry/lane")
work=$(mktemp -d /tmp/lanes-ctest-remote.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_python
tar -xJf "$carry/lane.tar.xz" -C "$work"
tar -xJf "$carry/ctest_bundle.tar.xz" -C "$work"

# The embedded model for upstream's "model" tests, regenerated from the pinned vocab: it must be
# byte-identical to the one //tools/model:tiny_llama_f32 builds.
python3 -m tools.model.make_tiny_model --vocab "$work/${lane}_ctest/source/models/ggml-vocab-llama-spm.gguf" \
  --out "$work/tiny_llama_f32.gguf"
echo "$(cat "$carry/tiny_llama_f32.sha256")  $work/tiny_llama_f32.gguf" | sha256sum -c -

lanes_remote_cuda_libs "$work/$lane"

# The carried ctest (CMake's wheel), else the host's (packed with NO_CTEST_WHEEL=1).
ctest=$work/site/cmake/data/bin/ctest
if [ ! -x "$ctest" ]; then ctest=ctest; fi
python3 -m tools.ctest.run_bundle --bundle="$work/${lane}_ctest" --lane_dir="$work/$lane" \
  --evidence="$work/$lane.evidence.pb" --model="$work/tiny_llama_f32.gguf" \
  --ctest="$ctest" --jobs="$jobs" --out="$out"
