#!/usr/bin/env bash
# Sourced by the tools/device/*_remote_*.sh scripts on a GPU host without Bazel: the setup they
# share. Expects $carry (the carry folder), $work (this run's scratch) and $repo set.

# The carried wheels (what the host's Python 3.12 lacks) and protobuf modules on PYTHONPATH.
lanes_remote_python() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$carry"/wheels/*.whl
  export PYTHONPATH="$work/site:$carry/py:$repo"
  export NCCL_NVLS_ENABLE=0
}

# The embedded model, regenerated from the pinned vocab (byte-identical to the one
# //tools/model:tiny_llama_f32 builds: checked against its digest), and the synthetic models large
# enough to be memory-bandwidth bound: the GPU lanes' (2.0 B parameters, F16, ~4 GB) and the CPU
# lane's (//tools/model:cpu_roofline_f16's shape, 0.67 GB). Made once per machine into
# /tmp/lanes-stash/models, so runs on the same host use the same files.
lanes_remote_models() {  # the embedded model and the GPU lanes' roofline model
  lanes_remote_tiny || return 1
  lanes_remote_synthetic "$models/roofline_f16.gguf" --dtype f16 --n_layer 8 --n_embd 4096 --n_head 32 --n_head_kv 8 --n_ff 14336
}

lanes_remote_cpu_models() {  # the embedded model and the CPU lane's roofline model
  lanes_remote_tiny || return 1
  lanes_remote_synthetic "$models/cpu_roofline_f16.gguf" --dtype f16 --n_layer 4 --n_embd 2048 --n_head 16 --n_head_kv 16 --n_ff 5632
}

lanes_remote_bench_models() {  # the 7B-shaped Q4_0 model of the lane/upstream bench (speed only)
  lanes_remote_tiny || return 1
  # llama-2-7B's shape: 32 layers, 4096 wide, 32 heads, FFN 11008, its 32k vocabulary.
  lanes_remote_synthetic "$models/llama7b_q4_0.gguf" --dtype q4_0 --n_layer 32 --n_embd 4096 --n_head 32 \
    --n_head_kv 32 --n_ff 11008
}

lanes_remote_tiny() {
  models=/tmp/lanes-stash/models
  mkdir -p "$models"
  local tiny="$models/tiny_llama_f32.gguf"
  # A stashed file that no longer has its digest (an interrupted or damaged copy) is made again.
  if [ -f "$tiny" ] && ! echo "$(cat "$carry/tiny_llama_f32.sha256")  $tiny" | sha256sum -c --status -; then
    echo "remaking $tiny: not the embedded model's digest"; rm -f "$tiny"
  fi
  if [ ! -f "$tiny" ]; then
    python3 -m tools.model.make_tiny_model --vocab "$carry/ggml-vocab-llama-spm.gguf" --out "$tiny.tmp"
    mv "$tiny.tmp" "$tiny"
  fi
  echo "$(cat "$carry/tiny_llama_f32.sha256")  $tiny" | sha256sum -c - || return 1
}

lanes_remote_synthetic() {  # $1: the model to make (kept while its digest holds), then its --dtype and shape
  local model=$1; shift
  if [ -f "$model" ] && ! sha256sum -c --status "$model.sha256" 2>/dev/null; then
    echo "remaking $model: not the digest it was made with"; rm -f "$model"
  fi
  if [ ! -f "$model" ]; then
    python3 -m tools.model.make_tiny_model --vocab "$carry/ggml-vocab-llama-spm.gguf" --out "$model.tmp" "$@"
    sha256sum "$model.tmp" | sed "s#$model.tmp#$model#" > "$model.sha256"
    mv "$model.tmp" "$model"
  fi
}

# cudart/cuBLAS come from the host's CUDA install (the CUDA lane ships neither); where the loader
# does not find them by default, point it at the toolkit. The runner records what was really loaded.
lanes_remote_cuda_libs() {  # $1: the CUDA lane's directory
  if [ -e "$1/lib/libggml-cuda.so.0" ] && ldd "$1/lib/libggml-cuda.so.0" | grep -q "not found"; then
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${CUDA_HOME:-/usr/local/cuda}/lib64"
  fi
  export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
}

# The lane's llama.cpp CTest bundle (//lanes:<alias>_ctest) for the runner's upstream_ctest step,
# unpacked into $3; the lane spec requires it in certification, so a carry without it stops here.
lanes_remote_ctest_bundle() {  # $1: the carry folder holding it, $2: lane alias, $3: where to unpack
  if [ ! -f "$1/$2_ctest.tar.xz" ]; then
    echo "no $2_ctest.tar.xz in $1: bazel build //lanes:$2_ctest, then pack again" >&2
    return 2
  fi
  tar -xJf "$1/$2_ctest.tar.xz" -C "$3"
}

# One certification run: the runner with "${runner_args[@]}" and the given flags into $work/NAME,
# its console into $out/NAME.txt and the run's archive into $out/NAME.tar.xz; returns the runner's status.
lanes_remote_certify() {  # $1: run name, then the runner flags
  local name=$1 status; shift
  set +e
  python3 -m tools.runner.runner "${runner_args[@]}" "$@" \
    --out_dir="$work/$name" --report="$work/$name/runner_report.pb" 2>&1 | tee "$out/$name.txt"
  status=${PIPESTATUS[0]}
  set -e
  tar -cJf "$out/$name.tar.xz" -C "$work" "$name"
  echo "runner exit status $status ($name)"
  return "$status"
}
