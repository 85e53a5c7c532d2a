#!/usr/bin/env bash
# The CUDA lane against an upstream-default build of the same pinned tree, on a GPU host without
# Bazel (issue: native speed). Builds the reference there, because upstream's default CUDA arch is
# the host GPU's ("native"), with the cache entries the lane spec states (spec.json's
# upstream_reference), then runs tools.bench.bench_cli: llama-bench alternately, ratios from raw JSON.
#   usage: bench_remote_cuda.sh CARRY_DIR SRC_DIR OUT_DIR   (CARRY_DIR: tools/device/pack.sh,
#          SRC_DIR: tools/device/pack_source.sh's .devcarry-src: the tree and the lane spec)
set -euo pipefail
carry=$(cd "$1" && pwd); srcdir=$(cd "$2" && pwd); out=$3
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-bench-cuda.XXXXXX)
mkdir -p "$out" "$work/lanes" "$work/src"
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_python
tar -xJf "$carry/cuda_lane.tar.xz" -C "$work/lanes"
tar -xJf "$srcdir/llama_src.tar.xz" -C "$work/src"
lanes_remote_cuda_libs "$work/lanes/cuda"
mapfile -t defs < <(python3 -c 'import json, sys
entries = json.load(open(sys.argv[1]))["upstream_reference"]["linux-x86_64-cuda"]["cache_entries"]
print("\n".join(f"-D{k}={v}" for k, v in sorted(entries.items())))' "$srcdir/spec.json")
echo "reference cache entries: ${defs[*]}" | tee "$out/reference_build.txt"
start=$(date +%s)
# Only llama-bench's configuration matters; tests, examples and the app are not configured.
cmake -S "$work/src" -B "$work/ref" "${defs[@]}" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF >> "$out/reference_build.txt" 2>&1
cmake --build "$work/ref" --target llama-bench --parallel "$(nproc)" >> "$out/reference_build.txt" 2>&1
echo "reference build: $(( $(date +%s) - start )) s on $(nproc) cores" | tee -a "$out/reference_build.txt"
grep -E "CMAKE_CUDA_ARCHITECTURES|GGML_CUDA_NO_VMM|GGML_NATIVE" "$work/ref/CMakeCache.txt" | tee -a "$out/reference_build.txt"
lanes_remote_models
python3 -m tools.bench.bench_cli --lane=linux-x86_64-cuda --lane_dir="$work/lanes/cuda" --reference_dir="$work/ref" \
  --model="$models/tiny_llama_f32.gguf" --large_model="$models/roofline_f16.gguf" --n_gpu_layers=99 \
  --pp=512 --tg=128 --reps=3 --rounds=4 --out_dir="$work/bench" 2>&1 | tee "$out/bench.txt"
tar -cJf "$out/bench.tar.xz" -C "$work" bench
