#!/usr/bin/env bash
# A GPU lane against an upstream-default build of the same pinned tree, on a GPU host without Bazel
# (docs/performance.md). The reference is built there, because upstream's defaults compile for the
# build host (CUDA: its GPU's arch), with the cache entries the lane spec states (spec.json's
# upstream_reference); then tools.bench.bench_cli runs llama-bench on both, alternately, and derives
# the ratios from the raw JSON.
#   bench_remote.sh build ALIAS SRC_DIR          the reference into /tmp/lanes-stash/ref-ALIAS (kept
#                                                while the tree and its cache entries are the same)
#   bench_remote.sh run ALIAS CARRY SRC_DIR OUT [LABEL=MODEL ...]
#                                                builds if needed, then benches the embedded model,
#                                                a 7B-shaped Q4_0 model made here and each LABEL=MODEL
# CARRY: tools/device/pack.sh's folder (the lane); SRC_DIR: pack_source.sh's (the tree, the spec).
set -euo pipefail
mode=$1 alias=$2
# Vulkan needs the pinned SDK (headers, glslc) for its reference build and the loader and ICD set up
# as certify_remote_vulkan.sh does; neither is carried for the bench yet.
case "$alias" in
  cuda) ;;
  vulkan) echo "bench_remote.sh: the Vulkan reference build is not supported yet (no carried Vulkan SDK)" >&2; exit 2 ;;
  *) echo "bench_remote.sh: no GPU lane $alias (cuda)" >&2; exit 2 ;;
esac
lane_id=linux-x86_64-$alias
repo=$(cd "$(dirname "$0")/../.." && pwd)
ref=/tmp/lanes-stash/ref-$alias

build_reference() {  # $1: SRC_DIR
  local srcdir stamp defs
  srcdir=$(cd "$1" && pwd)
  mapfile -t defs < <(python3 -c 'import json, sys
entries = json.load(open(sys.argv[1]))["upstream_reference"][sys.argv[2]]["cache_entries"]
# The spec writes $ORIGIN as \\$ORIGIN for the cmake() rule'"'"'s shell; no shell expands it here.
print("\n".join(f"-D{k}={v.replace(chr(92) + chr(36), chr(36))}" for k, v in sorted(entries.items())))' "$srcdir/spec.json" "$lane_id")
  tree=$(sha256sum "$srcdir/llama_src.tar.xz" | cut -d' ' -f1)
  stamp="$tree ${defs[*]}"
  if [ -f "$ref/STAMP" ] && [ "$(cat "$ref/STAMP")" = "$stamp" ] && [ -x "$ref/build/bin/llama-bench" ]; then
    echo "reference $ref: already built from this tree"; return 0
  fi
  if [ -f "$ref/STAMP" ] && [ "$(cut -d' ' -f1 "$ref/STAMP")" = "$tree" ]; then
    # The same tree, other cache entries: CMake reconfigures and rebuilds what they change.
    echo "reference $ref: same tree, reconfigured" | tee -a "$ref/reference_build.txt"
  else
    rm -rf "$ref"; mkdir -p "$ref/src"
    tar -xJf "$srcdir/llama_src.tar.xz" -C "$ref/src"
  fi
  echo "reference cache entries: ${defs[*]}" | tee -a "$ref/reference_build.txt"
  local start; start=$(date +%s)
  # Only llama-bench's configuration matters; tests, examples and the app are not configured.
  cmake -S "$ref/src" -B "$ref/build" "${defs[@]}" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF >> "$ref/reference_build.txt" 2>&1
  cmake --build "$ref/build" --target llama-bench --parallel "$(nproc)" >> "$ref/reference_build.txt" 2>&1
  echo "reference build: $(( $(date +%s) - start )) s on $(nproc) cores" | tee -a "$ref/reference_build.txt"
  grep -E "CMAKE_CUDA_ARCHITECTURES|GGML_CUDA_NO_VMM|GGML_CUDA_GRAPHS|GGML_LLAMAFILE|GGML_NATIVE|GGML_VULKAN" \
    "$ref/build/CMakeCache.txt" | tee -a "$ref/reference_build.txt"
  # llama-bench finds its libraries in bin/ through RUNPATH $ORIGIN (the cache entry, unescaped above).
  ldd "$ref/build/bin/llama-bench" | grep "not found" && { echo "reference llama-bench: libraries not found" >&2; return 1; }
  echo "$stamp" > "$ref/STAMP"
}

case "$mode" in
build)
  build_reference "$3"
  ;;
run)
  carry=$(cd "$3" && pwd); srcdir=$4; out=$5; shift 5
  work=$(mktemp -d /tmp/lanes-bench.XXXXXX)
  mkdir -p "$out" "$work/lanes"
  # shellcheck source=tools/device/remote_setup.sh
  source "$repo/tools/device/remote_setup.sh"
  lanes_remote_python
  build_reference "$srcdir"
  cp "$ref/reference_build.txt" "$out/"
  tar -xJf "$carry/${alias}_lane.tar.xz" -C "$work/lanes"
  [ "$alias" = cuda ] && lanes_remote_cuda_libs "$work/lanes/cuda"
  lanes_remote_bench_models
  extra=()
  for spec in "$@"; do extra+=(--bench_model="$spec"); done
  python3 -m tools.bench.bench_cli --lane="$lane_id" --lane_dir="$work/lanes/$alias" --reference_dir="$ref/build" \
    --model="$models/tiny_llama_f32.gguf" --bench_model="llama7b_q4_0=$models/llama7b_q4_0.gguf" "${extra[@]}" \
    --n_gpu_layers=99 --pp=512 --tg=128 --reps=3 --rounds=4 --out_dir="$work/bench" 2>&1 | tee "$out/bench.txt"
  cp "$ref/reference_build.txt" "$work/bench/logs/"
  tar -cJf "$out/bench.tar.xz" -C "$work" bench
  ;;
*)
  echo "usage: bench_remote.sh build ALIAS SRC_DIR | run ALIAS CARRY SRC_DIR OUT [LABEL=MODEL ...]" >&2; exit 2
  ;;
esac
