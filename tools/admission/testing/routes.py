"""Test fixtures (testonly): routes over sample reports' nodes, for deciding with admission."""

from __future__ import annotations

from tools.admission import admission
from tools.certify import sample_reports


def route_for(report, route_id: str = "r1"):
    recipe = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"], context_size=2048,
                                        parallel_sequences=1)
    return admission.route_from_nodes([sample_reports.node_for(report)], sample_reports.MODEL_SHA256, route_id, recipe)
