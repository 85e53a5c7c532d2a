"""The capability matrix: per lane, build status and certification status, kept separate.

Build status comes only from evidence whose artifacts re-hash to their recorded digests; a lane is
never shown BUILT on the strength of a file merely existing. Certification comes only from records
that verify (see tools/certify); without one a lane is "dark": building never makes it routable.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

from tools.evidence import build_evidence, lane_manifest

BUILT, UNAVAILABLE, FAILED, NOT_BUILT = "BUILT", "UNAVAILABLE", "FAILED", "NOT BUILT"
DARK = "dark"
CERTIFIED = "certified"  # the only certification value that names a record for exactly this build


@dataclasses.dataclass
class LaneRow:
    lane_id: str
    alias: str
    backend: str
    build_status: str
    build_detail: str = ""
    certification: str = DARK
    certified_device_classes: list[str] = dataclasses.field(default_factory=list)
    routable_under_policy: bool = False
    certification_detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Certifier: given a lane id and its evidence digest (or ""), returns
# (certification status, device classes, routable under policy, detail).
Certifier = Callable[[str, str], tuple[str, list[str], bool, str]]


def no_certification(lane_id: str, evidence_digest: str) -> tuple[str, list[str], bool, str]:
    del lane_id, evidence_digest
    return DARK, [], False, "no certification record"


def build_status(alias: str, availability: dict[str, Any], bazel_bin: pathlib.Path) -> tuple[str, str, str]:
    """(status, detail, evidence digest) for one lane, from its evidence and artifacts on disk."""
    if availability["status"] != "AVAILABLE":
        return UNAVAILABLE, availability["reason"], ""
    build = f"bazel build //lanes:{alias} {lane_manifest.label(alias)}"
    if not (bazel_bin / lane_manifest.runfiles_path(alias)).is_file():
        return NOT_BUILT, f"no lane manifest at bazel-bin/{lane_manifest.runfiles_path(alias)}; run {build}", ""
    try:
        lane = lane_manifest.load_built(alias, bazel_bin)
    except lane_manifest.LaneManifestError as err:
        return FAILED, str(err), ""
    evidence_pb = lane.evidence
    if not evidence_pb.exists():
        # bazel-bin-relative: the matrix is committed, so no host's paths.
        shown = pathlib.PurePosixPath("bazel-bin", os.path.relpath(evidence_pb, os.path.abspath(bazel_bin)))
        return NOT_BUILT, f"no evidence at {shown}; run {build}", ""
    try:
        ev = build_evidence.read_evidence(evidence_pb)
    except build_evidence.EvidenceError as err:
        return FAILED, str(err), ""
    if ev.status != ev.BUILT:
        return FAILED, ev.reason or "evidence status is not BUILT", ""
    problems = build_evidence.verify_artifacts(ev, lane.lane_dir)
    if problems:
        return FAILED, "artifacts do not match the evidence: " + "; ".join(problems[:3]), ""
    commit = ev.upstream.commit[:7]
    return BUILT, f"{len(ev.artifacts)} artifacts verified; llama.cpp {commit}, patches {ev.patch_stack_digest[:19]}", build_evidence.evidence_digest(evidence_pb)


def matrix(spec: dict[str, Any], availability: dict[str, Any], bazel_bin: pathlib.Path,
           certifier: Certifier = no_certification) -> list[LaneRow]:
    rows = []
    for lane_id, lane in spec["lanes"].items():
        avail = availability["lanes"][lane_id]
        status, detail, digest = build_status(lane["alias"], avail, bazel_bin)
        cert, classes, routable, cert_detail = certifier(lane_id, digest)
        rows.append(LaneRow(
            lane_id=lane_id,
            alias=lane["alias"] and f"//lanes:{lane['alias']}",
            backend=lane["backend"],
            build_status=status,
            build_detail=detail,
            certification=cert,
            certified_device_classes=classes,
            routable_under_policy=routable,
            certification_detail=cert_detail,
        ))
    return rows


def _pair_lines(pairs: list[dict]) -> list[str]:
    lines = []
    for p in pairs:
        lanes = " + ".join(p["lanes"]) or p["source"]
        lines.append(f"{lanes}  model {p['model_sha256'][:12] or '-'}  "
                     f"admission: {p.get('state', 'admitted' if p['routable'] else 'refused')}  {'; '.join(p['device_classes'])}  {p['detail']}")
    return lines


def render_text(rows: list[LaneRow], pairs: list[dict] | None = None) -> str:
    header = ("lane", "target", "build", "certification", "routable", "detail")
    table = [header] + [
        (r.lane_id, r.alias or "-", r.build_status,
         r.certification + (f" ({', '.join(r.certified_device_classes)})" if r.certified_device_classes else ""),
         "yes" if r.routable_under_policy else "no",
         r.build_detail + (f"; {r.certification_detail}" if r.certification != DARK else ""))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = []
    for row in table:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    # Mixed-backend routes: admitted only with a compatibility record for exactly that pair.
    lines += ["", "mixed-backend routes (compatibility records):"] + (_pair_lines(pairs) or ["  none"]) if pairs is not None else []
    return "\n".join(lines)


def render_json(rows: list[LaneRow], host: dict[str, Any], pairs: list[dict] | None = None) -> str:
    return json.dumps({"host": host, "lanes": [r.to_json() for r in rows], "compatibility": pairs or []},
                      indent=2, sort_keys=True)


CSS = """
body{font:14px system-ui,sans-serif;margin:2rem;color:#1d2433}
h1{font-size:1.4rem}table{border-collapse:collapse;width:100%}
th,td{padding:.45rem .6rem;border-bottom:1px solid #e3e6ec;text-align:left;vertical-align:top}
th{background:#f5f6f8}.pill{border-radius:999px;padding:.1rem .55rem;font-weight:600;font-size:12px}
.BUILT{background:#d9f2e1;color:#0f5c2e}.FAILED{background:#fbdada;color:#8a1010}
.UNAVAILABLE{background:#eceef2;color:#4a5163}.NOT{background:#fff1c9;color:#6b5200}
.certified{background:#d6e6ff;color:#123f8a}.dark{background:#2b2f38;color:#e8eaef}
.detail{color:#5b6375;font-size:12px}td:first-child b{white-space:nowrap}
"""


def _pill(text: str, cls: str) -> str:
    return f'<span class="pill {cls}">{html.escape(text)}</span>'


def lanes_table_html(rows: list[LaneRow]) -> str:
    """The lanes as built on this host: build status, certification of that build, routability."""
    body = []
    for r in rows:
        build_cls = r.build_status.split()[0]
        # Only a record for exactly this build is "certified"; anything else reads as dark.
        cert_cls = "certified" if r.certification == CERTIFIED else "dark"
        classes = "<br>".join(html.escape(c) for c in r.certified_device_classes)
        body.append(
            f'<tr class=lane data-lane="{html.escape(r.lane_id)}">'
            f"<td><b>{html.escape(r.lane_id)}</b><div class=detail>{html.escape(r.alias or 'no target')}</div></td>"
            f"<td>{_pill(r.build_status, build_cls)}<div class=detail>{html.escape(r.build_detail)}</div></td>"
            f"<td>{_pill(r.certification, cert_cls)}<div class=detail>{classes}{'<br>' if classes else ''}{html.escape(r.certification_detail)}</div></td>"
            f"<td>{_pill('routable' if r.routable_under_policy else 'not routable', 'BUILT' if r.routable_under_policy else 'UNAVAILABLE')}</td>"
            "</tr>"
        )
    return ("<table><tr><th>lane</th><th>build</th><th>certification</th><th>routable under policy</th></tr>"
            + "".join(body) + "</table>")


def render_html(rows: list[LaneRow], host: dict[str, Any], pairs: list[dict] | None = None) -> str:
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>Lanes capability matrix</title>"
        f"<style>{CSS}</style></head><body><h1>Lanes capability matrix</h1>"
        f"<p class=detail>host {html.escape(host.get('os', ''))}-{html.escape(host.get('arch', ''))}. "
        "Build status is verified against build evidence; certification only from signed records that "
        "verify under the policy. Building never makes a lane routable.</p>"
        + lanes_table_html(rows) + _pairs_html(pairs or []) + "</body></html>\n"
    )


def _pairs_html(pairs: list[dict]) -> str:
    # The state is admission's decision ("admitted"/"refused") and its reasons, never the matrix's own.
    rows = "".join(
        "<tr>"
        f"<td><b>{html.escape(' + '.join(p['lanes']) or p['source'])}</b><div class=detail>model "
        f"{html.escape(p['model_sha256'][:12] or '-')}</div></td>"
        f"<td><div class=detail>{'<br>'.join(html.escape(d) for d in p['device_classes'])}</div></td>"
        f"<td>{_pill(p['state'], 'BUILT' if p['routable'] else 'FAILED')}"
        f"<div class=detail>{html.escape(p['detail'])}</div></td></tr>"
        for p in pairs)
    return ("<h2>Mixed-backend routes</h2><p class=detail>A route whose nodes run different lanes is admitted only "
            "with a signed compatibility record measured on that route, for exactly those lanes, device classes "
            "and model.</p><table><tr><th>lanes</th><th>device classes</th><th>admission</th></tr>"
            + (rows or "<tr><td colspan=3>none</td></tr>") + "</table>")
