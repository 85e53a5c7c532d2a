"""Mixed-route lies: what tools/compat measures on a route over lanes that lie together."""

from __future__ import annotations

import pathlib

from tests.red_team.case import RedTeamCase, Refusal
from tools.compat.testing import fake_route


def _canned_completion_alone_and_in_the_route(tmp: pathlib.Path) -> Refusal:
    """Both GPU lanes' completion tool prints one canned text, alone and as the route's client: the
    route agrees with every lane, but differs from the CPU lane from the first byte, which is no
    late near-tie the lanes' records bound."""
    out, report = fake_route.measure(tmp, gpu_completion="canned answer")
    assert not report["compatible"], "the route came out compatible"
    assert (out / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    (reason,) = [p for p in report["problems"] if p.startswith("route vs cpu: greedy agreement")]
    return Refusal("compat", reason)


CASES = [
    RedTeamCase(4, "route and lanes print one canned completion", _canned_completion_alone_and_in_the_route),
]
