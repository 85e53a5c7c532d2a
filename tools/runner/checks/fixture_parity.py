"""Fixture parity: ggml's op-level test harness (test-backend-ops) on the lane's backend.

Accelerator lanes: `test-backend-ops test -b <Backend0>` compares every op against the CPU backend.
The CPU lane cannot use test mode (it would compare CPU with itself; upstream skips it), so it runs
`grad` mode: backpropagated gradients vs finite differences, an independent oracle. Measured at
0c1e570 on a 2-core x86_64 host, grad mode over all ops is not usable as a gate:
  * it aborts (GGML_ASSERT in ggml_build_backward_expand) on REGLU, RMS_NORM, ROPE, SOFT_MAX and
    in-place SCALE;
  * MUL_MAT takes ~300 s and 74 result lines exceed the 1e-4 MAA threshold (F16 finite differences),
    CPY has MAA failures of the same kind;
so the CPU lane runs the ops below in grad mode, and every op the lane spec requires that grad mode
does not evaluate must be covered by another check the spec names (`op_coverage`, e.g. op_oracle).

Grad mode's inputs are drawn from std::random_device (init_tensor_uniform; no seed option at the
pin) and its metric, mean |(gn - ga) / (gn + ga)|, is ill-conditioned where the analytic gradient is
near zero, so a correct CPU backend fails one test now and then (measured: docs/runner.md, fixture_parity).
A run whose only failures are at most MAX_CONFIRMED_FAILURES MAA exceedances therefore re-evaluates
each failing op CONFIRM_RUNS times with fresh inputs (`-o OP`, same log): the step passes only if none
of them fails; the failure stays counted (tests_failed) and the report names it and its figure. A
failure that reproduces, a nonfinite gradient, a crash or more failures fail as before.

The model's own ops (accelerator lanes): the step first lists the certified model's graph with the
lane's llama-eval-callback on the device (flash attention on and off), and every compute op in it
joins the required ops: test-backend-ops must evaluate and pass it on the device, or the step fails.
A llama-shaped spec list alone would let a Gemma graph's GEGLU or SCALE go untested.

Counting of its output: tools/runner/checks/fixture_parity_log.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shlex

from proto import runner_report_pb2 as rpb
from tools.runner import exits, log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.checks.fixture_parity_log import OpCounts, OpsSummary, mode_of, parse_test_backend_ops
from tools.runner.checks.op_oracle_graph import VIEW_OPS
from tools.runner.checks.op_oracle_log import EVAL_BIN, OracleLogError, flash_attn_of, parse_runs
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "fixture_parity"

CPU_GRAD_OPS = ("ADD", "SUB", "MUL", "DIV", "SQR", "SQRT", "LOG", "GET_ROWS", "SET_ROWS", "CONT", "SILU",
                "SWIGLU", "NORM", "ACC", "ADD1")

# test-backend-ops' own thresholds at the pin (tests/test-backend-ops.cpp). test mode compares NMSE
# with test_case::max_nmse_err(): default 1e-7; test_mul_mat and test_flash_attn_ext 5e-4;
# test_soft_max 1e-6. Parameter-dependent overrides are wider or stricter per test and are not
# reduced to one number here: CPY to the same type 0, CPY/SET_ROWS to a quantized type an
# estimate of one quantization step, fused ADD (nf>1) 1e-6 (F16) / 1e-4 (BF16), MUL_MAT with
# MXFP4/NVFP4 on Blackwell 2e-2.
DEFAULT_NMSE_THRESHOLD = 1e-7
NMSE_THRESHOLDS = {"MUL_MAT": 5e-4, "FLASH_ATTN_EXT": 5e-4, "SOFT_MAX": 1e-6}
# grad mode compares mean absolute asymmetry with max_maa_err(): default 1e-4; test_bin_bcast
# 1e-4 for ADD and 1e-3 for SUB/MUL/DIV; test_rope, test_sin, test_cos 1e-3.
DEFAULT_MAA_THRESHOLD = 1e-4
MAA_THRESHOLDS = {"SUB": 1e-3, "MUL": 1e-3, "DIV": 1e-3, "ROPE": 1e-3, "SIN": 1e-3, "COS": 1e-3}

# grad mode's `N/M tests passed`: M is every grad-mode test case of the binary (test_cases.size()
# once whole-graph cases are dropped; the -o filter acts inside eval_grad, so filtered-out cases
# print nothing and still count, as passed). M is therefore a constant of the pinned source, not of
# what was printed: measured at the pin with `test-backend-ops grad -b CPU -o <CPU_GRAD_OPS>` on the
# zen4 and sapphirerapids hosts (both 20766/20766). The summary is bound to it and to the lines:
# M - N = the failed tests printed (so N also covers every printed test that did not fail).
GRAD_TEST_CASES = {"0c1e57098bba43ac29e6e3b677cdceebdd22334f": 20766}

# Grad mode: a run whose failures are all MAA-only (GradFailure) and at most this many has each
# failing op re-evaluated CONFIRM_RUNS times with fresh random inputs; any failure there fails the step.
MAX_CONFIRMED_FAILURES = 1
CONFIRM_RUNS = 5
# The largest MAA, as a multiple of its threshold, a failure may have and still be re-evaluated. One
# element with an asymmetry of 1 among the 105 of SQR's smallest case gives ~95x; measured flakes gave
# 1.8x and 16.7x. A gradient of the wrong sign or scale gives an asymmetry near or above 1 on every
# element (MAA >= ~0.3): never re-evaluated.
MAX_EXCUSABLE_MAA_RATIO = 100.0
# Runs from this runner version: the harness blocks are exactly the runner's commands.
HARNESS_BLOCKS_SINCE = (0, 7, 1)

# Runs from this runner version list the model's graph before test-backend-ops (accelerators).
MODEL_GRAPH_SINCE = (0, 6, 0)
HARNESS_BIN = "test-backend-ops"
# A fixed prompt: the graph's ops do not depend on it; a short one keeps the printed graph small.
GRAPH_PROMPT = "The quick brown fox jumps over the lazy dog."
GRAPH_N_CTX = 256

# ---- configuration written into the log, so recompute() needs nothing else ----------------------


@dataclasses.dataclass
class FixtureConfig:
    mode: str = "test"
    backend: str = ""
    required_ops: tuple[str, ...] = ()
    op_coverage: dict[str, str] = dataclasses.field(default_factory=dict)
    thresholds: dict[str, float] = dataclasses.field(default_factory=dict)  # op -> nmse (test) / maa (grad)
    exit_code: int | None = None
    timed_out: bool = False
    # grad mode: the pinned binary's test-case count (GRAD_TEST_CASES), "" when the pin has none.
    grad_test_cases: str | None = None
    # Required ops the lane spec says the llama graph never runs (ops_absent_from_graph): a check
    # that covers them evaluates nothing, so they are reported as absent, never as covered.
    absent_ops: tuple[str, ...] = ()
    # Accelerators: the compute ops of the certified model's graph as the lane ran it (required too).
    graph_ops: tuple[str, ...] | None = None
    # grad mode: re-evaluations per failing op the runner would make (None: a run before the protocol),
    # and the ops it re-evaluated, in order.
    confirm_runs: int | None = None
    confirm_ops: tuple[str, ...] = ()

    @property
    def harness_runs(self) -> int:
        """test-backend-ops commands in the log: the run, then confirm_runs per re-evaluated op."""
        return 1 + max(0, self.confirm_runs or 0) * len(self.confirm_ops)


def threshold(mode: str, op: str) -> float:
    if mode == "grad":
        return MAA_THRESHOLDS.get(op, DEFAULT_MAA_THRESHOLD)
    return NMSE_THRESHOLDS.get(op, DEFAULT_NMSE_THRESHOLD)


def config_values(cfg: FixtureConfig) -> dict[str, str]:
    """The step's configuration (its <step>.config.json)."""
    out = {"mode": cfg.mode, "backend": cfg.backend, "required_ops": ",".join(cfg.required_ops)}
    out.update({f"op_coverage.{op}": check for op, check in sorted(cfg.op_coverage.items())})
    kind = "maa_threshold" if cfg.mode == "grad" else "nmse_threshold"
    out.update({f"op.{op}.{kind}": repr(thr) for op, thr in sorted(cfg.thresholds.items())})
    if cfg.grad_test_cases is not None:
        out["grad_test_cases"] = cfg.grad_test_cases
    if cfg.absent_ops:
        out["absent_ops"] = ",".join(cfg.absent_ops)
    if cfg.graph_ops is not None:
        out["graph_ops"] = ",".join(cfg.graph_ops)
    if cfg.confirm_runs is not None:
        out["grad_confirm_runs"] = str(cfg.confirm_runs)
    if cfg.confirm_ops:
        out["grad_confirm_ops"] = ",".join(cfg.confirm_ops)
    return out


def config_lines(cfg: FixtureConfig) -> list[str]:
    """The same configuration in the in-log form of older runs (tests build such logs)."""
    return log_blocks.legacy_config_lines(config_values(cfg))


def read_config(text: str, config: dict[str, str] | None = None) -> FixtureConfig:
    """The step's configuration (default: the config lines the runner wrote in the log, as older
    runs have them) and its command's exit status from the log."""
    config = log_blocks.legacy_config(text) if config is None else config
    cfg = FixtureConfig(mode=config.get("mode") or mode_of(text))
    cfg.exit_code, cfg.timed_out = _exit_of(text)
    for key, value in config.items():
        value = value.strip()
        if key == "backend":
            cfg.backend = value
        elif key == "grad_test_cases":
            cfg.grad_test_cases = value
        elif key == "required_ops":
            cfg.required_ops = tuple(v for v in value.split(",") if v)
        elif key == "absent_ops":
            cfg.absent_ops = tuple(v for v in value.split(",") if v)
        elif key == "graph_ops":
            cfg.graph_ops = tuple(v for v in value.split(",") if v)
        elif key == "grad_confirm_runs":
            cfg.confirm_runs = int(value) if value.isascii() and value.isdigit() else -1  # -1: refused below
        elif key == "grad_confirm_ops":
            cfg.confirm_ops = tuple(v for v in value.split(",") if v)
        elif key.startswith("op_coverage."):
            cfg.op_coverage[key.split(".", 1)[1]] = value
        elif key.startswith("op.") and key.endswith("_threshold"):
            cfg.thresholds[key.split(".")[1]] = float(value)
    return cfg


# ---- verdict ------------------------------------------------------------------------------------


def _check_names() -> tuple[str, ...]:
    from tools.runner import checks  # the registry imports this module
    return checks.names()


def coverage(s: OpsSummary, cfg: FixtureConfig) -> tuple[dict[str, str], list[str]]:
    """(op -> check that covers it instead, required ops covered by nothing). An op the spec says
    the graph never runs is in neither: its check confirms the absence, it evaluates nothing
    (absent_required())."""
    elsewhere, uncovered = {}, []
    for op in cfg.required_ops:
        if s.ops.get(op, OpCounts()).evaluated > 0 or op in absent_required(s, cfg):
            continue
        check = cfg.op_coverage.get(op, "")
        if check and check != STEP and check in _check_names():
            elsewhere[op] = check
        else:
            uncovered.append(op)
    return elsewhere, uncovered


def absent_required(s: OpsSummary, cfg: FixtureConfig) -> dict[str, str]:
    """Required ops not evaluated here that the lane spec lists as absent from the llama graph,
    -> the check that verifies the absence (op_oracle: 0 nodes in every run). Nothing evaluates them."""
    out = {}
    for op in cfg.required_ops:
        check = cfg.op_coverage.get(op, "")
        if (op in cfg.absent_ops and s.ops.get(op, OpCounts()).evaluated == 0 and check and check != STEP
                and check in _check_names()):
            out[op] = check
    return out


def _grad_totals(grad_test_cases: str | None) -> set[int]:
    """The test-case counts a grad-mode summary may state: the pinned binary's (logged by the
    runner); runs made before it was logged: those of the pins GRAD_TEST_CASES knows."""
    if grad_test_cases is None:
        return set(GRAD_TEST_CASES.values())
    return {int(grad_test_cases)} if grad_test_cases.isdigit() else set()


def summary_problems(s: OpsSummary, backend: str, grad_test_cases: str | None = None, excused: int = 0) -> list[str]:
    """The harness's own summary lines must exist and agree with the per-test count (grad mode: and
    with the pinned binary's test-case count). excused: failed tests a Confirmation did not reproduce
    (the backend line then says FAIL, as it must)."""
    problems = []
    failed = s.total("failed")
    if s.summary_total is None:
        problems.append("no 'N/M tests passed' summary line (the run did not finish)")
    elif s.mode == "grad":
        if s.summary_total - s.summary_passed != failed:
            problems.append(f"summary {s.summary_passed}/{s.summary_total} says {s.summary_total - s.summary_passed} "
                            f"failed, the per-test count says {failed}")
        totals = _grad_totals(grad_test_cases)
        if not totals:
            problems.append("no grad-mode test-case count for the pinned commit (fixture_parity.GRAD_TEST_CASES): "
                            "the summary cannot be bound")
        elif s.summary_total not in totals:
            problems.append(f"summary {s.summary_passed}/{s.summary_total} counts {s.summary_total} test cases; "
                            f"the pinned test-backend-ops has {' or '.join(map(str, sorted(totals)))}")
        seen = s.tests_run + s.total("not_supported") + s.total("skipped")
        if seen > s.summary_total:
            problems.append(f"{seen} tests printed but the summary counts {s.summary_total} test cases")

    elif (s.summary_passed, s.summary_total) != (s.total("passed"), s.tests_run):
        problems.append(f"summary {s.summary_passed}/{s.summary_total} disagrees with the per-test count "
                        f"{s.total('passed')}/{s.tests_run}")
    status = s.backend_status.get(backend)
    if status is None:
        problems.append(f"no 'Backend {backend}: OK|FAIL' line")
    else:
        expect = "OK" if failed == 0 and s.fa_vec_failed == 0 and not problems else "FAIL"
        excusable = status == expect == "FAIL" and 0 < failed == excused and not s.fa_vec_failed and not problems
        if status != "OK" and not excusable:
            problems.append(f"Backend {backend}: {status}")
        elif status == "OK" and expect != "OK":
            problems.append(f"Backend {backend}: OK although the per-test count has failures")
    return problems


def judge(s: OpsSummary, cfg: FixtureConfig, confirm: Confirmation | None = None) -> tuple[int, str]:
    if cfg.timed_out:
        return CR.FAIL, "test-backend-ops timed out"
    failed = s.total("failed")
    excused = len(confirm.failures) if confirm is not None and confirm.excused else 0
    if cfg.exit_code not in (None, 0) and failed == 0:
        return CR.FAIL, f"test-backend-ops exited {exits.describe(cfg.exit_code)} after {s.tests_run} evaluated tests"
    if s.tests_run == 0:
        return CR.FAIL, "zero tests evaluated (headers and 'not supported' lines are not tests)"
    if failed and not excused:
        why = f"; they stand: {'; '.join(confirm.problems)}" if confirm is not None and confirm.problems else ""
        return CR.FAIL, f"{failed} test(s) failed, e.g. {s.failed_tests[0][:160]}{why}"
    if confirm is not None and confirm.problems:
        return CR.FAIL, "; ".join(confirm.problems)
    if s.fa_vec_failed:
        return CR.FAIL, f"{s.fa_vec_failed} fa_vec slice test(s) failed"
    if not cfg.required_ops:
        return CR.FAIL, "the lane spec names no required ops (fixture_ops / op_coverage): nothing to certify"
    problems = summary_problems(s, cfg.backend, cfg.grad_test_cases, excused)
    if problems:
        return CR.FAIL, "; ".join(problems)
    elsewhere, uncovered = coverage(s, cfg)
    if uncovered:
        return CR.FAIL, (f"required op(s) with zero evaluated tests and no covering check: {', '.join(uncovered)}")
    evaluated = [op for op in cfg.required_ops if op not in elsewhere]
    by_check: dict[str, list[str]] = {}
    for op, check in elsewhere.items():
        by_check.setdefault(check, []).append(op)
    covered = "".join(f"; {', '.join(ops)} covered by {check}" for check, ops in sorted(by_check.items()))
    absent = absent_required(s, cfg)
    covered += "".join(f"; {op} evaluated by no check: the lane spec says the llama graph never runs it "
                       f"({check} verifies 0 nodes)" for op, check in sorted(absent.items()))
    evaluated = [op for op in evaluated if op not in absent]
    passed = "evaluated" if excused else "evaluated and passed"
    note = f"; {confirmation_note(confirm)}" if excused else ""
    return CR.PASS, (f"{s.tests_run} {s.mode}-mode tests {passed}{note}; required ops evaluated here: "
                     f"{', '.join(f'{op} {s.ops[op].evaluated}' for op in evaluated) or 'none'}{covered}")


def figures(s: OpsSummary, cfg: FixtureConfig, confirm: Confirmation | None = None) -> tuple[dict[str, int], dict[str, float]]:
    counts: dict[str, int] = {
        "tests_evaluated": s.tests_run,
        "tests_passed": s.total("passed"),
        "tests_failed": s.total("failed"),
        "tests_not_supported": s.total("not_supported"),
        "tests_skipped": s.total("skipped"),
    }
    if s.mode == "grad":
        counts["tests_incomplete"] = s.incomplete
    if confirm is not None and cfg.confirm_runs is not None:
        counts["tests_failed_maa_only"] = len(confirm.failures)
        counts["tests_failed_not_reproduced"] = len(confirm.failures) if confirm.excused else 0
        counts["reevaluation_runs"] = confirm.runs
        counts["reevaluation_tests_evaluated"] = confirm.evaluated
        counts["reevaluation_tests_failed"] = confirm.failed
    if s.summary_total is not None:
        counts["summary_passed"], counts["summary_total"] = s.summary_passed, s.summary_total
    elsewhere, uncovered = coverage(s, cfg)
    counts["ops_required"] = len(cfg.required_ops)
    counts["ops_required_evaluated"] = sum(1 for op in cfg.required_ops if s.ops.get(op, OpCounts()).evaluated > 0)
    counts["ops_covered_elsewhere"] = len(elsewhere)
    counts["ops_uncovered"] = len(uncovered)
    absent = absent_required(s, cfg)
    if cfg.absent_ops:
        counts["ops_absent_from_graph"] = len(absent)
    if cfg.graph_ops is not None:
        counts["model_graph_ops"] = len(cfg.graph_ops)
        counts["model_graph_ops_evaluated"] = sum(1 for op in cfg.graph_ops if s.ops.get(op, OpCounts()).evaluated > 0)
        for op in cfg.graph_ops:
            counts[f"op.{op}.in_model_graph"] = 1
    for op in sorted(set(s.ops) | set(cfg.required_ops)):
        c = s.ops.get(op, OpCounts())
        for field in ("evaluated", "passed", "failed", "not_supported", "skipped"):
            counts[f"op.{op}.{field}"] = getattr(c, field)
        if op in elsewhere:
            counts[f"op.{op}.covered_elsewhere"] = 1
        if op in absent:
            counts[f"op.{op}.absent_from_graph"] = 1
    metrics: dict[str, float] = {}
    kind = "maa_threshold" if s.mode == "grad" else "nmse_threshold"
    for op, thr in cfg.thresholds.items():
        metrics[f"op.{op}.{kind}"] = thr
    if s.max_err is not None:
        metrics["max_nmse_printed"] = s.max_err
    if s.max_maa is not None:
        metrics["max_maa_printed"] = s.max_maa
    return counts, metrics


def _harness_starts(text: str) -> list[int]:
    """Offsets of the `$ .../test-backend-ops` command lines."""
    starts, at = [], 0
    for line in text.splitlines(keepends=True):
        if line.startswith("$ "):
            argv0 = line[2:].split(" ", 1)[0].strip().strip("'\"")
            if pathlib.PurePosixPath(argv0).name == HARNESS_BIN:
                starts.append(at)
        at += len(line)
    return starts


def split_runs(text: str, harness_runs: int = 1) -> tuple[str, list[str]]:
    """(the model-graph listing, the harness's blocks): the last `harness_runs` `$ .../test-backend-ops`
    command lines each start a block (the run, then its re-evaluations). The listing before them is the
    lane's and the model's output, so a line it prints (even one that looks like the harness's command)
    never reaches the counts; harness_problems() refuses one the harness printed."""
    starts = _harness_starts(text)
    if not starts:
        return text, [text]  # no harness command line: older logs hold the harness's output alone
    cuts = starts[-harness_runs:] if harness_runs > 0 else starts[-1:]
    return text[:cuts[0]], [text[a:b] for a, b in zip(cuts, cuts[1:] + [len(text)])]


def split_log(text: str, harness_runs: int = 1) -> tuple[str, str]:
    """(the model-graph listing, the harness's first run)."""
    listing, blocks = split_runs(text, harness_runs)
    return listing, blocks[0]


def harness_problems(text: str, cfg: FixtureConfig) -> list[str]:
    """The runner wrote cfg.harness_runs test-backend-ops command lines and nothing else after the
    listing: another `$ ` line there, or one before them in grad mode (which lists no graph), was
    printed by the lane."""
    starts = _harness_starts(text)
    if not starts:
        return []
    if len(starts) < cfg.harness_runs:
        return [f"the log holds {len(starts)} test-backend-ops run(s); the runner made {cfg.harness_runs}"]
    listing, blocks = split_runs(text, cfg.harness_runs)
    printed = sum(1 for block in blocks for line in block.splitlines()[1:] if line.startswith("$ "))
    if cfg.mode == "grad":
        printed += sum(1 for line in listing.splitlines() if line.startswith("$ "))
    if printed:
        return [f"{printed} command line(s) among test-backend-ops' output that the runner did not write "
                f"(it wrote {cfg.harness_runs})"]
    return []


def _exit_of(block: str) -> tuple[int | None, bool]:
    """(the block's exit status, timed out): its last `# exit` line (a line the tool printed earlier
    cannot stand for it)."""
    code, timed_out = None, False
    for line in block.splitlines():
        m = log_blocks.EXIT_LINE.match(line)
        if m:
            code, timed_out = int(m.group(1)), "(timed out" in line
    return code, timed_out


def _argv(block: str) -> list[str]:
    first = block.splitlines()[0] if block else ""
    try:
        return shlex.split(first[2:]) if first.startswith("$ ") else []
    except ValueError:
        return []


@dataclasses.dataclass
class Confirmation:
    """The re-evaluations of a grad-mode run's failing ops (fixture_parity's docstring)."""
    failures: list  # the run's GradFailures (MAA-only)
    runs: int = 0  # re-evaluation runs read
    evaluated: int = 0  # tests they evaluated
    failed: int = 0  # tests that failed in them
    problems: list[str] = dataclasses.field(default_factory=list)  # why the failures stand

    @property
    def excused(self) -> bool:
        return bool(self.failures) and not self.problems


def failing_ops(s: OpsSummary) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f.op for f in s.grad_failures))


def why_not_reevaluated(s: OpsSummary, cfg: FixtureConfig) -> str:
    """Why a grad run that failed tests may not have them re-evaluated ("" if it may): what the runner
    asks before re-running and the audit asks of the log alike."""
    failed = s.total("failed")
    if cfg.confirm_runs is None:
        return "the run predates re-evaluation of grad-mode failures"
    if cfg.confirm_runs != CONFIRM_RUNS:
        return f"grad_confirm_runs={cfg.confirm_runs}: the protocol re-evaluates {CONFIRM_RUNS} times"
    if len(s.grad_failures) != failed or s.incomplete:
        return ("a failure other than an MAA exceedance (nonfinite gradient, compare or compute error, "
                "no result) is never re-evaluated")
    if cfg.exit_code != 1 or cfg.timed_out:
        ended = ("(timed out)" if cfg.timed_out else exits.describe(cfg.exit_code) if cfg.exit_code is not None
                 else "without an exit line")
        return f"the run exited {ended}; a grad run that failed tests and finished exits 1"
    if failed > MAX_CONFIRMED_FAILURES:
        return f"{failed} failed tests: more than {MAX_CONFIRMED_FAILURES} is never put down to the input draw"
    for f in s.grad_failures:
        configured = cfg.thresholds.get(f.op)
        if configured is None or any(not math.isclose(thr, configured, rel_tol=1e-6) for thr in f.thresholds):
            return (f"{f.test}: printed MAA threshold(s) {', '.join(map(repr, f.thresholds))}, the runner's for "
                    f"{f.op} is {configured!r}")
        if max(f.maa) > MAX_EXCUSABLE_MAA_RATIO * configured:
            return (f"{f.test}: MAA {max(f.maa):.9f} is over {MAX_EXCUSABLE_MAA_RATIO:g}x its threshold "
                    f"{configured:g}: a wrong gradient, never put down to the input draw")
    return ""


def confirmation(s: OpsSummary, reruns: list[str], cfg: FixtureConfig) -> Confirmation | None:
    """None when there is nothing to confirm (no failure, or test mode). Otherwise the failures stand
    (problems) unless every one is an MAA exceedance, at most MAX_CONFIRMED_FAILURES, and each
    failing op passed all its re-evaluations with fresh inputs, each the same tests as in the run."""
    failed = s.total("failed")
    if s.mode != "grad" or (not failed and not cfg.confirm_ops):
        return None
    c = Confirmation(failures=list(s.grad_failures))
    if not failed:
        c.problems.append(f"re-evaluations of {','.join(cfg.confirm_ops)} although the run failed no test")
        return c
    refusal = why_not_reevaluated(s, cfg)
    if refusal:
        c.problems.append(refusal)
        return c
    ops = failing_ops(s)
    if cfg.confirm_ops != ops:
        c.problems.append(f"the runner re-evaluated {','.join(cfg.confirm_ops) or 'nothing'}; the failing op(s): "
                          f"{','.join(ops)}")
        return c
    if len(reruns) != cfg.confirm_runs * len(ops):
        c.problems.append(f"{len(reruns)} re-evaluation run(s) in the log; the runner made {cfg.confirm_runs * len(ops)}")
        return c
    for i, block in enumerate(reruns):
        op = ops[i // cfg.confirm_runs]
        argv = _argv(block)
        where = f"re-evaluation {i % cfg.confirm_runs + 1}/{cfg.confirm_runs} of {op}"
        if argv[1:] != ["grad", "-b", cfg.backend, "-o", op]:
            c.problems.append(f"{where} ran {' '.join(argv[1:]) or 'nothing'}, not 'grad -b {cfg.backend} -o {op}'")
            continue
        code, timed_out = _exit_of(block)
        rs = parse_test_backend_ops(block, "grad")
        c.runs += 1
        c.evaluated += rs.tests_run
        c.failed += rs.total("failed")
        if timed_out or code != 0:
            c.problems.append(f"{where} exited {'(timed out)' if timed_out else exits.describe(code) if code is not None else 'without an exit line'}")
        if rs.total("failed"):
            c.problems.append(f"{where} failed {rs.total('failed')} test(s), e.g. {rs.failed_tests[0][:160]}: reproduced")
        wanted = s.ops.get(op, OpCounts()).evaluated
        if rs.ops.get(op, OpCounts()).evaluated != wanted or rs.tests_run != wanted:
            c.problems.append(f"{where} evaluated {rs.tests_run} test(s) ({op}: "
                              f"{rs.ops.get(op, OpCounts()).evaluated}); the run evaluated {wanted} of {op}")
        c.problems += [f"{where}: {p}" for p in summary_problems(rs, cfg.backend, cfg.grad_test_cases)]
    return c


def confirmation_note(c: Confirmation) -> str:
    shown = "; ".join(f"{f.test}: MAA {', '.join(f'{v:.9f}' for v in f.maa)} > {f.thresholds[0]:g}" for f in c.failures)
    ops = ",".join(dict.fromkeys(f.op for f in c.failures))
    return (f"{len(c.failures)} test failed by MAA only ({shown}) and did not reproduce: {ops} passed {c.runs} of "
            f"{c.runs} re-evaluations with fresh random inputs ({c.evaluated} tests); counted in tests_failed")


def listing_structure_problems(listing: str) -> list[str]:
    """The runner writes exactly two `$ llama-eval-callback` lines (-fa on, -fa off), each closed by one
    `# exit` line. Any other `$ ` or `# exit` line, split as parse_runs splits (str.splitlines: \\r, \\f,
    \\x85 and \\u2028 break lines too), was printed by the lane or the model: a model name or a
    tokenizer type llama.cpp echoes could otherwise end a failed run early with a forged exit 0."""
    lines = listing.splitlines()
    commands = [line for line in lines if line.startswith("$ ")]
    if not commands:
        return ["no model-graph listing (llama-eval-callback) before test-backend-ops"]
    exits_written = sum(1 for line in lines if log_blocks.EXIT_LINE.match(line))
    modes = []
    for line in commands:
        try:
            argv = shlex.split(line[2:])
        except ValueError:
            argv = []
        modes.append(flash_attn_of(argv) if argv and pathlib.PurePosixPath(argv[0]).name == EVAL_BIN else "?")
    if sorted(modes) != ["off", "on"] or exits_written != 2:
        return [f"the model-graph listing holds {len(commands)} command line(s) ({', '.join(modes) or 'none'}) and "
                f"{exits_written} exit line(s); the runner writes two llama-eval-callback runs (-fa on, off) and "
                "their two exit lines: the others were printed by the lane or the model"]
    return []


def listed_graph_ops(listing: str) -> tuple[dict[str, int], list[str]]:
    """(compute op -> nodes, problems) of the model-graph runs in the listing."""
    structure = listing_structure_problems(listing)
    if structure:
        return {}, structure
    try:
        runs = parse_runs(listing)
    except OracleLogError as err:
        return {}, [f"the model-graph listing cannot be read: {err}"]
    problems = []
    if not runs:
        problems.append("no model-graph listing (llama-eval-callback) before test-backend-ops")
    for run in runs:
        if run.exit_code != 0:
            problems.append(f"the model-graph listing (-fa {run.flash_attn}) exited "
                            f"{'without an exit line' if run.exit_code is None else exits.describe(run.exit_code)}")
        elif not run.nodes:
            problems.append(f"the model-graph listing (-fa {run.flash_attn}) printed no graph node")
    ops: dict[str, int] = {}
    for run in runs:
        for node in run.nodes:
            if node.op not in VIEW_OPS:
                ops[node.op] = ops.get(node.op, 0) + 1
    return dict(sorted(ops.items())), problems


def graph_problems(text: str, cfg: FixtureConfig) -> list[str]:
    """The configured graph ops must be what the listing in the log shows, and be required; a run from
    a runner that lists the graph must have listed it (accelerators)."""
    if cfg.graph_ops is None:
        if cfg.mode == "test" and not log_blocks.run_predates(MODEL_GRAPH_SINCE):
            return ["no model-graph ops configured: the model's own ops were not listed"]
        return []
    listing, _ = split_log(text, cfg.harness_runs)
    ops, problems = listed_graph_ops(listing)
    if tuple(ops) != tuple(cfg.graph_ops):
        problems.append(f"the configured graph ops ({','.join(cfg.graph_ops)}) are not the listing's "
                        f"({','.join(ops)})")
    missing = [op for op in cfg.graph_ops if op not in cfg.required_ops]
    if missing:
        problems.append(f"model-graph op(s) not required: {', '.join(missing)}")
    # An op the device ran is never excused as "absent from the graph" (absent_required()).
    absent = [op for op in cfg.graph_ops if op in cfg.absent_ops]
    if absent:
        problems.append(f"model-graph op(s) the lane spec calls absent from the graph: {', '.join(absent)}")
    return problems


@dataclasses.dataclass
class FixtureLog:
    text: str
    cfg: FixtureConfig
    summary: OpsSummary  # the run
    confirm: Confirmation | None  # its failures' re-evaluations


def read_log(text: str, config: dict[str, str] | None = None) -> FixtureLog:
    cfg = read_config(text, config)
    _, blocks = split_runs(text, cfg.harness_runs)
    cfg.exit_code, cfg.timed_out = _exit_of(blocks[0])  # the run's own, not a re-evaluation's
    s = parse_test_backend_ops(blocks[0], cfg.mode)
    return FixtureLog(text, cfg, s, confirmation(s, blocks[1:], cfg))


def _read(logs_dir: pathlib.Path) -> FixtureLog:
    text = (pathlib.Path(logs_dir) / f"{STEP}.log").read_text(encoding="utf-8", errors="replace")
    return read_log(text, log_blocks.step_config(pathlib.Path(logs_dir), STEP))


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    log = _read(logs_dir)
    return figures(log.summary, log.cfg, log.confirm)


def per_op_table(s: OpsSummary, cfg: FixtureConfig) -> list[str]:
    elsewhere, _ = coverage(s, cfg)
    lines = ["# per-op (evaluated passed failed not_supported skipped):"]
    for op in sorted(set(s.ops) | set(cfg.required_ops)):
        c = s.ops.get(op, OpCounts())
        note = ""
        if op in cfg.required_ops:
            note = f"  covered by {elsewhere[op]}" if op in elsewhere else ("  required" if c.evaluated else "  required, NOT EVALUATED")
            if op in absent_required(s, cfg):
                note = f"  required, absent from the llama graph (no check evaluates it; {cfg.op_coverage[op]} verifies 0 nodes)"
        lines.append(f"#   {op:16s} {c.evaluated:5d} {c.passed:5d} {c.failed:5d} {c.not_supported:5d} {c.skipped:5d}{note}")
    return lines


# ---- the step -----------------------------------------------------------------------------------


def required_ops(ctx: RunContext) -> tuple[str, ...]:
    """The ops the lane spec requires: fixture_ops, plus any op it says another check covers."""
    ops = list(ctx.lane.fixture_ops)
    ops += [op for op in ctx.lane.op_coverage if op not in ops]
    return tuple(ops)


def spec_absent_ops(ctx: RunContext) -> list[str]:
    """The lane spec's ops_absent_from_graph (the Lane record does not carry it)."""
    try:
        lane = json.loads(pathlib.Path(ctx.config.spec).read_text())["lanes"][ctx.lane.lane_id]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [str(op) for op in lane.get("ops_absent_from_graph", [])]


def fixture_jobs(cfg) -> int:
    if cfg.fixture_jobs < 0:
        raise ValueError(f"--fixture_jobs={cfg.fixture_jobs}: give 0 (automatic) or a positive count")
    return cfg.fixture_jobs or max(1, min(8, (os.cpu_count() or 1) // 2))


def fixture_command(ctx: RunContext, graph_ops: tuple[str, ...] = ()) -> list[str]:
    argv = [str(ctx.bin(HARNESS_BIN))]
    if ctx.lane.is_accelerator:
        # Upstream's -j: each worker evaluates whole test cases with its own backend instances and
        # prints each result line under one lock, so the per-test lines stay intact.
        argv += ["test", "-b", ctx.backend0, "-j", str(fixture_jobs(ctx.config))]
        ops = ctx.config.fixture_ops or ",".join(dict.fromkeys(tuple(ctx.lane.fixture_ops) + graph_ops))
    else:
        argv += ["grad", "-b", "CPU"]
        ops = ctx.config.fixture_ops or ",".join(CPU_GRAD_OPS)
    if ops:
        argv += ["-o", ops]
    return argv


def graph_command(ctx: RunContext, flash_attn: str) -> list[str]:
    """The lane's llama-eval-callback over the certified model on the device: it prints every node."""
    return [str(ctx.bin("llama-eval-callback")), "-m", str(ctx.config.model), "-p", GRAPH_PROMPT, *ctx.ngl,
            "-fa", flash_attn, "-c", str(GRAPH_N_CTX), "--seed", "1"]


def list_model_graph(ctx: RunContext, step: Step) -> tuple[tuple[str, ...], list[str]]:
    for flash_attn in ("on", "off"):
        step.run(graph_command(ctx, flash_attn), ctx.config.timeout_s)
    ops, problems = listed_graph_ops(step.log_path.read_text(encoding="utf-8", errors="replace"))
    return tuple(ops), problems


def run_fixture_parity(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    if ctx.config.fixture_ops:
        ctx.non_recordable.append(f"--fixture_ops={ctx.config.fixture_ops} (bring-up op filter)")
    graph_ops: tuple[str, ...] | None = None
    if ctx.lane.is_accelerator and not ctx.config.fixture_ops:
        graph_ops, listing_problems = list_model_graph(ctx, step)
        if listing_problems:
            step.config("graph_ops", ",".join(graph_ops))
            return CR.FAIL, "; ".join(listing_problems)
    argv = fixture_command(ctx, graph_ops or ())
    mode = argv[1]
    requested = tuple(argv[argv.index("-o") + 1].split(",")) if "-o" in argv else ()
    required = tuple(dict.fromkeys(required_ops(ctx) + (graph_ops or ())))
    commit = ctx.evidence.upstream.commit if ctx.evidence is not None else ""
    cases = GRAD_TEST_CASES.get(commit)
    cfg = FixtureConfig(mode=mode, backend=ctx.backend0, required_ops=required,
                        op_coverage=dict(ctx.lane.op_coverage), absent_ops=tuple(spec_absent_ops(ctx)),
                        thresholds={op: threshold(mode, op) for op in dict.fromkeys(requested + required)},
                        grad_test_cases=(str(cases) if cases else "") if mode == "grad" else None,
                        graph_ops=graph_ops, confirm_runs=CONFIRM_RUNS if mode == "grad" else None)
    for key, value in config_values(cfg).items():
        step.config(key, value)
    res = step.run(argv, ctx.config.timeout_s)
    step.result.exit_code = res.exit_code
    if mode == "grad":
        reevaluate(ctx, step, argv[0])
    # The figures and the verdict come from the log file, exactly as an auditor re-derives them.
    log = _read(ctx.logs_dir)
    for line in per_op_table(log.summary, log.cfg):
        step.log(line)
    counts, metrics = recompute(ctx.logs_dir)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    return verdict(log)


def reevaluate(ctx: RunContext, step: Step, harness: str) -> None:
    """Grad mode: re-evaluates the failing op(s) of a run whose failures may be the input draw's."""
    log = _read(ctx.logs_dir)
    if not log.summary.total("failed") or why_not_reevaluated(log.summary, log.cfg):
        return
    ops = failing_ops(log.summary)
    step.config("grad_confirm_ops", ",".join(ops))
    for op in ops:
        for _ in range(CONFIRM_RUNS):
            step.run([harness, "grad", "-b", ctx.backend0, "-o", op], ctx.config.timeout_s)


def verdict(log: FixtureLog) -> tuple[int, str]:
    text, s, cfg = log.text, log.summary, log.cfg
    problems = [] if log_blocks.run_predates(HARNESS_BLOCKS_SINCE) else harness_problems(text, cfg)
    problems += graph_problems(text, cfg)
    if problems:
        return CR.FAIL, "; ".join(problems)
    status, message = judge(s, cfg, log.confirm)
    if status == CR.PASS and cfg.graph_ops:
        message += f"; the model's graph: {len(cfg.graph_ops)} compute ops, each evaluated here"
    return status, message


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    status, message = verdict(_read(logs_dir))
    return [] if status == CR.PASS else [message]


@dataclasses.dataclass(frozen=True)
class Options:
    fixture_ops: str = option("", "test-backend-ops -o filter (bring-up only, non-recordable).")
    # test-backend-ops -j (its own worker threads, each with its own backend instance; test mode
    # only). 0 = half the host's cores, at most 8: Vulkan's per-shape pipeline creation made the
    # serial run longer than one step timeout on the H200.
    fixture_jobs: int = option(0, "Accelerator lanes: test-backend-ops -j worker threads (0: half the cores, at most 8).")


CHECK = Check(name="fixture_parity", run=run_fixture_parity, recompute=recompute, problems=problems,
              figures=("ops_tested", "ops_passed", "ops_failed", "ops_not_supported"), options=Options)
