#!/usr/bin/env bash
# Runs the CUDA lane's two-GPU certification on a host with two GPUs of one node (e.g. the lent
# nvidia-h200-x2), one run per split mode: the model split over GPU0 and GPU1 with llama.cpp's
# --split-mode layer, then row (runner --gpus=2 --split_mode=...). Modelled on certify_remote_cuda.sh:
# the lanes are the Bazel-built artifacts carried as tarballs with their build evidence
# (tools/device/pack.sh), nothing is rebuilt here, and signing happens back on the issuer's machine.
#
#   usage: certify_remote_cuda_x2.sh CARRY_DIR OUT_DIR [MODEL.gguf ...]
#   For each split mode (SPLIT_MODES, default "layer row") the embedded model, then each MODEL:
#   OUT_DIR/run-x2-<mode>.tar.xz, OUT_DIR/run-x2-<mode>-<model file stem>.tar.xz.
#   TENSOR_SPLIT=<w0,w1> (optional): llama.cpp's --tensor-split for every run (default: by free memory).
#   Each run's preflight reads both GPUs and `nvidia-smi topo -m` into the record's device class
#   (e.g. cuda-2x-nvidia-h200-9.0-580-nv18); reference_parity compares the split run with the CPU lane
#   and with the same lane on GPU0 alone; cleanup holds every GPU to its own baseline. A host with
#   fewer than two GPUs is refused by the runner's preflight (UNAVAILABLE, with both counts).
set -euo pipefail
carry=$(cd "$1" && pwd); out=$2; shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-remote-x2.XXXXXX)
mkdir -p "$out"

# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_require_models certify_remote_cuda_x2.sh "$@" || exit 2
lanes_remote_python

lanes_remote_unpack "$carry" cuda cpu
lanes_remote_ctest_bundle "$carry" cuda "$work/lanes"
lanes_remote_models
lanes_remote_cuda_libs "$work/lanes/cuda"

# What the host says, kept beside the runs for the operator (the runner logs its own copies, digested).
{ nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,memory.used --format=csv,noheader
  nvidia-smi topo -m; } > "$out/host_gpus.txt" 2>&1 || true

embedded=(--model="$models/tiny_llama_f32.gguf" --model_source=embedded://tools/model/tiny_llama_f32.gguf)
runner_args=(--lane=linux-x86_64-cuda --gpus=2 --gpu_index=0
  --lane_dir="$work/lanes/cuda" --evidence="$work/lanes/cuda.evidence.pb"
  --cpu_lane_dir="$work/lanes/cpu" --cpu_lane_evidence="$work/lanes/cpu.evidence.pb" --spec="$carry/spec.json"
  --ctest_bundle="$work/lanes/cuda_ctest"
  --roofline_model="$models/roofline_f16.gguf" --policy="$repo/evidence/policy.json")
[ -n "${TENSOR_SPLIT:-}" ] && runner_args+=(--tensor_split="$TENSOR_SPLIT")


overall=0
for mode in ${SPLIT_MODES:-layer row}; do
  lanes_remote_certify "run-x2-$mode" --split_mode="$mode" "${embedded[@]}" || overall=1
  for model in "$@"; do
    stem=$(basename "$model" .gguf)
    lanes_remote_certify "run-x2-$mode-$stem" --split_mode="$mode" --model="$model" --model_source="model-store:$model" || overall=1
  done
done
exit "$overall"
