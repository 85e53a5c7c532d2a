#!/usr/bin/env bash
# Runs the CUDA lane's certification on a GPU host that has no Bazel (e.g. the lent H200).
#
# The lanes themselves are the Bazel-built artifacts, carried as tarballs with their build
# evidence (tools/device/pack.sh makes the carry folder); nothing is rebuilt here. Signing happens
# back on the issuer's machine (certify_cli --mode=sign): the private key never travels.
#
#   usage: certify_remote_cuda.sh CARRY_DIR OUT_DIR
set -euo pipefail
carry=$(cd "$1" && pwd); out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-remote.XXXXXX)
mkdir -p "$out"

python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$carry"/wheels/*.whl
export PYTHONPATH="$work/site:$carry/py:$repo"
export NCCL_NVLS_ENABLE=0

mkdir -p "$work/lanes" "$work/models"
tar -xJf "$carry/cuda_lane.tar.xz" -C "$work/lanes"
tar -xJf "$carry/cpu_lane.tar.xz" -C "$work/lanes"

# The embedded model, regenerated from the pinned vocab: it must be byte-identical to the one
# //tools/model:tiny_llama_f32 builds.
python3 -m tools.model.make_tiny_model --vocab "$carry/ggml-vocab-llama-spm.gguf" --out "$work/models/tiny_llama_f32.gguf"
echo "$(cat "$carry/tiny_llama_f32.sha256")  $work/models/tiny_llama_f32.gguf" | sha256sum -c -
# A synthetic model large enough to be memory-bandwidth bound (2.0 B parameters, F16, ~4 GB).
python3 -m tools.model.make_tiny_model --vocab "$carry/ggml-vocab-llama-spm.gguf" --out "$work/models/roofline_f16.gguf" \
  --dtype f16 --n_layer 8 --n_embd 4096 --n_head 32 --n_head_kv 8 --n_ff 14336

# cudart/cuBLAS come from the host's CUDA install (the lane ships neither); where the loader does
# not find them by default, point it at the toolkit. The runner records what was really loaded.
if ldd "$work/lanes/cuda/lib/libggml-cuda.so.0" | grep -q "not found"; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${CUDA_HOME:-/usr/local/cuda}/lib64"
fi
{ nvidia-smi; python3 --version; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; ldd "$work/lanes/cuda/lib/libggml-cuda.so.0";
  cat /usr/local/cuda/version.json 2>/dev/null; } > "$out/host.txt" 2>&1 || true

# The bandwidth ceiling, measured on this GPU now.
nvcc -O2 -arch=sm_90a -o "$work/membw" "$repo/tools/runner/cuda/membw.cu"
"$work/membw" | tee "$out/membw.json"
bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bandwidth_gbs"])' "$out/membw.json")

set +e
python3 -m tools.runner.runner --lane=linux-x86_64-cuda \
  --lane_dir="$work/lanes/cuda" --evidence="$work/lanes/cuda.evidence.pb" \
  --cpu_lane_dir="$work/lanes/cpu" --spec="$carry/spec.json" \
  --model="$work/models/tiny_llama_f32.gguf" --model_source=embedded://tools/model/tiny_llama_f32.gguf \
  --roofline_model="$work/models/roofline_f16.gguf" --hbm_bandwidth_gbs="$bw" \
  --policy="$repo/evidence/policy.json" \
  --out_dir="$work/run" --report="$work/run/runner_report.pb" 2>&1 | tee "$out/runner.txt"
status=${PIPESTATUS[0]}
set -e
tar -cJf "$out/run.tar.xz" -C "$work" run
echo "runner exit status $status"
exit "$status"
