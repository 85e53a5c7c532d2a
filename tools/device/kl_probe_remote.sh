#!/usr/bin/env bash
# Diagnosis on a GPU host, never certification evidence: where a model's corpus parity between the
# CUDA lane and the CPU lane fails, which kernel path moves it. Upstream's llama-perplexity
# --kl-divergence over corpus_parity's chunks (258-token context, 32 chunks), against a CPU-lane base
# with the recipe corpus_parity runs (-fa auto) and one with flash attention off; variants: the CPU
# lane with flash attention off, the CUDA lane as certified, with flash attention off, with
# 8-token micro-batches (ggml-cuda's mat-vec kernels instead of MMQ), without CUDA graphs, and
# without op fusion; then which part of the model moves it: one group of weights at a time kept on
# the CPU (-ot, with --no-op-offload so that their matrix products really run there), the KV cache
# and attention on the CPU (-nkvo), layers 0-19 on the CPU, and nothing on the GPU. With KL_REF set
# to an upstream-default CUDA build of the same tree (bench_remote.sh build: its build/ directory),
# that build too, as the CUDA lane: whether the gap is the lane's build or upstream's CUDA backend;
# KL_REF_ONLY=1 runs only that build's variants (the lane's were run while the reference built; a
# carry with only the CPU lane is enough).
# KL_LOGS=DIR keeps every llama-perplexity output verbatim as DIR/<model>.<n>.log (named in OUT_FILE
# beside its figures), so that the figures travel with the output they were read from.
#   usage: [KL_REF=DIR [KL_REF_ONLY=1]] [KL_LOGS=DIR] kl_probe_remote.sh CARRY_DIR OUT_FILE MODEL.gguf ...
set -uo pipefail
carry=$(cd "$1" && pwd); out=$2; shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-klprobe.XXXXXX)
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
# KL_REF_ONLY=1 runs no CUDA-lane variant, so its carry need not hold the CUDA lane.
if [ "${KL_REF_ONLY:-0}" = 1 ]; then
  lanes_remote_unpack "$carry" cpu || exit 2
else
  lanes_remote_unpack "$carry" cuda cpu || exit 2
fi
lanes_remote_cuda_libs "$work/lanes/cuda"
corpus="$repo/third_party/corpus/gnu-gpl-3-and-2.txt"
declare -A bin=([cpu]="$work/lanes/cpu/bin" [cuda]="$work/lanes/cuda/bin")
if [ -n "${KL_REF:-}" ]; then
  [ -x "$KL_REF/bin/llama-perplexity" ] || { echo "KL_REF=$KL_REF: no bin/llama-perplexity (bench_remote.sh build first)" >&2; exit 2; }
  bin[ref]="$KL_REF/bin"
fi

logs=${KL_LOGS:-}
[ -z "$logs" ] || mkdir -p "$logs"
runs=0
figures() {  # the KL summary of one llama-perplexity run, or its output's tail when it printed none
  local log=$1 kept
  if [ -n "$logs" ]; then
    runs=$((runs + 1)); kept="$logs/$(basename "$model" .gguf).$runs.log"
    cp "$log" "$kept"; echo "log: $(basename "$kept") sha256 $(sha256sum "$kept" | cut -d' ' -f1)"
  fi
  if ! grep -E "(^|[0-9] [IWE] )(Final estimate|Mean +KLD|99.0% +KLD|Maximum KLD|Same top p|Mean +PPL\(Q\)|Mean +PPL\(base\))" "$log"; then
    echo "no figures; the run's last lines:"; tail -n 8 "$log"
  fi
}

set -f  # the -ot patterns are regular expressions, never file names
for model in "$@"; do
  ppl=(-m "$model" -f "$corpus" -c 258 -b 258 --chunks 32 -t "$(nproc)")
  bases=(auto off); [ "${KL_REF_ONLY:-0}" = 1 ] && bases=(auto)
  for base_fa in "${bases[@]}"; do
    base="$work/base-$base_fa"
    echo "# $(basename "$model"): base = CPU lane -fa $base_fa"
    "$work/lanes/cpu/bin/llama-perplexity" "${ppl[@]}" -fa "$base_fa" --kl-divergence-base "$base" > "$work/log" 2>&1
    figures "$work/log"
    # LANE|ENVIRONMENT|FLAGS: ggml-cuda's own switches, one at a time (graphs, op fusion, MMQ's
    # activation precision), beside the flag variants.
    variants=("cuda||-fa off")
    [ "$base_fa" = auto ] && variants=("cpu||-fa off" "cuda||-fa auto" "cuda||-fa off" "cuda||-fa auto -ub 8"
      "cuda|GGML_CUDA_DISABLE_GRAPHS=1|-fa auto" "cuda|GGML_CUDA_DISABLE_FUSION=1|-fa auto"
      "cuda|GGML_CUDA_DISABLE_GRAPHS=1 GGML_CUDA_DISABLE_FUSION=1|-fa auto"
      "cuda||-fa auto --no-op-offload -ot token_embd=CPU,output=CPU" "cuda||-fa auto --no-op-offload -ot ffn_=CPU"
      "cuda||-fa auto --no-op-offload -ot attn_=CPU" "cuda||-fa auto -nkvo" "cuda||-fa auto --no-op-offload -ot norm=CPU"
      "cuda||-fa auto --no-op-offload -ot blk\\.1?[0-9]\\.=CPU" "cuda||-fa auto -ngl 0 -nkvo --no-op-offload")
    [ "${KL_REF_ONLY:-0}" = 1 ] && variants=()
    [ "$base_fa" = auto ] && [ -n "${bin[ref]:-}" ] && variants+=("ref||-fa auto" "ref||-fa auto -ub 8")
    for variant in "${variants[@]}"; do
      IFS='|' read -r lane environment flags <<< "$variant"
      echo "## vs $lane lane ${environment:+$environment }$flags"
      gpu=(); [ "$lane" != cpu ] && gpu=(-ngl 99)
      # shellcheck disable=SC2086
      env $environment "${bin[$lane]}/llama-perplexity" "${ppl[@]}" "${gpu[@]}" $flags \
        --kl-divergence-base "$base" --kl-divergence > "$work/log" 2>&1
      figures "$work/log"
    done
    rm -f "$base"
  done
done 2>&1 | tee -a "$out"
rm -rf "$work"
