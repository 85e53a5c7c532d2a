"""The operator dashboard (evidence/matrix.html): static HTML, no script, one page.

Three sections, each marked for tests and tools by an id and data-* attributes:
  #certified  per lane and device class, each verified record: the model by its locked name, the
              headline figures with their bounds, admission's decision, days to expiry, the record id
              and a link to the run's hand-off README. From the records alone: host-independent.
  #routes     each mixed route (compatibility record): its recipe and admission's decision and
              reasons, verbatim. Host-independent.
  #host       the lanes as built on the host that wrote the page, and for every dark or UNAVAILABLE
              lane the reason and the command that would change it. Host-dependent by design.
Every decision shown is admission's (tools/admission) at one stated instant; the page never derives
a verdict of its own.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import pathlib
from typing import Any

from tools.matrix import capability_matrix as cm
from tools.matrix import certification_status as cs
from tools.policy import timestamps

CERTIFY = "bazel run //tools:certify -- --lane={}"

_CSS = cm.CSS + """
section{margin:1.5rem 0}h2{font-size:1.15rem}code{font-size:12px}
ul.figures,ul.reasons{margin:0;padding-left:1rem}li.figure{font-size:12px}
.admitted{background:#d9f2e1;color:#0f5c2e}.refused{background:#fbdada;color:#8a1010}
.expiring{color:#8a1010;font-weight:600}code.record-id{word-break:break-all;display:block;max-width:16rem}
td.figs{min-width:22rem}td.command code{background:#f5f6f8;padding:.1rem .3rem}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pill(text: str, cls: str) -> str:
    return f'<span class="pill {_e(cls)}">{_e(text)}</span>'


@dataclasses.dataclass(frozen=True)
class LaneAction:
    """A lane this host cannot route, why, and the command that would change it."""

    lane_id: str
    status: str
    reason: str
    command: str


def next_command(row: cm.LaneRow, lane: dict[str, Any], host: dict[str, Any]) -> str:
    """The command an operator runs to move the lane towards routable, from this host's view."""
    alias = row.alias.removeprefix("//lanes:") if row.alias else ""
    if row.build_status == cm.UNAVAILABLE:
        platform = f"{lane.get('os', '')}-{lane.get('arch', '')}"
        if platform != f"{host.get('os', '')}-{host.get('arch', '')}":
            return (f"on a {platform} host: {CERTIFY.format(alias)}" if alias
                    else f"none on any host yet: {row.lane_id} is registered without a target (lanes/private/lanes.bzl)")
        # The SDK detector runs in a repository rule: after installing, Bazel must re-run it.
        return f"install the lane's SDK, then: bazel sync --only=lane_sdks && {CERTIFY.format(alias)}"
    return CERTIFY.format(alias or row.lane_id)


def lane_actions(rows: list[cm.LaneRow], spec: dict[str, Any], host: dict[str, Any]) -> list[LaneAction]:
    """Every lane that is not certified and routable for the build on this host."""
    actions = []
    for row in rows:
        if row.build_status != cm.UNAVAILABLE and row.certification == cm.CERTIFIED and row.routable_under_policy:
            continue
        status = cm.UNAVAILABLE if row.build_status == cm.UNAVAILABLE else row.certification
        reason = row.build_detail if row.build_status in (cm.UNAVAILABLE, cm.FAILED) else (
            row.certification_detail or row.build_detail)
        actions.append(LaneAction(row.lane_id, status, reason, next_command(row, spec["lanes"][row.lane_id], host)))
    return actions


def _figures_html(entry: cs.CertifiedEntry) -> str:
    items = "".join(f'<li class=figure data-check="{_e(f.check)}" data-figure="{_e(f.key)}">'
                    f'<b>{_e(f.check)}</b> {_e(f.text())}</li>' for f in entry.figures)
    checks = ", ".join(f"{name} {status}" for name, status in entry.checks)
    return f"<ul class=figures>{items}</ul><div class=detail>checks: {_e(checks)}</div>"


def _decision_html(decision: str, reasons: list[str]) -> str:
    listed = "".join(f"<li class=reason>{_e(r)}</li>" for r in reasons)
    return f"{_pill(decision, decision)}" + (f"<ul class=reasons>{listed}</ul>" if listed else "")


def _handoff_html(entry: cs.CertifiedEntry, page_dir: pathlib.Path | None) -> str:
    if not entry.run_readme or page_dir is None:
        return "<div class=detail>run not committed</div>"
    href = cs.relative_link(entry.run_readme, page_dir)
    return f'<div><a class=handoff href="{_e(href)}">hand-off README</a></div>'


def _entry_row(entry: cs.CertifiedEntry, page_dir: pathlib.Path | None) -> str:
    soon = " expiring" if entry.days_to_expiry < 14 else ""
    return (
        f'<tr class=record data-lane="{_e(entry.lane_id)}" data-device-class="{_e(entry.device_class)}" '
        f'data-model="{_e(entry.model)}" data-record-id="{_e(entry.record_id)}" data-decision="{_e(entry.decision)}" '
        f'data-days-to-expiry="{entry.days_to_expiry}">'
        f"<td><b>{_e(entry.lane_id)}</b><div class=detail>{_e(entry.device_class)}</div></td>"
        f"<td class=model><b>{_e(entry.model)}</b><div class=detail>sha256 {_e(entry.model_sha256[:16])}…; "
        f"recipe: {_e(entry.recipe)}</div></td>"
        f"<td class=figs>{_figures_html(entry)}</td>"
        f"<td class=decision>{_decision_html(entry.decision, entry.reasons)}</td>"
        f"<td class=\"expiry{soon}\">{entry.days_to_expiry} days<div class=detail>expires {_e(entry.expires_at)}</div></td>"
        f"<td><code class=record-id>{_e(entry.record_id)}</code>{_handoff_html(entry, page_dir)}</td></tr>"
    )


def certified_html(entries: list[cs.CertifiedEntry], page_dir: pathlib.Path | None) -> str:
    rows = "".join(_entry_row(e, page_dir) for e in entries) or "<tr><td colspan=6>no verified record</td></tr>"
    return ("<section id=certified><h2>Certified lanes (signed records)</h2>"
            "<p class=detail>One row per verified record: a lane is certified only for that device class, "
            "model, recipe and build. Admission: its decision for a node matching the record exactly.</p>"
            "<table><tr><th>lane / device class</th><th>model</th><th>headline figures (bound)</th>"
            "<th>admission</th><th>expiry</th><th>record</th></tr>" + rows + "</table></section>")


def _route_row(pair: dict) -> str:
    lanes = " + ".join(pair["lanes"]) or pair["source"]
    days = "" if pair.get("days_to_expiry") is None else f"<div class=detail>{pair['days_to_expiry']} days to expiry</div>"
    return (
        f'<tr class=route data-lanes="{_e(lanes)}" data-source="{_e(pair["source"])}" data-state="{_e(pair["state"])}">'
        f"<td><b>{_e(lanes)}</b><div class=detail>model {_e(pair['model_sha256'][:12] or '-')}</div>{days}</td>"
        f"<td><div class=detail>{'<br>'.join(_e(d) for d in pair['device_classes'])}</div></td>"
        f"<td class=recipe>{_e(pair.get('recipe') or '-')}</td>"
        f"<td class=state>{_decision_html(pair['state'], pair['reasons'])}</td></tr>"
    )


def routes_html(pairs: list[dict]) -> str:
    rows = "".join(_route_row(p) for p in pairs) or "<tr><td colspan=4>none</td></tr>"
    return ("<section id=routes><h2>Mixed-backend routes</h2><p class=detail>A route whose nodes run different "
            "lanes is admitted only with a signed compatibility record measured on that route, for exactly those "
            "lanes, device classes, model and recipe. State and reasons: admission's decision, verbatim.</p>"
            "<table><tr><th>lanes</th><th>device classes</th><th>recipe</th><th>admission</th></tr>"
            + rows + "</table></section>")


def host_html(rows: list[cm.LaneRow], spec: dict[str, Any], host: dict[str, Any]) -> str:
    actions = "".join(
        f'<tr class=lane-action data-lane="{_e(a.lane_id)}" data-status="{_e(a.status)}">'
        f"<td><b>{_e(a.lane_id)}</b></td><td>{_pill(a.status, a.status.split()[0])}</td>"
        f"<td class=detail>{_e(a.reason)}</td><td class=command><code>{_e(a.command)}</code></td></tr>"
        for a in lane_actions(rows, spec, host))
    return (f"<section id=host><h2>This host ({_e(host.get('os', ''))}-{_e(host.get('arch', ''))})</h2>"
            "<p class=detail>Build status is verified against this host's build evidence and differs from host "
            "to host; a record certifies the build it names, never a rebuild.</p>"
            + cm.lanes_table_html(rows)
            + "<h3>Dark and unavailable lanes: why, and what would change it</h3>"
            "<table><tr><th>lane</th><th>state</th><th>reason</th><th>command</th></tr>"
            + (actions or "<tr><td colspan=4>none</td></tr>") + "</table></section>")


def render_page(rows: list[cm.LaneRow], spec: dict[str, Any], host: dict[str, Any],
                entries: list[cs.CertifiedEntry], pairs: list[dict], when: dt.datetime, instant: str,
                page_dir: pathlib.Path | None) -> str:
    """The whole page; page_dir is where it will be written (links to hand-offs are relative to it)."""
    stamp = timestamps.format_utc(when)
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>Lanes operator dashboard</title>"
        f"<style>{_CSS}</style></head><body><h1>Lanes operator dashboard</h1>"
        f'<p class="detail instant" data-as-of="{_e(stamp)}">Admission decisions and days to expiry at {_e(stamp)} '
        f"({_e(instant)}), under the committed policy; certification only from signed records that verify. "
        "Building never makes a lane routable.</p>"
        + certified_html(entries, page_dir) + routes_html(pairs) + host_html(rows, spec, host)
        + "</body></html>\n"
    )


def section(page: str, section_id: str) -> str:
    """The text of one <section id=...> of a rendered page (for tests and the committed-page check)."""
    start = page.index(f"<section id={section_id}>")
    return page[start:page.index("</section>", start) + len("</section>")]
