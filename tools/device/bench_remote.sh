#!/usr/bin/env bash
# A GPU lane against an upstream-default build of the same pinned tree, on a GPU host without Bazel
# (docs/performance.md). The reference is built there, because upstream's defaults compile for the
# build host (CUDA: its GPU's arch), with the cache entries the lane spec states (spec.json's
# upstream_reference); then tools.bench.bench_cli runs llama-bench on both, alternately, and derives
# the ratios from the raw JSON.
#   bench_remote.sh build ALIAS CARRY SRC_DIR    the reference into /tmp/lanes-stash/ref-ALIAS (kept
#                                                while the tree and its cache entries are the same)
#   bench_remote.sh models ALIAS CARRY           the models the bench makes (kept per machine)
#   bench_remote.sh run ALIAS CARRY SRC_DIR OUT [LABEL=MODEL ...]
#                                                builds if needed, then benches the embedded model,
#                                                a 7B-shaped Q4_0 model made here and each LABEL=MODEL
# CARRY: tools/device/pack.sh's folder (the wheels, the vocab; the CUDA lane); SRC_DIR:
# pack_source.sh's (the tree, the spec). Vulkan: VULKAN_CARRY=pack_vulkan.sh's folder (the lane and
# the SDK lock's .debs): the reference is built with the lane's own SDK (headers, glslc,
# SPIRV-Headers; the same Vulkan_* and SPIRV-Headers_DIR entries the lane's toolchain sets), and
# both run through the host's loader and the driver's ICD as certify_remote_vulkan.sh sets them up.
# REFERENCE_NAME=<name> REFERENCE_EXTRA="-DKEY=VALUE ...": a variant of the reference, built into
# /tmp/lanes-stash/ref-ALIAS-<name> with those cache entries after the spec's (one changed entry, to
# find which of the lane's differs in speed; a diagnosis, never the reference a ratio is taken to).
set -euo pipefail
mode=$1 alias=$2
case "$alias" in
  cuda) lane_carry=$3 ;;
  vulkan) lane_carry=${VULKAN_CARRY:?bench_remote.sh vulkan: set VULKAN_CARRY to pack_vulkan.sh\'s folder} ;;
  *) echo "bench_remote.sh: no GPU lane $alias (cuda, vulkan)" >&2; exit 2 ;;
esac
lane_id=linux-x86_64-$alias
repo=$(cd "$(dirname "$0")/../.." && pwd)
carry=$(cd "$3" && pwd)
lane_carry=$(cd "$lane_carry" && pwd)
work=$(mktemp -d /tmp/lanes-bench.XXXXXX)
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
ref=$(lanes_remote_reference_dir "$alias" "${REFERENCE_NAME:-}")
lanes_remote_python
if [ "$alias" = vulkan ]; then lanes_remote_vulkan_env "$lane_carry" "$work/vkroot" || exit 2; fi

build_reference() {  # $1: SRC_DIR
  local srcdir stamp defs
  srcdir=$(cd "$1" && pwd)
  mapfile -t defs < <(python3 -c 'import json, sys
entries = json.load(open(sys.argv[1]))["upstream_reference"][sys.argv[2]]["cache_entries"]
# The spec writes $ORIGIN as \\$ORIGIN for the cmake() rule'"'"'s shell; no shell expands it here.
print("\n".join(f"-D{k}={v.replace(chr(92) + chr(36), chr(36))}" for k, v in sorted(entries.items())))' "$srcdir/spec.json" "$lane_id")
  if [ "$alias" = vulkan ]; then
    # Where the SDK is, not how to build: the SDK lock's packages, unpacked beside the reference
    # (its build files name them), glslc through the toolchain's wrapper (its libshaderc beside it).
    local sdk=/tmp/lanes-stash/ref-vulkan-sdk
    rm -rf "$sdk"; mkdir -p "$sdk/bin"
    for deb in "$lane_carry"/debs/*.deb; do dpkg-deb -x "$deb" "$sdk"; done
    install -m 0755 "$repo/toolchains/vulkan/glslc.sh.tpl" "$sdk/bin/glslc"
    defs+=("-DVulkan_INCLUDE_DIR=$sdk/usr/include" "-DVulkan_LIBRARY=$sdk/usr/lib/x86_64-linux-gnu/libvulkan.so"
           "-DVulkan_GLSLC_EXECUTABLE=$sdk/bin/glslc" "-DSPIRV-Headers_DIR=$sdk/usr/share/cmake/SPIRV-Headers")
  fi
  # shellcheck disable=SC2206
  [ -n "${REFERENCE_NAME:-}" ] && defs+=(${REFERENCE_EXTRA:?bench_remote.sh: REFERENCE_NAME needs REFERENCE_EXTRA})
  tree=$(sha256sum "$srcdir/llama_src.tar.xz" | cut -d' ' -f1)
  stamp="$tree ${defs[*]}"
  # llama-bench; llama-perplexity beside it for kl_probe_remote.sh's upstream variant.
  local targets=(llama-bench llama-perplexity) built=1 target
  for target in "${targets[@]}"; do [ -x "$ref/build/bin/$target" ] || built=0; done
  if [ -f "$ref/STAMP" ] && [ "$(cat "$ref/STAMP")" = "$stamp" ] && [ "$built" = 1 ]; then
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
  cmake --build "$ref/build" --target "${targets[@]}" --parallel "$(nproc)" >> "$ref/reference_build.txt" 2>&1
  echo "reference build: $(( $(date +%s) - start )) s on $(nproc) cores" | tee -a "$ref/reference_build.txt"
  grep -E "CMAKE_CUDA_ARCHITECTURES|GGML_CUDA_NO_VMM|GGML_CUDA_GRAPHS|GGML_LLAMAFILE|GGML_NATIVE|GGML_VULKAN|Vulkan_GLSLC" \
    "$ref/build/CMakeCache.txt" | tee -a "$ref/reference_build.txt"
  # llama-bench finds its libraries in bin/ through RUNPATH $ORIGIN (the cache entry, unescaped above).
  ldd "$ref/build/bin/llama-bench" | grep "not found" && { echo "reference llama-bench: libraries not found" >&2; return 1; }
  echo "$stamp" > "$ref/STAMP"
}

case "$mode" in
build)
  build_reference "$4"
  ;;
models)  # the bench's models (the 7B-shaped one takes minutes to make), e.g. beside the reference build
  lanes_remote_bench_models
  ;;
run)
  srcdir=$4; out=$5; shift 5
  [ -z "${REFERENCE_NAME:-}" ] || { echo "bench_remote.sh run: ratios are taken to the upstream-default reference only (unset REFERENCE_NAME)" >&2; exit 2; }
  mkdir -p "$out"
  build_reference "$srcdir"
  cp "$ref/reference_build.txt" "$out/"
  lanes_remote_unpack "$lane_carry" "$alias"
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
  echo "usage: bench_remote.sh build ALIAS CARRY SRC_DIR | models ALIAS CARRY | run ALIAS CARRY SRC_DIR OUT [LABEL=MODEL ...]" >&2; exit 2
  ;;
esac
