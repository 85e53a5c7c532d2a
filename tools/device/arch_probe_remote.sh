#!/usr/bin/env bash
# Diagnosis on a GPU host, never evidence for a record or a ratio: whether the CUDA lane's pp512 gap
# to upstream on the quantized models comes from its CUDA architecture (the lane compiles 90a;
# upstream's default is the host GPU's native sm_90). The upstream-default reference and the same
# build with only CMAKE_CUDA_ARCHITECTURES=90a (bench_remote.sh build, REFERENCE_NAME/REFERENCE_EXTRA)
# run beside the lane, rotated each round so that no build always runs first, with the bench's
# llama-bench flags; the raw JSON and a table of per-build medians go to OUT.
#   arch_probe_remote.sh build CARRY SRC_DIR            both references, in parallel
#   [NO_LANE=1] arch_probe_remote.sh run CARRY SRC_DIR OUT ROUNDS MODEL.gguf ...
#                                                       NO_LANE=1: the two references only (a carry
#                                                       without the CUDA lane; its ratio to upstream is
#                                                       the committed bench's)
set -uo pipefail
mode=$1 carry=$(cd "$2" && pwd) src=$(cd "$3" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
arch_entry="-DCMAKE_CUDA_ARCHITECTURES=90a"
case "$mode" in
build)
  bash "$here/bench_remote.sh" build cuda "$carry" "$src" > /tmp/lanes-stash/arch-ref.txt 2>&1 &
  ref_pid=$!
  REFERENCE_NAME=90a REFERENCE_EXTRA=$arch_entry bash "$here/bench_remote.sh" build cuda "$carry" "$src" \
    > /tmp/lanes-stash/arch-ref90a.txt 2>&1
  status=$?
  wait "$ref_pid" || status=1
  tail -n 4 /tmp/lanes-stash/arch-ref.txt /tmp/lanes-stash/arch-ref90a.txt
  exit "$status"
  ;;
run) ;;
*) echo "usage: arch_probe_remote.sh build CARRY SRC_DIR | run CARRY SRC_DIR OUT ROUNDS MODEL.gguf ..." >&2; exit 2 ;;
esac
out=$4 rounds=$5; shift 5
mkdir -p "$out"
work=$(mktemp -d /tmp/lanes-archprobe.XXXXXX)
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_require_models arch_probe_remote.sh "$@" || exit 2
builds=(lane ref ref90a)
if [ "${NO_LANE:-0}" = 1 ]; then
  builds=(ref ref90a)
else
  lanes_remote_unpack "$carry" cuda || exit 2
  lanes_remote_cuda_libs "$work/lanes/cuda"
fi
declare -A dir=([lane]="$work/lanes/cuda" [ref]=/tmp/lanes-stash/ref-cuda/build [ref90a]=/tmp/lanes-stash/ref-cuda-90a/build)
for b in "${builds[@]}"; do
  [ -x "${dir[$b]}/bin/llama-bench" ] || { echo "no llama-bench in ${dir[$b]}: arch_probe_remote.sh build first" >&2; exit 2; }
  echo "# $b: $(grep -h CMAKE_CUDA_ARCHITECTURES: "${dir[$b]}/CMakeCache.txt" 2>/dev/null || echo 'the lane (90a)')"
done | tee "$out/arch_probe.txt"
mkdir -p "$work/raw"
n=${#builds[@]}
for ((round = 0; round < rounds; round++)); do
  for model in "$@"; do
    for ((k = 0; k < n; k++)); do
      b=${builds[$(((round + k) % n))]}
      raw="$work/raw/$(basename "$model" .gguf).$b.$round.json"
      "${dir[$b]}/bin/llama-bench" -m "$model" -p 512 -n 128 -r 3 -t "$(nproc)" -ngl 99 -o json > "$raw" 2> "$raw.log" \
        || { echo "llama-bench $b round $round $(basename "$model") failed:"; tail -n 5 "$raw.log"; }
    done
  done
done
python3 - "$work/raw" <<'PY' | tee -a "$out/arch_probe.txt"
import collections, json, pathlib, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    model, build, _ = path.name[:-len(".json")].rsplit(".", 2)
    for row in json.loads(path.read_text() or "[]"):
        runs[model][(build, "pp" if row["n_prompt"] else "tg")].append(row["avg_ts"])
for model, by in sorted(runs.items()):
    for test in ("pp", "tg"):
        med = {b: statistics.median(by[(b, test)]) for b in ("lane", "ref", "ref90a") if by[(b, test)]}
        rounds = {b: [round(v) for v in by[(b, test)]] for b in med}
        ratio = lambda a, b: f"{med[a] / med[b]:.3f}" if a in med and b in med else "n/a"
        print(f"{model} {test}: medians {({b: round(v) for b, v in med.items()})}; lane/ref {ratio('lane', 'ref')}, "
              f"ref90a/ref {ratio('ref90a', 'ref')}, lane/ref90a {ratio('lane', 'ref90a')}; rounds {rounds}")
PY
tar -cJf "$out/arch_probe_raw.tar.xz" -C "$work" raw
rm -rf "$work"
