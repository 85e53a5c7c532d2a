#!/usr/bin/env bash
# Runs the Vulkan lane's certification and the CUDA+Vulkan mixed-route measurement on a GPU host
# that has no Bazel (e.g. the lent H200), right after certify_remote_cuda.sh on the same machine.
#
#   usage: certify_remote_vulkan.sh CARRY_DIR VULKAN_CARRY_DIR OUT_DIR [MODEL.gguf ...]
# The embedded model first, then each MODEL, one certification run each (OUT_DIR/run.tar.xz,
# OUT_DIR/run-<stem>.tar.xz), then the CUDA+Vulkan route for each model (OUT_DIR/compat.tar.xz,
# OUT_DIR/compat-<stem>.tar.xz), bound to that model's runs of both lanes.
# CARRY_DIR is what certify_remote_cuda.sh used (CUDA and CPU lanes, spec, protos, wheels, vocab);
# VULKAN_CARRY_DIR (tools/device/pack_vulkan.sh) holds the Vulkan lane and the pinned Vulkan loader
# (libvulkan1 .deb, unpacked into a private directory, never over /). The host's own Vulkan ICD is
# used: its manifest is searched for in the usual directories and the NVIDIA driver's, and the
# runner's preflight records which manifest and loader were used. Signing happens back on the
# issuer's machine: the private key never travels.
#
# SKIP_EMBEDDED=1: only the MODELs, certified and routed (the embedded model's records stand).
# VULKAN_RUNS=<dir>: only the mixed routes, bound to the finished Vulkan runs in <dir> (run/,
# run-<stem>/, each with its runner_report.pb, as this script's archives unpack); CUDA_RUNS=<dir>
# likewise names the CUDA runs (e.g. the committed ones' reports, carried) where
# certify_remote_cuda.sh did not run in this machine's session. ROUTES=0: only the
# certification runs (the routes measure no speed, so other work may share the host while they run).
# DETACH=1: the whole run goes on in its own session (setsid) on that machine and this command
# returns at once; `tools/device/poll_detached.sh OUT_DIR` reports progress and, once finished,
# copies the results into OUT_DIR. For runs longer than one device command (10 minutes): Vulkan's
# test-backend-ops needs minutes per op for FLASH_ATTN_EXT and MUL_MAT on the H200.
set -euo pipefail
if [ "${DETACH:-0}" = 1 ]; then
  stash=/tmp/lanes-stash/vulkan-detached
  rm -rf "$stash"; mkdir -p "$stash"
  DETACH=0 setsid nohup bash -c 'script=$0 carry=$1 vcarry=$2 out=$3; shift 3
    bash "$script" "$carry" "$vcarry" "$out" "$@"; echo "detached run exit status $?"' \
    "$0" "$1" "$2" "$stash/out" "${@:4}" > "$stash/console.txt" 2>&1 < /dev/null &
  echo "$!" > "$stash/pid"
  echo "detached: pid $!, console $stash/console.txt"
  exit 0
fi
carry=$(cd "$1" && pwd); vcarry=$(cd "$2" && pwd); out=$3; shift 3
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-remote-vk.XXXXXX)
mkdir -p "$out"

# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_require_models certify_remote_vulkan.sh "$@" || exit 2
lanes_remote_python

lanes_remote_unpack "$carry" cuda cpu
lanes_remote_unpack "$vcarry" vulkan
if [ -z "${VULKAN_RUNS:-}" ]; then lanes_remote_ctest_bundle "$vcarry" vulkan "$work/lanes"; fi
lanes_remote_vulkan_env "$vcarry" "$work/vkroot" || exit 2
lanes_remote_cuda_libs "$work/lanes/cuda"
lanes_remote_models

embedded=(--model="$models/tiny_llama_f32.gguf" --model_source=embedded://tools/model/tiny_llama_f32.gguf)
status=0
if [ -n "${VULKAN_RUNS:-}" ]; then
  # Routes only: the Vulkan lane's certification already ran (its runs, unpacked here).
  names=$(for model in "$@"; do echo "run-$(basename "$model" .gguf)"; done)
  [ "${SKIP_EMBEDDED:-0}" = 1 ] || names="run $names"
  for name in $names; do
    mkdir -p "$work/$name"
    cp "$VULKAN_RUNS/$name/runner_report.pb" "$work/$name/runner_report.pb" || \
      { echo "no Vulkan run $name in VULKAN_RUNS=$VULKAN_RUNS" >&2; exit 2; }
    if [ -n "${CUDA_RUNS:-}" ]; then  # where route() looks for this session's CUDA run
      mkdir -p "/tmp/lanes-stash/cuda-$name"
      cp "$CUDA_RUNS/$name/runner_report.pb" "/tmp/lanes-stash/cuda-$name/runner_report.pb" || \
        { echo "no CUDA run $name in CUDA_RUNS=$CUDA_RUNS" >&2; exit 2; }
    fi
  done
else
  # FIXTURE_PROBE=<ops>: time test-backend-ops on a few ops first (how long the full fixture run takes).
  for op in ${FIXTURE_PROBE:-}; do
    /usr/bin/time -f "test-backend-ops -o $op: %e s" timeout 120 "$work/lanes/vulkan/bin/test-backend-ops" test -b Vulkan0 -o "$op" 2>&1 | tail -3
  done
fi

certify() {  # $1: run name, then the model flags; the run goes to $work/$1, its archive to $out/$1.tar.xz
  local name=$1 rc; shift
  set +e
  # RUNNER_EXTRA: bring-up flags (e.g. --skip=fixture_parity), which make the run non-recordable.
  python3 -m tools.runner.runner ${RUNNER_EXTRA:-} --timeout_s="${RUNNER_TIMEOUT_S:-900}" --lane=linux-x86_64-vulkan \
    --lane_dir="$work/lanes/vulkan" --evidence="$work/lanes/vulkan.evidence.pb" \
    --cpu_lane_dir="$work/lanes/cpu" --cpu_lane_evidence="$work/lanes/cpu.evidence.pb" --peer_lane_dir="$work/lanes/cuda" --peer_backend=cuda --spec="$carry/spec.json" \
    --ctest_bundle="$work/lanes/vulkan_ctest" "$@" \
    --roofline_model="$models/roofline_f16.gguf" --policy="$repo/evidence/policy.json" \
    --out_dir="$work/$name" --report="$work/$name/runner_report.pb" 2>&1 | tee "$out/$name.txt"
  rc=${PIPESTATUS[0]}
  set -e
  tar -cJf "$out/$name.tar.xz" -C "$work" "$name" || { echo "cannot archive the run into $out/$name.tar.xz" >&2; exit 2; }
  echo "runner exit status $rc ($name)"
  return "$rc"
}

# The mixed route for one model: one rpc-server per lane (CUDA and Vulkan), the CUDA lane's client
# splitting the layers across them, compared with each lane alone and the CPU lane, and over the
# corpus with the CPU lane. With two GPUs the servers sit on different GPUs (CUDA0, Vulkan1), else
# both on the one GPU. $1: the compat name, $2: the model, $3: the CUDA run, $4: the Vulkan run.
route() {
  local name=$1 model=$2 cuda_run=$3 vulkan_run=$4 cuda_report="" rc
  local vk_dev=Vulkan0; [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && vk_dev=Vulkan1
  # The CUDA lane's certification run of this model: this session's (certify_remote_cuda.sh stashed it)
  # or else, for the embedded model, the committed run whose build evidence is exactly the carried CUDA lane's.
  if [ -f "$cuda_run/runner_report.pb" ]; then
    cuda_report=$cuda_run/runner_report.pb
  elif [ "$name" = compat ]; then
    cuda_report=$(python3 - "$work/lanes/cuda.evidence.pb" "$repo"/evidence/runs/linux-x86_64-cuda.*/runner_report.pb <<'PY'
import hashlib, sys
from proto import runner_report_pb2
want = "sha256:" + hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()
hits = []
for path in sys.argv[2:]:
    rep = runner_report_pb2.RunnerReport()
    rep.ParseFromString(open(path, "rb").read())
    if rep.build_evidence_digest == want:
        hits.append(path)
print(hits[0] if len(hits) == 1 else "")
PY
)
  fi
  echo "CUDA certification run for $name: ${cuda_report:-none (the compatibility record cannot be bound)}"
  unset GGML_VK_VISIBLE_DEVICES
  set +e
  python3 -m tools.compat.rpc_route_cli \
    --lane="linux-x86_64-cuda:$work/lanes/cuda:CUDA0:$cuda_report" \
    --lane="linux-x86_64-vulkan:$work/lanes/vulkan:$vk_dev:$vulkan_run/runner_report.pb" \
    --client=linux-x86_64-cuda --cpu_lane_dir="$work/lanes/cpu" --cpu_evidence="$work/lanes/cpu.evidence.pb" \
    --model="$model" --spec="$carry/spec.json" --out_dir="$work/$name" 2>&1 | tee "$out/$name.txt"
  rc=${PIPESTATUS[0]}
  set -e
  [ -n "$cuda_report" ] && cp "$cuda_report" "$work/$name/cuda_runner_report.pb"
  tar -cJf "$out/$name.tar.xz" -C "$work" "$name"
  echo "compat exit status $rc ($name)"
  return "$rc"
}

overall=0
if [ -z "${VULKAN_RUNS:-}" ]; then
  [ "${SKIP_EMBEDDED:-0}" = 1 ] || certify run "${embedded[@]}" || overall=1
  for model in "$@"; do
    stem=$(basename "$model" .gguf)
    certify "run-$stem" --model="$model" --model_source="model-store:$model" || overall=1
  done
fi
if [ "${ROUTES:-1}" != 0 ]; then
  [ "${SKIP_EMBEDDED:-0}" = 1 ] || route compat "$models/tiny_llama_f32.gguf" /tmp/lanes-stash/cuda-run "$work/run" || overall=1
  for model in "$@"; do
    stem=$(basename "$model" .gguf)
    route "compat-$stem" "$model" "/tmp/lanes-stash/cuda-run-$stem" "$work/run-$stem" || overall=1
  done
fi
# A device command returns files of at most 16 MiB: larger archives travel in parts (cat to rejoin).
for f in "$out"/*.tar.xz; do
  if [ "$(stat -c %s "$f")" -gt 15000000 ]; then split -b 15000000 -d "$f" "$f.part"; rm "$f"; fi
done
exit "$overall"
