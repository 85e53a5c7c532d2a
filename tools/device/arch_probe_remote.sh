#!/usr/bin/env bash
# Diagnosis on a GPU host, never evidence for a record or a ratio: what one build difference from
# upstream's defaults does. VARIANT=90a (default): only CMAKE_CUDA_ARCHITECTURES=90a (the lane's arch;
# upstream's default is the host GPU's native sm_90). VARIANT=nofastmath: the same tree with
# ggml-cuda's unconditional `-use_fast_math` taken out of its CUDA_FLAGS (nvcc then keeps IEEE
# division, square root, denormals and the accurate expf/sinf/cosf instead of their fast intrinsics).
# VARIANT=gcc12: the host's gcc-12/g++-12 as C and C++ compiler and as nvcc's host compiler (the
# lane's is GCC 12.2, the reference's the host's default); the build fails unless the reference's
# CMake log says `CUDA host compiler is GNU 12.*`, which the probe's header repeats.
# VARIANT=gcc12novmm: that and GGML_CUDA_NO_VMM=ON (the lane built without VMM).
# The upstream-default reference and the variant (bench_remote.sh build, REFERENCE_NAME/REFERENCE_EXTRA)
# run beside the lane, rotated each round so that no build always runs first, with the bench's
# llama-bench flags (REPS=n: -r n, default 3); the raw JSON and a table of per-build medians go to
# OUT. The lane's header line states whether its libggml-cuda links the driver API (VMM on).
#   [VARIANT=...] [NO_REF=1] arch_probe_remote.sh build CARRY SRC_DIR
#                                                       both references, in parallel (NO_REF=1: the
#                                                       variant only, e.g. for kl_probe_remote.sh)
#   [VARIANT=...] [NO_LANE=1|NO_REF=1] arch_probe_remote.sh run CARRY SRC_DIR OUT ROUNDS MODEL.gguf ...
#                                                       NO_LANE=1: the two references only (a carry
#                                                       without the CUDA lane; its ratio to upstream is
#                                                       the committed bench's); NO_REF=1: the lane and
#                                                       the variant only
set -uo pipefail
mode=$1 carry=$(cd "$2" && pwd) src=$(cd "$3" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
variant=${VARIANT:-90a}
reps=${REPS:-3}
case "$reps" in '' | *[!0-9]* | 0) echo "arch_probe_remote.sh: REPS=$reps: expected a positive count" >&2; exit 2 ;; esac
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_reference_log() { echo "$(lanes_remote_reference_dir cuda "$1")/reference_build.txt"; }
variant_src=$src
variant_env=()
cuda_host_expected=""  # what the variant's CMake log must name as nvcc's host compiler, if anything
case "$variant" in
90a) variant_entry="-DCMAKE_CUDA_ARCHITECTURES=90a" ;;
nofastmath)
  # A marker entry (REFERENCE_NAME needs one); the difference is the tree, which bench_remote.sh's
  # stamp covers by its digest.
  variant_entry="-DLANES_PROBE_VARIANT=nofastmath"
  variant_src=/tmp/lanes-stash/src-nofastmath
  ;;
gcc12 | gcc12novmm)
  command -v gcc-12 > /dev/null && command -v g++-12 > /dev/null \
    || { echo "arch_probe_remote.sh: VARIANT=$variant: no gcc-12/g++-12 on this host's PATH" >&2; exit 2; }
  variant_entry="-DCMAKE_C_COMPILER=gcc-12 -DCMAKE_CXX_COMPILER=g++-12 -DCMAKE_CUDA_HOST_COMPILER=$(command -v g++-12)"
  # The lent hosts export CUDAHOSTCXX (their GCC 13), and CMake's CUDA detection took it over the
  # cache entry: CMakeCache kept CMAKE_CUDA_HOST_COMPILER:UNINITIALIZED and nvcc ran GCC 13.3.
  variant_env=("CUDAHOSTCXX=$(command -v g++-12)")
  cuda_host_expected="GNU 12."
  [ "$variant" = gcc12 ] || variant_entry="$variant_entry -DGGML_CUDA_NO_VMM=ON"
  ;;
*) echo "arch_probe_remote.sh: VARIANT=$variant: expected 90a, nofastmath, gcc12 or gcc12novmm" >&2; exit 2 ;;
esac
make_nofastmath_src() {  # the pinned tree with only ggml-cuda's -use_fast_math removed, checked
  local tree=$variant_src/tree cmakelists=ggml/src/ggml-cuda/CMakeLists.txt
  rm -rf "$variant_src"; mkdir -p "$tree"
  tar -xJf "$src/llama_src.tar.xz" -C "$tree" || return 1
  [ "$(grep -c -- '-use_fast_math' "$tree/$cmakelists")" = 1 ] \
    || { echo "$cmakelists: expected one -use_fast_math, the pin changed" >&2; return 1; }
  sed -i 's/set(CUDA_FLAGS -use_fast_math -extended-lambda)/set(CUDA_FLAGS -extended-lambda)/' "$tree/$cmakelists"
  ! grep -q -- '-use_fast_math' "$tree/$cmakelists" || { echo "$cmakelists: -use_fast_math not removed" >&2; return 1; }
  tar -cJf "$variant_src/llama_src.tar.xz" -C "$tree" . && cp "$src/spec.json" "$variant_src/" && rm -rf "$tree"
}
case "$mode" in
build)
  if [ "$variant" = nofastmath ]; then make_nofastmath_src || exit 1; fi
  ref_pid=
  if [ "${NO_REF:-0}" != 1 ]; then
    bash "$here/bench_remote.sh" build cuda "$carry" "$src" > /tmp/lanes-stash/arch-ref.txt 2>&1 &
    ref_pid=$!
  fi
  env "${variant_env[@]}" REFERENCE_NAME="$variant" REFERENCE_EXTRA="$variant_entry" bash "$here/bench_remote.sh" build cuda "$carry" \
    "$variant_src" > "/tmp/lanes-stash/arch-ref$variant.txt" 2>&1
  status=$?
  [ -z "$ref_pid" ] || wait "$ref_pid" || status=1
  if [ -n "$cuda_host_expected" ]; then
    # The variant is only the lane's compiler if nvcc compiled the .cu files' host code with it too:
    # ggml-cuda's CMake asks nvcc (with -ccbin CMAKE_CUDA_HOST_COMPILER) which host compiler it runs.
    cuda_host=$(grep -h -o 'CUDA host compiler is .*' "$(lanes_reference_log "$variant")" | head -n 1)
    case "$cuda_host" in
    "CUDA host compiler is $cuda_host_expected"*) ;;
    *) echo "arch_probe_remote.sh: VARIANT=$variant: nvcc's host compiler is not $cuda_host_expected*: $cuda_host" >&2; status=1 ;;
    esac
  fi
  tail -n 4 "/tmp/lanes-stash/arch-ref$variant.txt"
  [ -z "$ref_pid" ] || tail -n 4 /tmp/lanes-stash/arch-ref.txt
  exit "$status"
  ;;
run) ;;
*) echo "usage: arch_probe_remote.sh build CARRY SRC_DIR | run CARRY SRC_DIR OUT ROUNDS MODEL.gguf ..." >&2; exit 2 ;;
esac
out=$4 rounds=$5; shift 5
mkdir -p "$out"
work=$(mktemp -d /tmp/lanes-archprobe.XXXXXX)
lanes_remote_require_models arch_probe_remote.sh "$@" || exit 2
if [ "${NO_LANE:-0}" = 1 ] && [ "${NO_REF:-0}" = 1 ]; then
  echo "arch_probe_remote.sh run: NO_LANE=1 and NO_REF=1 leave only the variant: nothing to compare" >&2; exit 2
fi
builds=(lane ref "ref$variant")
[ "${NO_REF:-0}" != 1 ] || builds=(lane "ref$variant")
if [ "${NO_LANE:-0}" = 1 ]; then
  builds=(ref "ref$variant")
else
  lanes_remote_unpack "$carry" cuda || exit 2
  lanes_remote_cuda_libs "$work/lanes/cuda"
fi
lane_vmm() {  # $1: the lane's directory. VMM is on where libggml-cuda links the driver API.
  if readelf -d "$1/lib/libggml-cuda.so.0" 2> /dev/null | grep -q "NEEDED.*\[libcuda\.so\.1\]"; then
    echo "VMM on: libggml-cuda NEEDED libcuda.so.1"
  else
    echo "VMM off: libggml-cuda does not link libcuda"
  fi
}
declare -A dir=([lane]="$work/lanes/cuda" [ref]="$(lanes_remote_reference_dir cuda)/build"
  ["ref$variant"]="$(lanes_remote_reference_dir cuda "$variant")/build")
for b in "${builds[@]}"; do
  [ -x "${dir[$b]}/bin/llama-bench" ] || { echo "no llama-bench in ${dir[$b]}: arch_probe_remote.sh build first" >&2; exit 2; }
  echo "# $b: $(grep -h -E "CMAKE_CUDA_ARCHITECTURES:|LANES_PROBE_VARIANT|CMAKE_CXX_COMPILER:|CMAKE_CUDA_HOST_COMPILER:|GGML_CUDA_NO_VMM:" "${dir[$b]}/CMakeCache.txt" 2>/dev/null | tr '\n' ' ' || echo "the lane (90a, $(lane_vmm "${dir[$b]}"))")$(grep -h -o 'CUDA host compiler is .*' "${dir[$b]}/../reference_build.txt" 2>/dev/null | head -n 1)"
done | tee "$out/${variant}_probe.txt"
# What the header is read from travels with it: each reference's whole build log, and the GPU.
for b in "${builds[@]}"; do
  [ "$b" = lane ] || cp "${dir[$b]}/../reference_build.txt" "$out/${variant}_probe.$b.reference_build.txt"
done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory --format=csv > "$out/${variant}_probe.gpu.txt"
mkdir -p "$work/raw"
n=${#builds[@]}
for ((round = 0; round < rounds; round++)); do
  for model in "$@"; do
    for ((k = 0; k < n; k++)); do
      b=${builds[$(((round + k) % n))]}
      raw="$work/raw/$(basename "$model" .gguf).$b.$round.json"
      "${dir[$b]}/bin/llama-bench" -m "$model" -p 512 -n 128 -r "$reps" -t "$(nproc)" -ngl 99 -o json > "$raw" 2> "$raw.log" \
        || { echo "llama-bench $b round $round $(basename "$model") failed:"; tail -n 5 "$raw.log"; }
    done
  done
done
PYTHONPATH="$repo" python3 -m tools.bench.probe_table "$work/raw" "ref$variant" | tee -a "$out/${variant}_probe.txt"
tar -cJf "$out/${variant}_probe_raw.tar.xz" -C "$work" raw
rm -rf "$work"
