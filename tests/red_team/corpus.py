"""Every red-team case, in class order."""

from __future__ import annotations

import importlib

from tests.red_team.case import RedTeamCase

# One module per area; each exports CASES.
MODULES = ("cases_audit", "cases_bench", "cases_lead", "cases_proc", "cases_route", "cases_serve")


def all_cases() -> list[RedTeamCase]:
    cases: list[RedTeamCase] = []
    for name in MODULES:
        cases += importlib.import_module(f"tests.red_team.{name}").CASES
    return sorted(cases, key=lambda c: (c.klass, c.name))
