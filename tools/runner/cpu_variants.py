"""cpu_variants: every CPU variant of the lane that this host can run computes what the x64 baseline
variant computes, on the ops whose kernels differ between variants.

The CPU lane ships ggml's x86 variants (libggml-cpu-<variant>.so, GGML_BACKEND_DL) and ggml loads
the best one the host supports, so the kernels a node runs depend on the host: a variant's AVX-512,
VNNI or AMX kernels are reached nowhere else, and the model checks (F32 weights) never reach the
quantized ones. tools/runner/cpu_variant_probe.py runs each variant in a process of its own
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
from tools.runner import cpu_variant_probe as probe
from tools.runner import exits, log_blocks
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "cpu_variants"
BASELINE = "x64"
PROBE = pathlib.Path(__file__).resolve().parent / "cpu_variant_probe.py"
# Normalized mean squared error bound, test-backend-ops' bound for MUL_MAT. Measured on zen4:
# x64 vs float64 2e-8 (F16) to 6.5e-5 (Q6_K; the activations are quantized to Q8 too), other
# variants vs x64 below 1e-13. A kernel reading a wrong layout or unconfigured tiles is near 1.
MAX_NMSE = 5e-4
_VARIANT_FILE = re.compile(r"^libggml-cpu-([A-Za-z0-9_]+)\.so$")
_SUMMARY = re.compile(r"^variant (\S+) score (\d+) buffer_types (\S+)$", re.MULTILINE)
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
    return argv + (["--reference"] if variant == BASELINE else [])


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    """sum((got - want)^2) / sum(want^2); inf when not finite or shapes differ."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return float("inf")
    denominator = float(np.sum(want * want))
    return float(np.sum((got - want) ** 2) / denominator) if denominator > 0 else float("inf")


def _load_npz(path: pathlib.Path) -> dict[str, np.ndarray] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise ValueError(f"{path.name}: not a probe output ({err})") from err


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str], list[str]]:
    """(counts, metrics, problems, table lines) from cpu_variants.log and the probes' .npz files."""
    logs_dir = pathlib.Path(logs_dir)
    text = log_blocks.read(logs_dir / f"{STEP}.log")
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    problems: list[str] = []
    table: list[str] = []
    max_nmse = float(log_blocks.config_values(text).get("max_nmse", MAX_NMSE))
    runs: dict[str, log_blocks.Command] = {}
    for cmd in log_blocks.commands(text):
        name = log_blocks.flag_value(cmd.argv, "--variant")
        if name is None or not cmd.argv or pathlib.Path(cmd.argv[min(1, len(cmd.argv) - 1)]).name != PROBE.name:
            continue
        if name in runs:
            problems.append(f"variant {name} probed twice: a run is judged on one probe per variant")
        runs[name] = cmd
    if BASELINE not in runs:
        return counts, metrics, problems + [f"no probe of the baseline variant {BASELINE}"], table
    outputs: dict[str, dict[str, np.ndarray]] = {}
    extra_buffers: dict[str, list[str]] = {}
    runnable = crashed = 0
    for name, cmd in runs.items():
        if cmd.exit_code == probe.NOT_RUNNABLE:
            counts[f"variant.{name}.not_runnable"] = 1
            continue
        if cmd.exit_code != 0:
            crashed += 1
            started = [m.group(1) for m in _CASE.finditer(cmd.output) if m.group(2) == "start"]
            where = f" in case {started[-1]}" if started else ""
            problems.append(f"variant {name}: the lane crashed{where}: probe exited "
                            f"{exits.describe(cmd.exit_code) if cmd.exit_code is not None else '(no exit status logged)'}")
            continue
        summary = _SUMMARY.search(cmd.output)
        data = _load_npz(logs_dir / f"{STEP}.{name}.npz")
        if summary is None or summary.group(1) != name or data is None:
            problems.append(f"variant {name}: exit 0 without its summary line or its {STEP}.{name}.npz")
            continue
        runnable += 1
        counts[f"variant.{name}.score"] = int(summary.group(2))
        extra_buffers[name] = [b for b in summary.group(3).split(",") if b != probe.DEFAULT_BUFFER]
        outputs[name] = data
        statuses = {m.group(1): m.group(2) for m in _CASE.finditer(cmd.output) if m.group(2) != "start"}
        for case in probe.cases_for(extra_buffers[name]):
            status = statuses.get(case.case_id)
            key = f"variant.{name}.{case.op}"
            if status == "unsupported":
                counts[f"{key}.unsupported"] = counts.get(f"{key}.unsupported", 0) + 1
                continue
            counts[f"{key}.evaluated"] = counts.get(f"{key}.evaluated", 0) + 1
            if name == BASELINE:
                want = data.get(f"reference.{case.case_id}")
                against = "float64"
            else:
                want = outputs[BASELINE].get(probe.Case(case.op, case.weight_type, case.batch,
                                                        probe.DEFAULT_BUFFER).case_id) if BASELINE in outputs else None
                against = BASELINE
            got = data.get(case.case_id)
            error = nmse(got, want) if status == "computed" and got is not None and want is not None else float("inf")
            metrics[f"variant.{name}.{case.case_id}.nmse"] = error
            if error <= max_nmse:
                counts[f"{key}.passed"] = counts.get(f"{key}.passed", 0) + 1
            else:
                counts[f"{key}.failed"] = counts.get(f"{key}.failed", 0) + 1
                problems.append(f"variant {name} {case.case_id}: " + (
                    f"{status or 'no result'}" if error == float("inf") else f"NMSE {error:.3g} vs {against} > {max_nmse:g}"))
    counts["variants_shipped"] = len(runs)
    counts["variants_runnable"] = runnable
    counts["variants_crashed"] = crashed
    loaded = log_blocks.config_values(log_blocks.read(logs_dir / "preflight.log")).get("cpu_variant")
    if loaded and loaded not in outputs:
        problems.append(f"the loaded variant {loaded} (preflight) was not evaluated")
    for name in outputs:
        ops = sorted({k.split(".")[2] for k in counts if k.startswith(f"variant.{name}.") and k.endswith(".evaluated")})
        for op in ops:
            key = f"variant.{name}.{op}"
            table.append(f"{name:15s} {op:15s} evaluated {counts.get(key + '.evaluated', 0):3d}  passed "
                         f"{counts.get(key + '.passed', 0):3d}  failed {counts.get(key + '.failed', 0):3d}  "
                         f"unsupported {counts.get(key + '.unsupported', 0):3d}")
    return counts, metrics, problems, table


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    if "# lanes-config cpu_variants=not_applicable" in log_blocks.read(pathlib.Path(logs_dir) / f"{STEP}.log"):
        return {}, {}
    counts, metrics, _, _ = evaluate(logs_dir)
    return counts, metrics


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    if "# lanes-config cpu_variants=not_applicable" in log_blocks.read(pathlib.Path(logs_dir) / f"{STEP}.log"):
        return []
    return evaluate(logs_dir)[2]


def run_cpu_variants(ctx: RunContext, step: Step) -> tuple[int, str]:
    if ctx.lane.is_accelerator or not ctx.lane.cpu_variants:
        step.result.required = False
        step.log("# lanes-config cpu_variants=not_applicable")
        return CR.SKIPPED, "not required: the lane ships no runtime-selected CPU variants"
    names = variant_names(ctx.config.lane_dir / "bin")
    missing = sorted(set(ctx.lane.cpu_variants) - set(names))
    if missing or BASELINE not in names:
        return CR.FAIL, f"the lane lacks CPU variants its spec lists: {missing or [BASELINE]}"
    step.log(f"# lanes-config variants={','.join(names)}")
    step.log(f"# lanes-config max_nmse={MAX_NMSE!r}")
    for stale in ctx.logs_dir.glob(f"{STEP}.*.npz"):  # a reused --out_dir: only this run's outputs count
        stale.unlink()
    for name in names:
        step.run(probe_command(ctx, name), ctx.config.timeout_s)
        out = ctx.logs_dir / f"{STEP}.{name}.npz"
        if out.is_file():
            step.extra_logs.append(out)
    try:
        counts, metrics, found, table = evaluate(ctx.logs_dir)
    except ValueError as err:
        return CR.FAIL, str(err)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    step.log("# per variant and op (vs float64 for x64, vs x64 for the others):\n"
             + "\n".join("# " + line for line in table))
    if found:
        return CR.FAIL, "; ".join(found[:8]) + (f" (and {len(found) - 8} more)" if len(found) > 8 else "")
    evaluated = sum(v for k, v in counts.items() if k.endswith(".evaluated"))
    runnable = [n for n in names if f"variant.{n}.score" in counts]
    return CR.PASS, (f"{counts['variants_runnable']} of {counts['variants_shipped']} variants run on this host "
                     f"({', '.join(runnable)}); {evaluated} cases evaluated, all within NMSE {MAX_NMSE:g} "
                     f"(x64 vs float64, the others vs x64)")
