#!/usr/bin/env bash
# Sourced by the tools/device/*_remote_*.sh scripts on a GPU host without Bazel: the setup they
# share. Expects $carry (the carry folder), $work (this run's scratch) and $repo set.

# Where bench_remote.sh builds an upstream reference of lane ALIAS: $1 ALIAS, $2 a variant's
# REFERENCE_NAME (none: the upstream-default reference).
lanes_remote_reference_dir() { echo "/tmp/lanes-stash/ref-$1${2:+-$2}"; }

# The carried wheels (what the host's Python 3.12 lacks) and protobuf modules on PYTHONPATH.
lanes_remote_python() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$carry"/wheels/*.whl
  export PYTHONPATH="$work/site:$carry/py:$repo"
  export NCCL_NVLS_ENABLE=0
}

# The lanes a run uses: each ALIAS_lane.tar.xz of the carry folder (lane_tar.sh) into $work/lanes.
lanes_remote_unpack() {  # $1: the carry folder, then lane aliases
  local from=$1 alias; shift
  mkdir -p "$work/lanes"
  for alias in "$@"; do tar -xJf "$from/${alias}_lane.tar.xz" -C "$work/lanes" || return 2; done
}

# The model files a script was given exist (before any work starts). $1: the script's name.
lanes_remote_require_models() {
  local script=$1 model; shift
  for model in "$@"; do [ -f "$model" ] || { echo "$script: no model file $model" >&2; return 2; }; done
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

# The Vulkan runtime a lane or a reference build needs on a GPU host: the carried Vulkan SDK
# (tools/device/pack_vulkan.sh: the SDK lock's .debs) unpacked into ROOT, glvnd and the loader where
# the host lacks them, and the NVIDIA driver's ICD manifest (VK_DRIVER_FILES). Sets $loader_dir.
lanes_remote_vulkan_env() {  # $1: the Vulkan carry folder, $2: where its .debs are unpacked
  local vcarry=$1 root=$2 icd="" deb f lib d
  mkdir -p "$root"
  for deb in "$vcarry"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
  # NVIDIA's Vulkan ICD (libGLX_nvidia) exports vkCreateInstance only with the GL vendor-neutral
  # dispatch (glvnd) installed: the device host's recipe unpacks those Debian packages into / (as
  # root); without them the loader reports "Could not get 'vkCreateInstance'" and VkResult -9.
  if [ -d "$vcarry/gl" ] && ! ldconfig -p | grep -q libGLdispatch; then
    for deb in "$vcarry"/gl/*.deb; do dpkg -x "$deb" /; done; ldconfig
  fi
  [ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ] && \
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  # Lane processes get no LD_LIBRARY_PATH (the runner's clean environment): the lanes find the loader
  # the way the system does. A host without one gets the pinned loader in / (root-owned, in ldconfig's
  # cache), as with glvnd above.
  if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
    for deb in "$vcarry"/debs/libvulkan1_*.deb; do dpkg -x "$deb" /; done; ldconfig
  fi
  loader_dir="$root/usr/lib/x86_64-linux-gnu"
  [ -e "$loader_dir/libvulkan.so.1" ] || { echo "no libvulkan.so.1 in $vcarry/debs: pack_vulkan.sh again" >&2; return 2; }
  ldconfig -p | grep 'libvulkan.so.1 ' || { echo "the Vulkan loader is not in the system's loader cache" >&2; return 2; }

  # The GPU driver's ICD manifest: the NVIDIA driver's own directory first (its manifest names the
  # library the driver installed), then the standard loader directories; a manifest whose library the
  # dynamic loader cannot find is skipped (or its directory is added when the driver ships one).
  for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json /usr/local/nvidia/icd.d/nvidia_icd*.json \
           /etc/vulkan/icd.d/nvidia_icd*.json /usr/share/vulkan/icd.d/nvidia_icd*.json /usr/local/share/vulkan/icd.d/nvidia_icd*.json \
           $(find /usr /etc /opt -name 'nvidia_icd*.json' 2>/dev/null); do
    [ -f "$f" ] || continue
    lib=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["ICD"]["library_path"])' "$f")
    if [ "${lib#/}" != "$lib" ]; then [ -e "$lib" ] && { icd=$f; break; }; continue; fi
    if ldconfig -p | grep -q "$lib"; then icd=$f; break; fi
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu/nvidia; do
      if [ -e "$d/$lib" ]; then export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; icd=$f; break 2; fi
    done
    echo "skipping ICD manifest $f: $lib not found by the dynamic loader"
  done
  if [ -z "$icd" ]; then echo "no usable NVIDIA Vulkan ICD manifest on this host" >&2; return 2; fi
  echo "Vulkan ICD manifest: $icd"; cat "$icd"
  export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"
  export LD_LIBRARY_PATH="$loader_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ls /usr/local/nvidia/lib64 2>/dev/null | grep -i "glx_nvidia\|vulkan" | head -5 || true
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
