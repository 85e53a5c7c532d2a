#!/usr/bin/env bash
# Runs the CUDA lane's certification on a GPU host that has no Bazel (e.g. the lent H200).
#
# The lanes themselves are the Bazel-built artifacts, carried as tarballs with their build
# evidence (tools/device/pack.sh makes the carry folder); nothing is rebuilt here. Signing happens
# back on the issuer's machine (certify_cli --mode=sign): the private key never travels.
#
#   usage: certify_remote_cuda.sh CARRY_DIR OUT_DIR [MODEL.gguf ...]
#   The embedded model first, then each MODEL (e.g. a locked model carried from a model store), one
#   certification run each: OUT_DIR/run.tar.xz (embedded), OUT_DIR/run-<model file stem>.tar.xz.
#   KILL_DURING=<step> (optional, issue 15): first start a bring-up run (non-recordable), SIGKILL the
#   runner once <step> has started, and record what is left (processes, GPU memory) in
#   OUT_DIR/kill_test.txt; the certification run that follows is "the next run" whose preflight
#   must find the dead run's lock and report what it reaped.
#   SKIP_EMBEDDED=1: only the MODELs (the embedded model's record stands; a slot's minutes go to the
#   real models).
set -euo pipefail
carry=$(cd "$1" && pwd); out=$2; shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-remote.XXXXXX)
mkdir -p "$out"

# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_require_models certify_remote_cuda.sh "$@" || exit 2
# An earlier session's runs on this machine must never stand in for these (the routes bind to them).
rm -rf /tmp/lanes-stash/cuda-run /tmp/lanes-stash/cuda-run-*
lanes_remote_python

lanes_remote_unpack "$carry" cuda cpu
lanes_remote_ctest_bundle "$carry" cuda "$work/lanes"
lanes_remote_models
# Host facts (nvidia-smi, resolved CUDA libraries, LD_LIBRARY_PATH, toolkit version.json, python)
# and the bandwidth ceiling (tools/runner/probes/cuda/membw.cu, compiled with this host's nvcc) are taken
# by the runner itself, inside its preflight and speed steps, so that they are digested with the run.
lanes_remote_cuda_libs "$work/lanes/cuda"

embedded=(--model="$models/tiny_llama_f32.gguf" --model_source=embedded://tools/model/tiny_llama_f32.gguf)
runner_args=(--lane=linux-x86_64-cuda
  --lane_dir="$work/lanes/cuda" --evidence="$work/lanes/cuda.evidence.pb"
  --cpu_lane_dir="$work/lanes/cpu" --cpu_lane_evidence="$work/lanes/cpu.evidence.pb" --spec="$carry/spec.json"
  --ctest_bundle="$work/lanes/cuda_ctest"
  --roofline_model="$models/roofline_f16.gguf" --policy="$repo/evidence/policy.json")

gpu_state() {  # GPU memory in use and every process of either lane still alive
  echo "# $1 $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  echo "lane processes alive: $(pgrep -fc "$work/lanes/" || true)"
  pgrep -fa "$work/lanes/" || true
}

if [ -n "${KILL_DURING:-}" ]; then
  {
    gpu_state "baseline before the killed run"
    python3 -m tools.runner.runner "${runner_args[@]}" "${embedded[@]}" --skip=fixture_parity,op_oracle \
      --out_dir="$work/killed" --report="$work/killed/runner_report.pb" > "$out/killed_runner.txt" 2>&1 &
    victim=$!
    for _ in $(seq 600); do [ -e "$work/killed/logs/$KILL_DURING.log" ] && break; sleep 0.2; done
    sleep 3
    gpu_state "during $KILL_DURING, runner pid $victim"
    kill -KILL "$victim"; wait "$victim" 2>/dev/null || true
    echo "# SIGKILL sent to runner pid $victim during $KILL_DURING"
    sleep 5
    gpu_state "5 s after the kill"
    ls -d /tmp/lanes-run* 2>/dev/null | sed 's/^/staging left: /' || true
  } 2>&1 | tee "$out/kill_test.txt"
fi

overall=0
if [ "${SKIP_EMBEDDED:-0}" != 1 ]; then
  lanes_remote_certify run "${embedded[@]}" || overall=1
  # Kept on this machine for certify_remote_vulkan.sh (the mixed route names the CUDA lane's run).
  rm -rf /tmp/lanes-stash/cuda-run; mkdir -p /tmp/lanes-stash; cp -r "$work/run" /tmp/lanes-stash/cuda-run
fi
for model in "$@"; do
  stem=$(basename "$model" .gguf)
  lanes_remote_certify "run-$stem" --model="$model" --model_source="model-store:$model" || overall=1
  # certify_remote_vulkan.sh measures the route for this model bound to this run.
  cp -r "$work/run-$stem" "/tmp/lanes-stash/cuda-run-$stem"
done
[ -n "${KILL_DURING:-}" ] && gpu_state "after the certification run" >> "$out/kill_test.txt"
# KL_PROBE="MODEL ...": where a model's parity fails, which kernel path moves it (diagnosis only).
if [ -n "${KL_PROBE:-}" ]; then
  # shellcheck disable=SC2086
  bash "$repo/tools/device/kl_probe_remote.sh" "$carry" "$out/kl_probe.txt" $KL_PROBE || true
fi
exit "$overall"
