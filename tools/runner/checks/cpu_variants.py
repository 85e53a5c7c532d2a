"""cpu_variants: every CPU variant of the lane that this host can run computes what the x64 baseline
variant computes, on the ops whose kernels differ between variants.

The CPU lane ships ggml's x86 variants (libggml-cpu-<variant>.so, GGML_BACKEND_DL) and ggml loads
the best one the host supports, so the kernels a node runs depend on the host: a variant's AVX-512,
VNNI or AMX kernels are reached nowhere else, and the model checks (F32 weights) never reach the
quantized ones. tools/runner/probes/cpu_variant_probe.py runs each variant in a process of its own
(a variant that faults takes only that process down; its signal is named) over quantized and F16
MUL_MAT with 1 and more tokens, in the default buffer and in each extra buffer type the variant
offers (CPU_REPACK, AMX), and FLASH_ATTN_EXT with F16 and Q8_0 K/V. The baseline x64 is itself
checked against float64 from the dequantized weights; every other variant against x64.

Raw files: cpu_variants.log (each probe's command, output and exit status) and
cpu_variants.<variant>.npz (the probe's outputs, the baseline's float64 references with them).
Counts per variant and op: variant.<v>.<op>.evaluated / passed / failed (an unsupported
case is not evaluated). The host's loaded variant (preflight's cpu_variant) must be evaluated.
"""

from __future__ import annotations

import pathlib
import re
import sys

import numpy as np

from proto import runner_report_pb2 as rpb
from tools.runner import exits, log_blocks
from tools.runner.checks.base import Check
from tools.runner.context import RunContext
from tools.runner.probes import cpu_variant_probe as probe
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "cpu_variants"
BASELINE = "x64"
PROBE = pathlib.Path(__file__).resolve().parents[1] / "probes" / "cpu_variant_probe.py"
# Normalized mean squared error bounds. x64 vs float64 of the dequantized weights: test-backend-ops'
# MUL_MAT bound (measured 4e-8 for F16 to 6.5e-5 for Q6_K: the activations are quantized to Q8 too).
# Another variant vs x64: measured 1e-13 (AVX2/AVX-512 kernels) and 4.8e-8 (AMX); one element of
# opposite sign in a 37 x 128 output is 8e-4.
MAX_NMSE_REFERENCE = 5e-4
MAX_NMSE_VARIANT = 1e-6
# The seeded weights vs what their quantized bytes hold (measured: Q4_0 7.4e-3, Q8_0 2.9e-5, F16 4e-8):
# a quantizer that wrote other numbers (zeros, say) makes every kernel agree on nothing.
MAX_QUANT_NMSE = {"f16": 1e-6, "q8_0": 2e-4, "q6_k": 2e-3, "q5_k": 5e-3, "q4_0": 2e-2, "q4_1": 2e-2,
                  "q4_k": 2e-2, "iq4_nl": 2e-2}
# What the pinned tree's variants take into their extra buffers (measured on zen4 and on a Xeon that
# runs all 14): a variant that declines one of these, or lacks the buffer, fails. A lane's own
# output never decides what is skipped.
_AVX2_REPACK = ("q4_0", "q4_k", "iq4_nl")
_NO_REPACK: dict[str, tuple[str, ...]] = {"CPU_REPACK": ()}
EXPECTED_EXTRA: dict[str, dict[str, tuple[str, ...]]] = {
    **{v: _NO_REPACK for v in ("x64", "sse42", "sandybridge", "ivybridge", "piledriver")},
    **{v: {"CPU_REPACK": _AVX2_REPACK} for v in ("haswell", "skylakex", "cannonlake", "cascadelake", "icelake",
                                                 "cooperlake", "zen4", "alderlake")},
    "sapphirerapids": {"CPU_REPACK": _AVX2_REPACK,
                       "AMX": tuple(t for t in probe.MUL_MAT_TYPES if t != "iq4_nl")},
}
_VARIANT_FILE = re.compile(r"^libggml-cpu-([A-Za-z0-9_]+)\.so$")
_SUMMARY = re.compile(r"^variant (\S+) score (\d+) buffer_types (\S+)$", re.MULTILINE)
_NOT_RUNNABLE = re.compile(r"^variant (\S+) not_runnable: ", re.MULTILINE)
_CASE = re.compile(r"^case (\S+) (start|computed|unsupported|error)$", re.MULTILINE)


def variant_names(variant_dir: pathlib.Path) -> list[str]:
    """The variants the lane ships, baseline first."""
    names = sorted(m.group(1) for p in variant_dir.glob("libggml-cpu-*.so") if (m := _VARIANT_FILE.match(p.name)))
    return sorted(names, key=lambda n: n != BASELINE)


def probe_command(ctx: RunContext, variant: str) -> list[str]:
    lane = ctx.config.lane_dir
    argv = [sys.executable, str(PROBE), "--lib_dir", str(lane / "lib"), "--variant_dir", str(lane / "bin"),
            "--variant", variant, "--threads", str(min(ctx.config.threads, 4)),
            "--out", str(ctx.logs_dir / f"{STEP}.{variant}.npz")]
    return argv + (["--save_inputs"] if variant == BASELINE else [])


def nmse(got: np.ndarray | None, want: np.ndarray | None) -> float:
    """sum((got - want)^2) / sum(want^2); inf when absent, not finite or the shapes differ."""
    if got is None or want is None:
        return float("inf")
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return float("inf")
    denominator = float(np.sum(want * want))
    return float(np.sum((got - want) ** 2) / denominator) if denominator > 0 else float("inf")


def expected_shape(case: probe.Case) -> tuple[int, ...]:
    if case.op == "MUL_MAT":
        return (case.batch, probe.MUL_MAT_N)
    return (case.batch, probe.FA_HEADS, probe.FA_HEAD_DIM)


def _dequantized(inputs: dict[str, np.ndarray], key: str, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The values a case's quantized bytes hold, dequantized by gguf-py (not by the lane)."""
    import gguf  # heavy import, only when a run is judged

    data = inputs.get(key)
    if data is None:
        raise ValueError(f"{STEP}.{BASELINE}.npz has no {key}")
    rows = int(np.prod(shape[:-1]))
    qtype = getattr(gguf.GGMLQuantizationType, type_name.upper())
    raw = np.asarray(data, dtype=np.uint8).reshape(rows, -1)
    values = raw.view(np.float16).astype(np.float32) if type_name == "f16" else gguf.quants.dequantize(raw, qtype)
    return np.asarray(values, dtype=np.float64).reshape(shape)


def reference(case: probe.Case, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    """(the case in float64 from its weights' quantized bytes, NMSE of those weights vs the seeded ones)."""
    if case.op == "MUL_MAT":
        w_seeded, x = probe.mul_mat_inputs(case)
        w = _dequantized(inputs, f"input.{case.inputs_id}.w", case.weight_type, w_seeded.shape)
        return x.astype(np.float64) @ w.T, nmse(w, w_seeded)
    q, k_seeded, v_seeded, mask = probe.flash_attn_inputs(case)
    k = _dequantized(inputs, f"input.{case.inputs_id}.k", case.weight_type, k_seeded.shape)
    v = _dequantized(inputs, f"input.{case.inputs_id}.v", case.weight_type, v_seeded.shape)
    out = np.empty(expected_shape(case))
    for h in range(probe.FA_HEADS):
        kv_head = h // (probe.FA_HEADS // probe.FA_KV_HEADS)
        scores = q[h].astype(np.float64) @ k[kv_head].T / np.sqrt(probe.FA_HEAD_DIM) + mask.astype(np.float64)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h, :] = (weights / weights.sum(axis=1, keepdims=True)) @ v[kv_head]
    return out, max(nmse(k, k_seeded), nmse(v, v_seeded))


def _load_npz(path: pathlib.Path) -> dict[str, np.ndarray] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise ValueError(f"{path.name}: not a probe output ({err})") from err


def _case_statuses(name: str, output: str, cases: list[probe.Case]) -> tuple[dict[str, str], list[str]]:
    """Each case's status, when the probe's case lines are exactly the expected sequence
    (`start` then one status per case, in order); else the problems."""
    lines = [(m.group(1), m.group(2)) for m in _CASE.finditer(output)]
    want = [(c.case_id, "start") for c in cases]
    got_starts = [(i, s) for i, s in lines if s == "start"]
    statuses = [(i, s) for i, s in lines if s != "start"]
    if got_starts != want or [i for i, _ in statuses] != [c.case_id for c in cases] or len(lines) != 2 * len(cases):
        return {}, [f"variant {name}: the probe's case lines are not one start and one status per expected case, "
                    f"in order ({len(lines)} lines for {len(cases)} cases)"]
    return dict(statuses), []


def _probe_runs(commands: list[log_blocks.Command], problems: list[str]) -> dict[str, log_blocks.Command]:
    """The probe command of each variant; any other command, or a variant probed twice, is a problem."""
    runs: dict[str, log_blocks.Command] = {}
    for cmd in commands:
        name = log_blocks.flag_value(cmd.argv, "--variant")
        if len(cmd.argv) < 2 or pathlib.Path(cmd.argv[1]).name != PROBE.name or name is None:
            problems.append(f"a command that is not the variant probe: {' '.join(cmd.argv)[:120]}")
            continue
        if log_blocks.flag_value(cmd.argv, "--variant_path") is not None:
            problems.append(f"variant {name} probed from another library (--variant_path): not the lane's")
        if name in runs:
            problems.append(f"variant {name} probed twice: a run is judged on one probe per variant")
        runs[name] = cmd
    return runs


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _ran(name: str, cmd: log_blocks.Command, logs_dir: pathlib.Path, counts: dict[str, int],
         problems: list[str]) -> tuple[str, list[probe.Case], dict[str, str], dict[str, np.ndarray]]:
    """How the probe ended ("not_runnable", "crashed", "unusable" or "ran") and, when it ran, its
    cases, their statuses and its outputs."""
    if cmd.exit_code == probe.NOT_RUNNABLE and not _CASE.search(cmd.output) and \
            [m.group(1) for m in _NOT_RUNNABLE.finditer(cmd.output)] == [name]:
        if name == BASELINE:
            problems.append(f"the baseline {BASELINE} is not runnable: nothing to compare with")
        counts[f"variant.{name}.not_runnable"] = 1
        return "not_runnable", [], {}, {}
    if cmd.exit_code != 0:
        started = [m.group(1) for m in _CASE.finditer(cmd.output) if m.group(2) == "start"]
        where = f" in case {started[-1]}" if started else ""
        problems.append(f"variant {name}: the lane crashed{where}: probe exited "
                        f"{exits.describe(cmd.exit_code) if cmd.exit_code is not None else '(no exit status logged)'}")
        return "crashed", [], {}, {}
    summaries = list(_SUMMARY.finditer(cmd.output))
    buffers = summaries[0].group(3).split(",") if len(summaries) == 1 and summaries[0].group(1) == name else []
    missing_buffers = sorted(set(EXPECTED_EXTRA[name]) - set(buffers))
    if not buffers or missing_buffers:
        problems.append(f"variant {name}: " + (f"lacks the extra buffers {missing_buffers}" if buffers
                                               else "no single summary line naming its buffers"))
        return "unusable", [], {}, {}
    cases = probe.cases_for([b for b in buffers if b != probe.DEFAULT_BUFFER])
    statuses, sequence_problems = _case_statuses(name, cmd.output, cases)
    data = _load_npz(logs_dir / f"{STEP}.{name}.npz")
    if sequence_problems or data is None:
        problems += sequence_problems or [f"variant {name}: exit 0 without its {STEP}.{name}.npz"]
        return "unusable", [], {}, {}
    counts[f"variant.{name}.score"] = int(summaries[0].group(2))
    want_keys = {c.case_id for c in cases if statuses[c.case_id] == "computed"}
    got_keys = {k for k in data if not k.startswith("input.")}
    if got_keys != want_keys:
        problems.append(f"variant {name}: {STEP}.{name}.npz holds {len(got_keys)} outputs for {len(want_keys)} "
                        f"computed cases (extra {sorted(got_keys - want_keys)[:3]}, missing {sorted(want_keys - got_keys)[:3]})")
    return "ran", cases, statuses, data


def _expected_output(name: str, case: probe.Case, data: dict[str, np.ndarray], baseline: dict[str, np.ndarray],
                     problems: list[str]) -> tuple[np.ndarray | None, float, str]:
    """(what the case must compute, its NMSE bound, against what): the baseline's default-buffer
    cases against float64, everything else against the baseline's default-buffer output."""
    if name == BASELINE and case.buffer == probe.DEFAULT_BUFFER:
        want, weights_error = reference(case, data)
        if not weights_error <= MAX_QUANT_NMSE[case.weight_type]:
            problems.append(f"variant {name} {case.case_id}: its weights' bytes hold other numbers than the "
                            f"seeded ones (NMSE {weights_error:.3g})")
        return want, MAX_NMSE_REFERENCE, "float64"
    if name == BASELINE:  # an extra buffer of the baseline vs its own default buffer
        return data.get(case.default_case_id), MAX_NMSE_REFERENCE, "float64"
    return baseline.get(case.default_case_id), MAX_NMSE_VARIANT, BASELINE


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str], list[str]]:
    """(counts, metrics, problems, table lines) from cpu_variants.log and the probes' .npz files."""
    logs_dir = pathlib.Path(logs_dir)
    text = log_blocks.read(logs_dir / f"{STEP}.log")
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    problems: list[str] = []
    shipped = [v for v in log_blocks.step_config(logs_dir, STEP).get("variants", "").split(",") if v]
    commands = log_blocks.commands(text)
    stray = log_blocks.stray_exit_lines(text)
    if stray:
        problems.append(f"{len(commands) + stray} exit lines for {len(commands)} commands: a command's "
                        "output holds an exit line, so the log cannot say how that command ended")
    runs = _probe_runs(commands, problems)
    if not shipped or sorted(runs) != sorted(shipped):
        problems.append(f"the probes ({', '.join(sorted(runs))}) are not the variants the lane ships "
                        f"({', '.join(shipped) or 'none logged'})")
    if BASELINE not in runs:
        return counts, metrics, problems + [f"no probe of the baseline variant {BASELINE}"], []
    outputs: dict[str, dict[str, np.ndarray]] = {}
    ended: dict[str, int] = {}
    for name in [BASELINE] + sorted(n for n in runs if n != BASELINE):
        if name not in EXPECTED_EXTRA:
            problems.append(f"variant {name}: not in the table of what the pinned tree's variants support")
            continue
        how, cases, statuses, data = _ran(name, runs[name], logs_dir, counts, problems)
        _bump(ended, how)
        if how != "ran":
            continue
        outputs[name] = data
        for case in cases:
            key = f"variant.{name}.{case.op}"
            status = statuses[case.case_id]
            expected = case.buffer == probe.DEFAULT_BUFFER or case.weight_type in EXPECTED_EXTRA[name].get(case.buffer, ())
            if status == "unsupported" and not expected:
                _bump(counts, f"{key}.unsupported")
                continue
            _bump(counts, f"{key}.evaluated")
            got = data.get(case.case_id)
            if got is not None and got.shape != expected_shape(case):
                got = None
            want, bound, against = _expected_output(name, case, data, outputs.get(BASELINE, {}), problems)
            error = nmse(got, want) if status == "computed" else float("inf")
            metrics[f"variant.{name}.{case.case_id}.nmse"] = error
            if error <= bound:
                _bump(counts, f"{key}.passed")
                continue
            _bump(counts, f"{key}.failed")
            why = (f"{status}" + (" although the pinned tree supports it there" if status == "unsupported" else "")
                   if status != "computed" else "no output of the expected shape" if got is None
                   else f"NMSE {error:.3g} vs {against} > {bound:g}")
            problems.append(f"variant {name} {case.case_id}: {why}")
    counts["variants_shipped"] = len(runs)
    counts["variants_runnable"] = ended.get("ran", 0)
    counts["variants_crashed"] = ended.get("crashed", 0)
    loaded = log_blocks.step_config(logs_dir, "preflight").get("cpu_variant")
    if not loaded:
        problems.append("preflight logged no cpu_variant: which variant the host loads is unknown")
    elif loaded not in outputs:
        problems.append(f"the loaded variant {loaded} (preflight) was not evaluated")
    return counts, metrics, problems, _table(outputs, counts)


def _table(outputs: dict[str, dict[str, np.ndarray]], counts: dict[str, int]) -> list[str]:
    table = []
    for name in outputs:
        for op in sorted({k.split(".")[2] for k in counts if k.startswith(f"variant.{name}.") and k.endswith(".evaluated")}):
            key = f"variant.{name}.{op}"
            table.append(f"{name:15s} {op:15s} evaluated {counts.get(key + '.evaluated', 0):3d}  passed "
                         f"{counts.get(key + '.passed', 0):3d}  failed {counts.get(key + '.failed', 0):3d}  "
                         f"unsupported {counts.get(key + '.unsupported', 0):3d}")
    return table


def _not_applicable(logs_dir: pathlib.Path) -> bool:
    return log_blocks.step_config(pathlib.Path(logs_dir), STEP).get("cpu_variants") == "not_applicable"


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    if _not_applicable(logs_dir):
        return {}, {}
    counts, metrics, _, _ = evaluate(logs_dir)
    return counts, metrics


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    return [] if _not_applicable(logs_dir) else evaluate(logs_dir)[2]


def run_cpu_variants(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    if ctx.lane.is_accelerator or not ctx.lane.cpu_variants:
        step.result.required = False
        step.config("cpu_variants", "not_applicable")
        return CR.SKIPPED, "not required: the lane ships no runtime-selected CPU variants"
    names = variant_names(ctx.config.lane_dir / "bin")
    missing = sorted(set(ctx.lane.cpu_variants) - set(names))
    if missing or BASELINE not in names:
        return CR.FAIL, f"the lane lacks CPU variants its spec lists: {missing or [BASELINE]}"
    step.config("variants", f"{','.join(names)}")
    for stale in ctx.logs_dir.glob(f"{STEP}.*.npz"):  # a reused --out_dir: only this run's outputs count
        stale.unlink()
    codes = {}
    for name in names:
        codes[name] = step.run(probe_command(ctx, name), ctx.config.timeout_s).exit_code
        out = ctx.logs_dir / f"{STEP}.{name}.npz"
        if out.is_file():
            step.extra_logs.append(out)
    try:
        counts, metrics, found, table = evaluate(ctx.logs_dir)
    except ValueError as err:
        return CR.FAIL, str(err)
    logged = {log_blocks.flag_value(c.argv, "--variant"): c.exit_code
              for c in log_blocks.commands(log_blocks.read(step.log_path))}
    found += [f"variant {n}: exited {exits.describe(c)}, the log says {logged.get(n)}" for n, c in codes.items()
              if logged.get(n) != c]
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    step.log("# per variant and op (vs float64 for x64, vs x64 for the others):\n"
             + "\n".join("# " + line for line in table))
    if found:
        return CR.FAIL, "; ".join(found[:8]) + (f" (and {len(found) - 8} more)" if len(found) > 8 else "")
    evaluated = sum(v for k, v in counts.items() if k.endswith(".evaluated"))
    runnable = [n for n in names if f"variant.{n}.score" in counts]
    return CR.PASS, (f"{counts['variants_runnable']} of {counts['variants_shipped']} variants run on this host "
                     f"({', '.join(runnable)}); {evaluated} cases evaluated: x64 within NMSE {MAX_NMSE_REFERENCE:g} "
                     f"of float64 from gguf-py's dequantization, the others within {MAX_NMSE_VARIANT:g} of x64")


CHECK = Check(name="cpu_variants", run=run_cpu_variants, recompute=recompute, problems=problems,
              figures=("variants_shipped", "variants_runnable", "variants_crashed"))
