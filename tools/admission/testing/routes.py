"""Test fixtures (testonly): routes over sample reports' nodes, for deciding with admission."""

from __future__ import annotations

from tools.admission import admission
from tools.certify import sample_reports


def route_for(report, route_id: str = "r1"):
    recipe = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"], context_size=2048,
                                        parallel_sequences=1)
    return admission.route_from_nodes([sample_reports.node_for(report)], sample_reports.MODEL_SHA256, route_id, recipe)


def codes(decision) -> set[str]:
    """The refusal codes of a decision (each reason is "<code>: <why>")."""
    return {r.split(":", 1)[0] for r in decision.reasons}


def refused_with(decision, code: str, shown: int = 160) -> None:
    assert not decision.routable, decision
    assert code in codes(decision), decision.reasons
    print(f"REFUSED {code}: {decision.reasons[0][:shown]}")


def admitted(decision) -> None:
    assert decision.routable, decision.reasons
