"""Fixture parity: ggml's op-level test harness (test-backend-ops) on the lane's backend.

Accelerator lanes: `test-backend-ops test -b <Backend0>` compares every op against the CPU backend.
The CPU lane cannot use test mode (it would compare CPU with itself; upstream skips it), so it runs
`grad` mode: backpropagated gradients vs finite differences, an independent oracle. Measured at
0c1e570 on a 2-core x86_64 host, grad mode over all ops is not usable as a gate:
  * it aborts (GGML_ASSERT in ggml_build_backward_expand) on REGLU, RMS_NORM, ROPE, SOFT_MAX and
    in-place SCALE;
  * MUL_MAT takes ~300 s and 74 result lines exceed the 1e-4 MAA threshold (F16 finite differences),
    CPY has MAA failures of the same kind;
so the CPU lane runs the ops below (all used by the llama graph or its building blocks; ~10 s).
MUL_MAT, RMS_NORM, ROPE, SOFT_MAX on CPU are covered at model level by reference_parity (the
NumPy reference recomputes the whole llama graph).
"""

from __future__ import annotations

import dataclasses
import re

from proto import runner_report_pb2 as rpb
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

CPU_GRAD_OPS = ("ADD", "SUB", "MUL", "DIV", "SQR", "SQRT", "LOG", "GET_ROWS", "SET_ROWS", "CONT", "SILU",
                "SWIGLU", "NORM", "ACC", "ADD1")

# test-backend-ops defaults (test_case::max_nmse_err, max_maa_err); printed only on failures.
DEFAULT_NMSE_THRESHOLD = 1e-7
DEFAULT_MAA_THRESHOLD = 1e-4

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# "  OP(params): [detail] OK|FAIL" / "not supported [...]" / "skipping large tensors for speed".
# A failure detail may also precede the test name on the same line ("[MUL_MAT] ERR = x > y   MUL_MAT(...)").
_RESULT = re.compile(r"(?:^|\s)(?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*)\): (?P<rest>.*?)\s*$")
_ERR = re.compile(r"\[(?P<op>[A-Z0-9_]+)\] (?P<kind>ERR|NMSE|MAA) = (?P<value>[-+0-9.eE]+|nan|inf) > (?P<thr>[-+0-9.eE]+)")
_SUMMARY = re.compile(r"^\s*(\d+)/(\d+) tests passed", re.MULTILINE)
_BACKEND = re.compile(r"^\s*Backend (\S+): (OK|FAIL)\s*$", re.MULTILINE)


@dataclasses.dataclass
class OpsSummary:
    tests_ok: int = 0
    tests_failed: int = 0
    tests_not_supported: int = 0
    tests_skipped: int = 0  # "skipping large tensors for speed"
    ops_status: dict[str, str] = dataclasses.field(default_factory=dict)  # op -> passed|failed|not_supported
    max_err: float | None = None  # largest ERR/NMSE printed (only failures print it)
    max_maa: float | None = None
    err_threshold: float | None = None
    summary_passed: int | None = None
    summary_total: int | None = None
    backend_status: dict[str, str] = dataclasses.field(default_factory=dict)
    failed_tests: list[str] = dataclasses.field(default_factory=list)

    @property
    def tests_run(self) -> int:
        return self.tests_ok + self.tests_failed

    def count(self, status: str) -> int:
        return sum(1 for s in self.ops_status.values() if s == status)


_RANK = {"not_supported": 0, "passed": 1, "failed": 2}


def parse_test_backend_ops(text: str) -> OpsSummary:
    s = OpsSummary()
    text = _ANSI.sub("", text)
    for line in text.splitlines():
        for m in _ERR.finditer(line):
            try:
                value, thr = float(m.group("value")), float(m.group("thr"))
            except ValueError:
                continue
            if m.group("kind") == "MAA":
                s.max_maa = value if s.max_maa is None else max(s.max_maa, value)
            else:
                s.max_err = value if s.max_err is None else max(s.max_err, value)
                s.err_threshold = thr
        m = _RESULT.search(line)
        if not m:
            continue
        op, rest = m.group("op"), m.group("rest")
        if rest.endswith("FAIL"):
            s.tests_failed += 1
            status = "failed"
            s.failed_tests.append(f"{op}({m.group('params')})")
        elif rest.endswith("OK"):
            s.tests_ok += 1
            status = "passed"
        elif rest.startswith("not supported"):
            s.tests_not_supported += 1
            status = "not_supported"
        elif rest.startswith("skipping"):
            s.tests_skipped += 1
            continue
        else:
            continue
        if _RANK[status] > _RANK.get(s.ops_status.get(op, ""), -1):
            s.ops_status[op] = status
    m = _SUMMARY.search(text)
    if m:
        s.summary_passed, s.summary_total = int(m.group(1)), int(m.group(2))
    s.backend_status = {b: st for b, st in _BACKEND.findall(text)}
    return s


def fixture_command(ctx: RunContext) -> list[str]:
    argv = [str(ctx.bin("test-backend-ops"))]
    if ctx.lane.is_accelerator:
        argv += ["test", "-b", ctx.backend0]
        ops = ctx.config.fixture_ops or ",".join(ctx.lane.fixture_ops)
    else:
        argv += ["grad", "-b", "CPU"]
        ops = ctx.config.fixture_ops or ",".join(CPU_GRAD_OPS)
    if ops:
        argv += ["-o", ops]
    return argv


def judge(s: OpsSummary, exit_code: int) -> tuple[int, str]:
    if exit_code != 0 and s.tests_failed == 0:
        return CR.FAIL, f"test-backend-ops exited {exit_code} (crash or abort?) after {s.tests_run} tests"
    if s.tests_run == 0:
        return CR.FAIL, "zero tests ran: the backend supports none of the selected ops"
    if s.tests_failed:
        return CR.FAIL, f"{s.tests_failed} test(s) failed, e.g. {s.failed_tests[0][:160]}"
    if any(st != "OK" for st in s.backend_status.values()):
        return CR.FAIL, f"backend status {s.backend_status}"
    return CR.PASS, (f"{s.tests_ok} tests passed over {s.count('passed')} ops "
                     f"({s.tests_not_supported} not supported)")


def run_fixture_parity(ctx: RunContext, step: Step) -> tuple[int, str]:
    if ctx.config.fixture_ops:
        ctx.non_recordable.append(f"--fixture_ops={ctx.config.fixture_ops} (bring-up op filter)")
    res = step.run(fixture_command(ctx), ctx.config.timeout_s)
    step.result.exit_code = res.exit_code
    s = parse_test_backend_ops(res.output)
    c, m = step.result.counts, step.result.metrics
    c["ops_tested"] = s.count("passed") + s.count("failed")
    c["ops_passed"] = s.count("passed")
    c["ops_failed"] = s.count("failed")
    c["ops_not_supported"] = s.count("not_supported")
    c["tests_passed"] = s.tests_ok
    c["tests_failed"] = s.tests_failed
    c["tests_not_supported"] = s.tests_not_supported
    c["tests_skipped_large"] = s.tests_skipped
    if s.max_err is not None:
        m["max_nmse"] = s.max_err
    if s.max_maa is not None:
        m["max_maa"] = s.max_maa
    # Passing tests print no error; record the thresholds they were held to.
    if ctx.lane.is_accelerator:
        m["nmse_threshold"] = s.err_threshold or DEFAULT_NMSE_THRESHOLD
    else:
        m["maa_threshold"] = DEFAULT_MAA_THRESHOLD
    if res.timed_out:
        return CR.FAIL, f"test-backend-ops timed out after {ctx.config.timeout_s:.0f}s"
    return judge(s, res.exit_code)
