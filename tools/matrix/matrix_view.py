"""Builds and renders the matrix of a workspace: bazel-bin evidence + evidence/ records + policy."""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any

from tools.core import atomic_files
from tools.matrix import capability_matrix, certification_status, dashboard


def render(workspace: pathlib.Path, spec: dict[str, Any], availability: dict[str, Any], *, policy: pathlib.Path,
           records: pathlib.Path, as_json: bool = False, html_out: pathlib.Path | None = None,
           revocations: pathlib.Path | None = None, as_of: dt.datetime | None = None,
           model_lock: pathlib.Path | None = None) -> str:
    """The matrix as text (or JSON); with html_out, also the operator dashboard written there.
    Every decision is admission's at as_of (default: the newest record's issue time), so the same
    evidence renders the same page."""
    ev = certification_status.load_evidence(policy, records, revocations, as_of)
    when = ev.when if ev else (as_of or certification_status.newest_issue_time([]))
    certifier = certification_status.policy_certifier(policy, records, revocations, when)
    rows = capability_matrix.matrix(spec, availability, workspace / "bazel-bin", certifier)
    pairs = certification_status.compatibility_pairs(policy, records, revocations, when)
    if html_out is not None:
        entries = certification_status.certified_entries(ev, records, certification_status.locked_model_names(model_lock))
        page = dashboard.render_page(rows, spec, availability["host"], entries, pairs, when,
                                     ev.instant if ev else "no records", html_out.parent)
        # evidence/matrix.html: atomic, a reader never sees half a page.
        atomic_files.write_text_atomic(html_out, page)
    if as_json:
        return capability_matrix.render_json(rows, availability["host"], pairs)
    return capability_matrix.render_text(rows, pairs)
