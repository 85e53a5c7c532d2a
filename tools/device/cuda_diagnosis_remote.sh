#!/usr/bin/env bash
# One GPU slot of CUDA diagnosis, never certification evidence, run under detached.sh so that no
# device command waits on it: (1) upstream-default references of the pinned tree built side by side
# (upstream's defaults; the same with ggml-cuda's -use_fast_math removed; the same with the host's
# gcc-12 as host compiler) while the bench's 7B-shaped model is made; (2) kl_probe_remote.sh on each
# MODEL against the CPU lane, the CUDA lane's variants and the default reference, then the
# no-fast-math reference alone, every llama-perplexity output kept; (3) arch_probe_remote.sh's
# rotated bench of the lane, the default reference and the gcc-12 one on the embedded model, the
# 7B-shaped model and each MODEL, alone on the host. Each step's console and files go to JOB_OUT (or
# OUT), so a slot that runs out keeps the steps it finished.
#   usage: detached.sh start cudadiag tools/device/cuda_diagnosis_remote.sh CARRY SRC_DIR MODEL.gguf ...
#          detached.sh wait cudadiag OUT SECONDS
set -uo pipefail
carry=$(cd "$1" && pwd) src=$(cd "$2" && pwd); shift 2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/device/remote_setup.sh
source "$here/remote_setup.sh"
out=${JOB_OUT:-${OUT:?cuda_diagnosis_remote.sh: run it under detached.sh (JOB_OUT) or set OUT}}
mkdir -p "$out"
for model in "$@"; do [ -f "$model" ] || { echo "cuda_diagnosis_remote.sh: no model file $model" >&2; exit 2; }; done
step() { echo "== $(date -u +%FT%TZ) $*"; }
status=0

step "build: the references (default, nofastmath, gcc12) and the bench models"
VARIANT=nofastmath bash "$here/arch_probe_remote.sh" build "$carry" "$src" > "$out/build_nofastmath.txt" 2>&1 &
nofastmath_pid=$!
VARIANT=gcc12 NO_REF=1 bash "$here/arch_probe_remote.sh" build "$carry" "$src" > "$out/build_gcc12.txt" 2>&1 &
gcc12_pid=$!
bash "$here/bench_remote.sh" models cuda "$carry" > "$out/models.txt" 2>&1 || { echo "bench models failed"; status=1; }
wait "$nofastmath_pid" || { echo "nofastmath/default reference build failed"; status=1; }
wait "$gcc12_pid" || { echo "gcc12 reference build failed"; status=1; }
for name in "" nofastmath gcc12; do  # each reference's whole build log (cache entries, time, ggml options)
  ref=$(lanes_remote_reference_dir cuda "$name")
  [ ! -f "$ref/reference_build.txt" ] || cp "$ref/reference_build.txt" "$out/$(basename "$ref").reference_build.txt"
done
step "build done (status $status)"

step "kl: the CPU lane, the CUDA lane's variants and the default reference"
KL_REF="$(lanes_remote_reference_dir cuda)/build" KL_LOGS="$out/kl_logs" bash "$here/kl_probe_remote.sh" "$carry" "$out/kl_probe.txt" "$@" \
  > /dev/null 2>&1 || status=1
step "kl: the no-fast-math reference"
KL_REF="$(lanes_remote_reference_dir cuda nofastmath)/build" KL_REF_ONLY=1 KL_LOGS="$out/kl_logs_nofastmath" \
  bash "$here/kl_probe_remote.sh" "$carry" "$out/kl_probe_nofastmath.txt" "$@" > /dev/null 2>&1 || status=1

step "bench: lane, default reference and gcc12 reference, rotated, 4 rounds"
VARIANT=gcc12 bash "$here/arch_probe_remote.sh" run "$carry" "$src" "$out/gcc12" 4 \
  /tmp/lanes-stash/models/tiny_llama_f32.gguf /tmp/lanes-stash/models/llama7b_q4_0.gguf "$@" || status=1
step "done (status $status)"
exit "$status"
