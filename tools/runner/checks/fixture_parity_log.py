"""test-backend-ops' console output as per-op counts, in test mode and in grad mode.

Counting (read from test-backend-ops.cpp at the pin, not guessed):
  * test mode (test_case::eval -> print_test_console): one line per test, `OP(p): OK|FAIL` or
    `OP(p): not supported [backend]`; a failure's `[OP] ERR = x > thr` may precede it on the line.
    Summary `N/M tests passed` has M = OK + FAIL and N = OK.
  * grad mode (test_case::eval_grad -> print_operation): a test whose output is not F32 prints one
    `not supported [..]` line. Every other test first prints a HEADER `OP(p): OK` (a default
    status, nothing was evaluated yet), then exactly one of: `not supported [..]`,
    `skipping large tensors for speed`, or the evaluated result, preceded by zero or more
    `[X] MAA = .. > .. FAIL` / `[X] nonfinite gradient .. FAIL` lines. Non-scalar outputs are
    wrapped in SUM first, so the result lines name SUM (or the op) with the header's params; they
    belong to the header's op. A header with no result line (graph compute failure, crash) is
    counted as failed. Summary `N/M tests passed`: M = every test case (filtered-out ones
    included, they print nothing), N = those that did not fail, so M - N = failed.
"""

from __future__ import annotations

import dataclasses
import math
import re

from tools.runner import log_blocks

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RESULT = re.compile(r"(?:^|\s)(?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*)\): (?P<rest>.*?)\s*$")
_ERR = re.compile(r"\[(?P<op>[A-Z0-9_]+)\] (?P<kind>ERR|NMSE|MAA) = (?P<value>[-+0-9.eE]+|nan|inf|-nan|-inf) > (?P<thr>[-+0-9.eE]+)")
_SUMMARY = re.compile(r"^\s*(\d+)/(\d+) tests passed\s*$")
_BACKEND = re.compile(r"^\s*Backend (\S+): (OK|FAIL)\s*$")
_FA_VEC_FAIL = re.compile(r"^\s*FAIL fa_vec slice:")
_COMMAND = re.compile(r"^\$ \S*test-backend-ops (?P<mode>test|grad)\b")
# ggml-cuda's own log line with CUDA graphs on (GGML_CUDA_GRAPHS): printed from the compute call, so it
# lands between a test's `OP(params): ` and its result, splitting one result over two lines. Only this
# exact fixed text is removed; what remains is the harness's own output.
_CUDA_GRAPH_LOG = re.compile(r"ggml_backend_cuda_graph_compute: CUDA graph warmup (?:reset|complete)\n")


@dataclasses.dataclass
class OpCounts:
    evaluated: int = 0  # passed + failed: a result that an oracle actually decided
    passed: int = 0
    failed: int = 0
    not_supported: int = 0
    skipped: int = 0  # "skipping large tensors for speed": neither passed nor failed


@dataclasses.dataclass(frozen=True)
class GradFailure:
    """A grad-mode test that failed only by mean absolute asymmetry: every detail line is an
    `[X] MAA = v > thr` exceedance and its result line is `compare failed FAIL` (no nonfinite
    gradient, no allocation or compute error). Only such a failure depends on the input draw."""
    op: str
    test: str
    maa: tuple[float, ...]
    thresholds: tuple[float, ...]


@dataclasses.dataclass
class OpsSummary:
    mode: str = "test"
    ops: dict[str, OpCounts] = dataclasses.field(default_factory=dict)
    failed_tests: list[str] = dataclasses.field(default_factory=list)
    incomplete: int = 0  # grad mode: headers never followed by a result (counted as failed)
    fa_vec_failed: int = 0
    max_err: float | None = None  # largest ERR/NMSE printed (only failures print one)
    max_maa: float | None = None
    summary_passed: int | None = None
    summary_total: int | None = None
    backend_status: dict[str, str] = dataclasses.field(default_factory=dict)
    grad_failures: list[GradFailure] = dataclasses.field(default_factory=list)  # MAA-only failures

    def op(self, name: str) -> OpCounts:
        return self.ops.setdefault(name, OpCounts())

    def count(self, op: str, kind: str, test: str = "") -> None:
        """One test of `op`, `kind` passed, failed, not_supported or skipped; a failed one is listed as `test`."""
        c = self.op(op)
        setattr(c, kind, getattr(c, kind) + 1)
        if kind in ("passed", "failed"):
            c.evaluated += 1
        if kind == "failed":
            self.failed_tests.append(test)

    def total(self, field: str) -> int:
        return sum(getattr(c, field) for c in self.ops.values())

    @property
    def tests_run(self) -> int:
        return self.total("evaluated")


def _strip(text: str) -> list[str]:
    """Lines of test-backend-ops output; the runner's own `# ...`/`$ ...` lines are not its output."""
    text = _CUDA_GRAPH_LOG.sub("", _ANSI.sub("", text))
    return [ln for ln in text.splitlines() if not ln.startswith(("# ", "$ "))]


def _note_errors(s: OpsSummary, line: str) -> None:
    for m in _ERR.finditer(line):
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if m.group("kind") == "MAA":
            s.max_maa = value if s.max_maa is None else max(s.max_maa, value)
        else:
            s.max_err = value if s.max_err is None else max(s.max_err, value)


def _classify(rest: str) -> str:
    if rest.startswith("not supported"):
        return "not_supported"
    if rest.startswith("skipping"):
        return "skipped"
    if rest.endswith("FAIL"):
        return "failed"
    if rest.endswith("OK"):
        return "passed"
    return "other"


def _summary_lines(s: OpsSummary, line: str) -> bool:
    m = _SUMMARY.match(line)
    if m:
        s.summary_passed, s.summary_total = int(m.group(1)), int(m.group(2))
        return True
    m = _BACKEND.match(line)
    if m:
        s.backend_status[m.group(1)] = m.group(2)
        return True
    if _FA_VEC_FAIL.match(line):
        s.fa_vec_failed += 1
        return True
    return False


def _parse_test_mode(s: OpsSummary, lines: list[str]) -> None:
    for line in lines:
        if _summary_lines(s, line):
            continue
        _note_errors(s, line)
        m = _RESULT.search(line)
        if not m:
            continue
        op, kind = m.group("op"), _classify(m.group("rest"))
        s.op(op)  # an op with a result line is listed even when the line counts as nothing
        if kind != "other":
            s.count(op, kind, f"{op}({m.group('params')})")


def _detail(rest: str) -> tuple[str, float, float]:
    """A grad-mode detail line: ("maa", value, threshold) when it is exactly one MAA exceedance."""
    found = list(_ERR.finditer(rest))
    if len(found) == 1 and found[0].group("kind") == "MAA" and "nonfinite" not in rest:
        try:
            value, thr = float(found[0].group("value")), float(found[0].group("thr"))
        except ValueError:
            return "other", 0.0, 0.0
        if math.isfinite(value) and math.isfinite(thr):
            return "maa", value, thr
    return "other", 0.0, 0.0


def _parse_grad_mode(s: OpsSummary, lines: list[str]) -> None:
    open_op: str | None = None  # the header's op while its result is pending
    open_params = ""
    open_details: list[tuple[str, float, float]] = []  # ("maa" | "other", value, threshold)

    def close_incomplete() -> None:
        nonlocal open_op
        if open_op is not None:
            s.count(open_op, "failed", f"{open_op}({open_params}) (header without a result)")
            s.incomplete += 1
            open_op = None

    for line in lines:
        if _summary_lines(s, line):
            close_incomplete()
            continue
        _note_errors(s, line)
        m = _RESULT.search(line)
        if not m:
            continue
        op, params, kind = m.group("op"), m.group("params"), _classify(m.group("rest"))
        # Lines of the open test repeat its params and name its op or SUM (the wrapper); anything
        # else means the open test never printed a result.
        if open_op is not None and (params != open_params or op not in (open_op, "SUM")):
            close_incomplete()
        if open_op is None:
            if kind == "passed":  # a header: default OK, nothing evaluated yet
                open_op, open_params, open_details = op, params, []
            elif kind in ("not_supported", "failed"):
                # Not supported: the output is not F32, the single line of that test. Failed with no
                # header (an allocation error): fail closed.
                s.count(op, kind, f"{op}({params})")
            continue
        # A line of the open test (same params); result lines may name SUM for the header's op.
        s.op(open_op)
        rest = m.group("rest")
        if kind == "other" or (kind == "failed" and ("MAA = " in rest or "nonfinite gradient" in rest)):
            if kind == "failed":
                open_details.append(_detail(rest))
            continue  # not a result, or a detail line that the final result line follows
        s.count(open_op, kind, f"{open_op}({params})")
        if (kind == "failed" and rest.startswith("compare failed") and open_details
                and all(d[0] == "maa" for d in open_details)):
            s.grad_failures.append(GradFailure(open_op, f"{open_op}({params})", tuple(d[1] for d in open_details),
                                               tuple(d[2] for d in open_details)))
        open_op = None
    close_incomplete()


def parse_test_backend_ops(text: str, mode: str | None = None) -> OpsSummary:
    """Per-op counts of what test-backend-ops evaluated. mode: "test" or "grad"; None: from the
    log's `# lanes-config mode=` or `$ ... test-backend-ops <mode>` line (default test)."""
    if mode is None:
        mode = mode_of(text)
    s = OpsSummary(mode=mode)
    lines = _strip(text)
    if mode == "grad":
        _parse_grad_mode(s, lines)
    else:
        _parse_test_mode(s, lines)
    return s


def mode_of(text: str) -> str:
    mode = log_blocks.legacy_config(text).get("mode")
    if mode:
        return mode.strip()
    for line in text.splitlines():
        m = _COMMAND.match(line)
        if m:
            return m.group("mode")
    return "test"
