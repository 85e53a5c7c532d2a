"""One red-team case: a lying lane, log, report or flag that must never come out recordable.

Each cases_<area>.py module exports CASES, a list of RedTeamCase. A case builds its lie under a
temporary directory, runs what a certifier runs (the runner, a check, the audit or certify) and
returns which check refused it and the reason printed; it raises AssertionError when the lie was
accepted (a recordable run, a PASS, a signed record).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Refusal:
    check: str  # the check (or tool) that refused: preflight, speed, audit, certify, ...
    reason: str  # what it printed


@dataclasses.dataclass(frozen=True)
class RedTeamCase:
    klass: int  # the class of issue 23 (1-13)
    name: str
    run: Callable[[pathlib.Path], Refusal]


def refused_check(report, check_name: str, reason_fragment: str) -> Refusal:
    """The runner report's check `check_name` is not PASS and names reason_fragment; the run is not
    recordable. Raises AssertionError otherwise."""
    from proto import runner_report_pb2 as rpb

    found = [c for c in report.checks if c.name == check_name]
    assert found, f"no {check_name} result in the report"
    result = found[0]
    assert result.status != rpb.CheckResult.PASS, f"{check_name} passed: {result.message}"
    assert reason_fragment in result.message, f"{check_name}: {result.message!r} lacks {reason_fragment!r}"
    assert not report.pass_recordable, "the run is recordable"
    return Refusal(check_name, result.message)
