"""Reads ctest's raw console log: one result per test, and the totals re-derived from it.

The raw log is the authority: a report's counts are what `recompute` derives from the log and
the manifest's exclusions, so an auditor can check them (and the gate test does). Format of
CTest 3.x, e.g. ` 2/50 Test  #2: test-chat ........***Failed    0.01 sec`, the failed test's
output following its result line (`--output-on-failure`), then `N% tests passed, F tests
failed out of T` and `Total Test time (real) = S sec`.
"""

from __future__ import annotations

import dataclasses
import re

from tools.core.errors import LanesError

# A result line; the name is followed by a space and a run of dots (none when it is long).
_RESULT = re.compile(
    r"^\s*\d+/\s*\d+\s+Test\s+#\s*\d+:\s+(?P<name>\S+) \.*\s*(?P<status>\S.*?)\s+(?P<seconds>\d+(?:\.\d+)?) sec\s*$"
)
_START = re.compile(r"^\s*Start\s+\d+:\s+\S+\s*$")
# CTest 3 always names the failed count; CTest 4 leaves it out when nothing failed
# ("100% tests passed out of 47").
_SUMMARY = re.compile(r"^\d+% tests passed(?:, (?P<failed>\d+) tests? failed)? out of (?P<total>\d+)\s*$")
_WALL = re.compile(r"^Total Test time \(real\) =\s*(?P<seconds>\d+(?:\.\d+)?) sec\s*$")
_NO_TESTS = "No tests were found!!!"

PASSED, FAILED, SKIPPED, NOT_RUN = "PASSED", "FAILED", "SKIPPED", "NOT_RUN"

# Enough of a failed test's output to see why, without a megabyte of tokenizer dumps.
OUTPUT_TAIL_BYTES = 8192


class CTestLogError(LanesError):
    """The log is not a complete ctest run (no result lines, no summary, or they disagree)."""

    code = "ctest-log"


@dataclasses.dataclass
class Result:
    name: str
    status: str  # PASSED | FAILED | SKIPPED | NOT_RUN
    status_text: str  # ctest's own words: "Passed", "***Timeout", "***Exception: SegFault", ...
    seconds: float
    output: str = ""


@dataclasses.dataclass
class Totals:
    total: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    excluded: int = 0
    not_run: int = 0
    test_seconds: float = 0.0
    wall_seconds: float = 0.0


@dataclasses.dataclass
class ParsedLog:
    results: dict[str, Result]
    summary_failed: int
    summary_total: int
    wall_seconds: float


def classify(status_text: str) -> str:
    """ctest's status words -> ours. Anything unknown is a failure, never a pass."""
    if status_text == "Passed":
        return PASSED
    if status_text == "***Skipped":
        return SKIPPED
    if status_text.startswith("***Not Run"):
        return NOT_RUN
    return FAILED


def parse(text: str, source: str = "ctest log") -> ParsedLog:
    """Parses a complete ctest log; raises CTestLogError naming `source` when it is not one."""
    results: dict[str, Result] = {}
    summary = wall = None
    collecting: Result | None = None
    output: list[str] = []

    def flush() -> None:
        if collecting is not None and output:
            collecting.output = "\n".join(output).strip("\n")[-OUTPUT_TAIL_BYTES:]

    for line in text.splitlines():
        m = _RESULT.match(line)
        if m:
            flush()
            name = m["name"]
            if name in results:
                raise CTestLogError(f"{source}: test {name} has two result lines; run ctest once per log")
            result = Result(name, classify(m["status"]), m["status"], float(m["seconds"]))
            results[name] = result
            collecting, output = (result if result.status != PASSED else None), []
            continue
        if _START.match(line):
            flush()
            collecting, output = None, []
            continue
        m = _SUMMARY.match(line)
        if m:
            flush()
            collecting, output = None, []
            summary = (int(m["failed"] or 0), int(m["total"]))
            continue
        m = _WALL.match(line)
        if m:
            wall = float(m["seconds"])
            continue
        if collecting is not None:
            output.append(line)
    flush()
    if _NO_TESTS in text:
        raise CTestLogError(f"{source}: ctest found no tests (wrong bundle or exclusions?)")
    if summary is None or wall is None:
        raise CTestLogError(
            f"{source}: no '% tests passed' summary or 'Total Test time' line: ctest did not finish "
            "(killed or timed out?); rerun it and keep the whole log"
        )
    failed, total = summary
    if total != len(results):
        raise CTestLogError(f"{source}: the summary says {total} tests, the log has {len(results)} result lines")
    # ctest counts Not Run tests as failed and Skipped ones as passed in its summary line.
    ours = sum(1 for r in results.values() if r.status in (FAILED, NOT_RUN))
    if failed != ours:
        raise CTestLogError(f"{source}: the summary says {failed} failed, the result lines say {ours}")
    return ParsedLog(results, failed, total, wall)


def recompute(text: str, registered: list[str], excluded: dict[str, str], source: str = "ctest log") -> Totals:
    """Totals from the raw log alone plus the manifest: what a report's totals must equal.

    `registered` is every test the bundle's manifest registers, `excluded` the spec's exclusions.
    A registered, non-excluded test absent from the log is NOT_RUN; a test in the log that is
    excluded or not registered is an error (the log is not of this bundle and spec).
    """
    log = parse(text, source)
    unknown = sorted(set(log.results) - set(registered))
    if unknown:
        raise CTestLogError(f"{source}: tests not in the manifest: {', '.join(unknown)}")
    ran_excluded = sorted(set(log.results) & set(excluded))
    if ran_excluded:
        raise CTestLogError(f"{source}: excluded tests ran: {', '.join(ran_excluded)}")
    totals = Totals(total=len(registered), wall_seconds=log.wall_seconds)
    for name in registered:
        if name in excluded:
            totals.excluded += 1
            continue
        result = log.results.get(name)
        status = result.status if result else NOT_RUN
        if result:
            totals.test_seconds += result.seconds
        if status == PASSED:
            totals.passed += 1
        elif status == SKIPPED:
            totals.skipped += 1
        elif status == NOT_RUN:
            totals.not_run += 1
        else:
            totals.failed += 1
    totals.test_seconds = round(totals.test_seconds, 3)
    return totals
