"""Builds and renders the matrix of a workspace: bazel-bin evidence + evidence/ records + policy."""

from __future__ import annotations

import pathlib
from typing import Any

from tools.core import atomic_files
from tools.matrix import capability_matrix, certification_status


def render(workspace: pathlib.Path, spec: dict[str, Any], availability: dict[str, Any], *, policy: pathlib.Path,
           records: pathlib.Path, as_json: bool = False, html_out: pathlib.Path | None = None,
           revocations: pathlib.Path | None = None) -> str:
    certifier = certification_status.policy_certifier(policy, records, revocations)
    rows = capability_matrix.matrix(spec, availability, workspace / "bazel-bin", certifier)
    pairs = certification_status.compatibility_pairs(policy, records, revocations)
    if html_out is not None:
        # evidence/matrix.html: atomic, a reader never sees half a page.
        atomic_files.write_text_atomic(html_out, capability_matrix.render_html(rows, availability["host"], pairs))
    if as_json:
        return capability_matrix.render_json(rows, availability["host"], pairs)
    return capability_matrix.render_text(rows, pairs)
