"""Mixed-route lies: what tools/compat measures on a route over lanes that lie together."""

from __future__ import annotations

import pathlib

from tests.red_team.case import RedTeamCase, Refusal
from tools.compat.testing import fake_route


def _canned_completion_alone_and_in_the_route(tmp: pathlib.Path) -> Refusal:
    """Both GPU lanes' completion tool prints one canned text, alone and as the route's client: the
    route agrees with every lane, but the CPU lane (honest: its top-1 is never the canned text's next
    token), fed the canned text, ranks every token of it more than 4 nats below its own choice: no
    near-tie path."""
    canned = " canned answer" * 8  # 16 words: as many tokens as the route generates
    out, report = fake_route.measure(tmp, gpu_completion=canned, cpu_markers=("unlikely",))
    assert not report["compatible"], "the route came out compatible"
    assert (out / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    assert min(report["comparisons"]["cpu"]["greedy_path_gaps"]) > 4.0, report["comparisons"]["cpu"]
    (reason,) = [p for p in report["problems"] if p.startswith("route vs cpu: greedy agreement")]
    return Refusal("compat", reason)


CASES = [
    RedTeamCase(4, "route and lanes print one canned completion", _canned_completion_alone_and_in_the_route),
]
