#!/usr/bin/env bash
# On an AMX host (the lent H200's Intel Xeon): the CPU lane's variants before and after patch 0005,
# and a quantized model through llama-completion with a multi-token batch.
#   usage: cpu_variants_remote.sh CARRY_DIR OUT_DIR [UNPATCHED_SO [MODEL]]
#   CARRY_DIR from tools/device/pack.sh cpu; UNPATCHED_SO: libggml-cpu-sapphirerapids.so built from
#   the pinned tree without patch 0005 (same flags, same compiler); MODEL: a Q4_K_M GGUF.
# OUT_DIR/variants.txt: each probe's summary and exit status; OUT_DIR/completion.txt: the model runs.
set -uo pipefail
carry=$(cd "$1" && pwd); out=$2; unpatched=${3:-}; model=${4:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-variants.XXXXXX)
mkdir -p "$out" "$work/lanes"
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_python
tar -xJf "$carry/cpu_lane.tar.xz" -C "$work/lanes"
lane=$work/lanes/cpu
describe() {  # an exit status with its signal named (tools/runner/exits.py; a shell gives 128 + N)
  python3 -c "import sys; sys.path.insert(0, sys.argv[1]); from tools.runner import exits; print(exits.describe(sys.argv[2]))" "$repo" "$1"
}
probe() {  # $1 label, then the probe's arguments
  local label=$1; shift
  python3 "$repo/tools/runner/probes/cpu_variant_probe.py" --lib_dir "$lane/lib" --variant_dir "$lane/bin" \
    --threads 4 --out "$work/$label.npz" "$@" > "$out/probe.$label.txt" 2>&1
  local code=$?
  echo "== $label: exit $(describe "$code")"
  grep -E "^variant |^case .* (unsupported|error)$" "$out/probe.$label.txt" | tail -3
  [ "$code" = 0 ] || tail -2 "$out/probe.$label.txt"
}
{
  grep -m1 "model name" /proc/cpuinfo; grep -o -m1 -w "amx_tile\|amx_int8\|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  probe x64 --variant x64 --save_inputs
  probe sapphirerapids --variant sapphirerapids
  [ -n "$unpatched" ] && probe sapphirerapids-unpatched --variant sapphirerapids --variant_path "$unpatched"
  python3 - "$work" <<'PY'
import sys, numpy as np
sys.path.insert(0, "REPO")
from tools.runner.checks import cpu_variants
work = sys.argv[1]
base = dict(np.load(f"{work}/x64.npz"))
for label in ("sapphirerapids",):
    got = dict(np.load(f"{work}/{label}.npz"))
    rows = {}
    for key, value in got.items():
        op, wtype, batch, buffer = key.split(".")
        want = base[f"{op}.{wtype}.{batch}.default"]
        ok = cpu_variants.nmse(value, want) <= cpu_variants.MAX_NMSE_VARIANT
        r = rows.setdefault((op, buffer), [0, 0, 0]); r[0] += 1; r[1 + (not ok)] += 1
    for (op, buffer), (n, p, f) in sorted(rows.items()):
        print(f"{label} {op} {buffer}: evaluated {n} passed {p} failed {f}")
PY
} 2>&1 | sed "s#REPO#$repo#" | tee "$out/variants.txt"
if [ -n "$model" ]; then
  prompt="The history of computing spans centuries, from the abacus and mechanical calculators to the electronic machines of the twentieth century. Describe in a few sentences how the transistor changed the design of computers."
  {
    for build in lane unpatched; do
      dir=$lane
      if [ "$build" = unpatched ]; then
        [ -n "$unpatched" ] || continue
        dir=$work/unpatched; cp -r "$lane" "$dir"; cp "$unpatched" "$dir/bin/libggml-cpu-sapphirerapids.so"
      fi
      echo "== $build: llama-completion, one 512-token batch (-b 512 -ub 512), 16 threads"
      "$dir/bin/llama-completion" -m "$model" -p "$prompt" -n 32 --temp 0 -s 42 -b 512 -ub 512 -t 16 -no-cnv \
        > "$out/completion.$build.log" 2>&1
      code=$?
      echo "exit $(describe "$code")"
      grep -E "loaded CPU backend|AMX model buffer|CPU_REPACK model buffer|model buffer size|prompt eval time|eval time" "$out/completion.$build.log" | head -8
      [ "$code" = 0 ] && grep -v "^llama\|^load\|^print_info\|^common\|^main:\|^system_info\|^sampler\|^generate\|^build\|^\s*$" "$out/completion.$build.log" | tail -4
    done
  } 2>&1 | tee "$out/completion.txt"
fi
