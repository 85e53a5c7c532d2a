#!/usr/bin/env bash
# The Vulkan lane's share of a GPU slot as one job (detached.sh start NAME ...), ordered so that
# nothing shares the host with a speed measurement: the certification runs alone; then the
# CUDA+Vulkan routes (they measure no speed) while the upstream-default Vulkan reference builds and
# the bench's 7B-shaped model is made; then the lane/upstream bench alone. Each stage's results are
# in OUT as soon as it ends, so a slot that runs out keeps what finished.
#   usage: vulkan_all_remote.sh CARRY VULKAN_CARRY SRC_DIR OUT [MODEL.gguf ...]
# MODEL: real models, certified and routed after the embedded one. BENCH_MODELS="LABEL=FILE ...":
# the models benched beside the embedded and the 7B-shaped ones. The routes are bound to the CUDA
# runs in /tmp/lanes-stash/cuda-run[-<stem>]/ (certify_remote_vulkan.sh).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
carry=$1 vcarry=$2 src=$3 out=$4; shift 4
mkdir -p "$out/certify" "$out/route" "$out/bench"
overall=0

ROUTES=0 bash "$here/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/certify" "$@"
status=$?
echo "certification exit status $status"
[ "$status" = 0 ] || overall=1

runs=$(mktemp -d /tmp/lanes-vk-runs.XXXXXX)
names=$(for model in "$@"; do echo "run-$(basename "$model" .gguf)"; done)
[ "${SKIP_EMBEDDED:-0}" = 1 ] || names="run $names"
for name in $names; do
  # Archives over 15 MB come back in parts: joined here in name order.
  cat "$out/certify/$name.tar.xz"* | tar -xJf - -C "$runs" "$name/runner_report.pb" || overall=1
done

{ VULKAN_CARRY=$vcarry bash "$here/bench_remote.sh" build vulkan "$carry" "$src" &&
  VULKAN_CARRY=$vcarry bash "$here/bench_remote.sh" models vulkan "$carry"; } > "$out/bench/build.console.txt" 2>&1 &
build_pid=$!
VULKAN_RUNS=$runs bash "$here/certify_remote_vulkan.sh" "$carry" "$vcarry" "$out/route" "$@"
status=$?
echo "route exit status $status"
[ "$status" = 0 ] || overall=1
wait "$build_pid"
build_status=$?
tail -n 5 "$out/bench/build.console.txt"
echo "reference build exit status $build_status"
[ "$build_status" = 0 ] || exit 1

# shellcheck disable=SC2086
VULKAN_CARRY=$vcarry bash "$here/bench_remote.sh" run vulkan "$carry" "$src" "$out/bench" ${BENCH_MODELS:-}
status=$?
echo "bench exit status $status"
[ "$status" = 0 ] || overall=1
exit "$overall"
