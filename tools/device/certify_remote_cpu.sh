#!/usr/bin/env bash
# Runs the CPU lane's certification on another host without Bazel (e.g. the lent H200's Intel Xeon,
# whose CPU loads the sapphirerapids variant): the Bazel-built lane carried with its build evidence
# (tools/device/pack.sh cpu), nothing rebuilt. Signing happens back on the issuer's machine
# (bazel run //tools:certify -- --publish --lane=cpu --remote_run=RUN --evidence=CARRY/cpu.evidence.pb).
#   usage: certify_remote_cpu.sh CARRY_DIR OUT_DIR    (OUT_DIR/run.tar.xz, OUT_DIR/runner.txt)
set -euo pipefail
carry=$(cd "$1" && pwd); out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-remote.XXXXXX)
mkdir -p "$out"

# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_python
mkdir -p "$work/lanes"
tar -xJf "$carry/cpu_lane.tar.xz" -C "$work/lanes"
lanes_remote_cpu_models

set +e
python3 -m tools.runner.runner --lane=linux-x86_64-cpu \
  --lane_dir="$work/lanes/cpu" --evidence="$work/lanes/cpu.evidence.pb" --spec="$carry/spec.json" \
  --model="$models/tiny_llama_f32.gguf" --model_source=embedded://tools/model/tiny_llama_f32.gguf \
  --roofline_model="$models/cpu_roofline_f16.gguf" --policy="$repo/evidence/policy.json" \
  --out_dir="$work/run" --report="$work/run/runner_report.pb" 2>&1 | tee "$out/runner.txt"
status=${PIPESTATUS[0]}
set -e
tar -cJf "$out/run.tar.xz" -C "$work" run
echo "runner exit status $status"
exit "$status"
