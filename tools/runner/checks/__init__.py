"""The runner's checks, in the order they run: the one list.

config.CHECKS, the runner's dispatch, the CLI flags of check options, the summary table's figures
and the audit's recompute/problems are all read from REGISTRY. Adding a check = its module under
this package + one line here.
"""

from __future__ import annotations

from tools.runner.checks import (
    artifact_integrity,
    cancellation,
    cleanup,
    concurrency,
    corpus_parity,
    cpu_variants,
    fixture_parity,
    graph_smoke,
    op_oracle,
    preflight,
    reference_parity,
    speed,
    upstream_ctest,
)
from tools.runner.checks.base import Check, by_name

REGISTRY: list[Check] = [
    preflight.CHECK,
    artifact_integrity.CHECK,
    fixture_parity.CHECK,
    op_oracle.CHECK,
    # Every CPU variant the host can run vs the x64 baseline, on the ops with variant kernels.
    cpu_variants.CHECK,
    # llama.cpp's own CTest suite over the lane's build (lanes whose spec asks for it).
    upstream_ctest.CHECK,
    reference_parity.CHECK,
    # The model over a committed corpus: next-token distributions vs the reference, perplexity vs its ceiling.
    corpus_parity.CHECK,
    graph_smoke.CHECK,
    concurrency.CHECK,
    cancellation.CHECK,
    speed.CHECK,
    # Last: aggregates the per-step cleanup checks the runner makes after every step (speed included).
    cleanup.CHECK,
]


def names() -> tuple[str, ...]:
    return tuple(c.name for c in REGISTRY)


def get(name: str) -> Check | None:
    return by_name(REGISTRY).get(name)
