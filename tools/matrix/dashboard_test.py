"""The operator dashboard as a browser shows it: the committed evidence rendered to HTML, loaded in
headless Chromium (--dump-dom), the DOM parsed with html.parser and checked against what the records
say and what admission decides, computed here through the admission library. Tampered pages (a
figure removed, a route's state flipped, a decision flipped, a record dropped) must fail the same
checks. A screenshot of the page is kept as a test output (TEST_UNDECLARED_OUTPUTS_DIR).

Needs Debian's chromium (tools/setup_host.sh installs it); without it the test fails, never skips."""

from __future__ import annotations

import dataclasses
import datetime as dt
import html.parser
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import certification_pb2
from tools.admission import admission
from tools.admission.testing import routes
from tools.certify import records, sample_reports
from tools.matrix import capability_matrix as cm
from tools.matrix import certification_status as cs
from tools.matrix import dashboard, matrix_view
from tools.model import model_lock
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"], "lanes") if "TEST_SRCDIR" in os.environ else None
ROOT = RUNFILES or pathlib.Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"
CHROMIUM = os.environ.get("LANES_CHROMIUM", "/usr/bin/chromium")


def _data(path: str) -> pathlib.Path:
    """spec/availability are generated: under Bazel in the runfiles, run directly from bazel-bin."""
    return ROOT / path if RUNFILES else ROOT / "bazel-bin" / path


# ---- the DOM --------------------------------------------------------------------------------------

@dataclasses.dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = dataclasses.field(default_factory=list)
    content: list[str | Node] = dataclasses.field(default_factory=list)  # text and elements in document order

    def text(self) -> str:
        return " ".join(" ".join(c if isinstance(c, str) else c.text() for c in self.content).split())

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        found = []
        for c in self.children:
            if (tag is None or c.tag == tag) and (cls is None or cls in c.classes()):
                found.append(c)
            found.extend(c.find_all(tag, cls))
        return found

    def by_id(self, ident: str) -> Node | None:
        return next((n for n in self.find_all() if n.attrs.get("id") == ident), None)


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _TreeBuilder(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].content.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        # Chromium's serialization is well formed; pop to the matching element all the same.
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].content.append(data)


def parse_dom(text: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


# ---- Chromium -------------------------------------------------------------------------------------

def _chromium_env(home: pathlib.Path) -> dict[str, str]:
    # Chromium writes a profile and caches under HOME: keep them in the test's scratch directory.
    return {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache")}


def chromium(page: pathlib.Path, scratch: pathlib.Path, *extra: str) -> str:
    scratch.mkdir(parents=True, exist_ok=True)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={scratch / 'profile'}", *extra, page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_chromium_env(scratch), check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def dump_dom(page: pathlib.Path, scratch: pathlib.Path) -> Node:
    return parse_dom(chromium(page, scratch, "--dump-dom"))


@pytest.fixture(scope="module")
def browser() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"no Chromium at {CHROMIUM}: this test renders the dashboard in headless Chromium. Install "
                    "Debian's chromium (bash tools/setup_host.sh does), or point LANES_CHROMIUM at one.")
    return CHROMIUM


# ---- the committed evidence and what admission says about it --------------------------------------

@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> pathlib.Path:
    """evidence/ as regular files (Bazel's runfiles are symlinks, which admission refuses to open):
    the policy, the records and the runs' hand-off READMEs the page links to."""
    target = tmp_path_factory.mktemp("ws") / "evidence"
    (target / "records").mkdir(parents=True)
    shutil.copy(EVIDENCE / "policy.json", target / "policy.json")
    for record in (EVIDENCE / "records").glob("*.dsse.json"):
        shutil.copy(record, target / "records" / record.name)
    for readme in (EVIDENCE / "runs").glob("*/README.md"):
        (target / "runs" / readme.parent.name).mkdir(parents=True)
        shutil.copy(readme, target / "runs" / readme.parent.name / "README.md")
    if not list((target / "records").glob("*.compat.dsse.json")):
        _add_test_route(target)
    return target


def _add_test_route(evidence: pathlib.Path) -> None:
    """No mixed route is committed while the CUDA+Vulkan route waits to be measured again, so the
    routes section is exercised with one signed here: a test key the copied policy trusts, over the
    committed CUDA and Vulkan records of the embedded model, stating no recipe (as the withdrawn
    record did), which admission refuses (compat-recipe-missing)."""
    policy = policy_lib.load_policy(evidence / "policy.json")
    store = policy_lib.validate(policy)
    certs, _, _ = admission.load_records_dir(evidence / "records")
    verified = [records.verify_record(i.envelope, store, policy.supported_record_schema_versions) for i in certs]
    gpu = sorted((r for r in verified if r.scope.lane_id in ("linux-x86_64-cuda", "linux-x86_64-vulkan")
                  and r.model.source.startswith("embedded://")), key=lambda r: r.scope.lane_id)
    assert [r.scope.lane_id for r in gpu] == ["linux-x86_64-cuda", "linux-x86_64-vulkan"], gpu
    key = Ed25519PrivateKey.generate()
    issued = max(timestamps.parse_utc(r.issued_at) for r in verified)
    policy.trusted_keys.append(sample_reports.trusted_key(key, issued - dt.timedelta(days=1),
                                                          issued + dt.timedelta(days=365), owner="dashboard-test"))
    (evidence / "policy.json").write_text(policy_lib.policy_to_json(policy))
    rec = routes.compatibility_record(gpu, kl_divergence=1e-5, top1_agreement=1.0, max_abs_delta_logit=0.02,
                                      greedy_agreement=1.0, issuer=dsse.keyid_for(key),
                                      issued_at=timestamps.format_utc(issued),
                                      expires_at=timestamps.format_utc(issued + dt.timedelta(days=30)))
    rec.ClearField("recipe")
    name = "+".join(r.scope.lane_id for r in gpu) + f".{rec.model_sha256[:12]}.compat.dsse.json"
    (evidence / "records" / name).write_text(dsse.envelope_to_json(records.sign_compatibility(rec, key)))


@dataclasses.dataclass
class Expected:
    records: dict[str, dict]  # record_id -> what its row must show
    routes: dict[str, dict]   # compatibility record file -> admission's state and reasons


def _route_for(compat: certification_pb2.CompatibilityRecord,
               named: list[certification_pb2.CertificationRecord]) -> object:
    """The route the compatibility record was measured on, built here from the records themselves."""
    nodes = [admission.node_for_record(rec, f"test-{rec.scope.lane_id}") for rec in named]
    # The recipe the matrix asks for: the measured one, within every proof's sequence length.
    recipe = cs.compatibility_probe_recipe(compat, named)
    return admission.route_from_nodes(nodes, compat.model_sha256, "test-compat", recipe=recipe,
                                      model_shard_sha256=[s.sha256 for s in named[0].model.shards])


def expected_from(evidence: pathlib.Path) -> Expected:
    policy = policy_lib.load_policy(evidence / "policy.json")
    store = policy_lib.validate(policy)
    certs, compats, _ = admission.load_records_dir(evidence / "records")
    verified = [(i, records.verify_record(i.envelope, store, policy.supported_record_schema_versions)) for i in certs]
    verified_compats = [(i, records.verify_compatibility(i.envelope, store)) for i in compats]
    when = max(timestamps.parse_utc(r.issued_at) for _, r in (*verified, *verified_compats))
    lock = model_lock.load(ROOT / model_lock.LOCK_PATH)
    names = {f.sha256: m.name for m in lock.models for f in m.files}
    out = Expected({}, {})
    for item, rec in verified:
        route = admission.route_for_record(rec, "test", node_id="test")
        decision = admission.decide(policy, [item], [], route, when, trust_store=store)
        out.records[rec.record_id] = {
            "lane": rec.scope.lane_id,
            "model": "embedded" if rec.model.source.startswith("embedded://") else names[rec.model.sha256],
            "decision": "admitted" if decision.routable else "refused",
            "days": (timestamps.parse_utc(rec.expires_at) - when).days,
            "figures": {(f.check, f.key): f.text() for f in cs.headline_figures(rec)},
            "checks": {c.name: c for c in rec.checks},
            "handoff": f"runs/{item.label.removesuffix('.record.dsse.json')}/README.md",
        }
    by_id = {r.record_id: (i, r) for i, r in verified}
    for item, compat in verified_compats:
        named = [by_id[r] for r in compat.certification_record_ids]
        decision = admission.decide(policy, [i for i, _ in named], [item], _route_for(compat, [r for _, r in named]),
                                    when, trust_store=store)
        out.routes[item.label] = {"state": "admitted" if decision.routable else "refused",
                                  "reasons": list(decision.reasons), "lanes": " + ".join(sorted(compat.lane_ids)),
                                  "has_recipe": compat.HasField("recipe")}
    return out


# ---- the assertions, as a list of problems so that tampering can be shown to trip them ------------

def _record_problems(row: Node | None, rid: str, want: dict, page_dir: pathlib.Path) -> list[str]:
    if row is None:
        return [f"record {rid[:12]} ({want['lane']}) is not on the page"]
    problems = []
    a = row.attrs
    if a.get("data-lane") != want["lane"] or want["lane"] not in row.text():
        problems.append(f"{rid[:12]}: lane {a.get('data-lane')!r}, want {want['lane']!r}")
    model = row.find_all("td", "model")
    if a.get("data-model") != want["model"] or not model or not model[0].text().startswith(want["model"]):
        problems.append(f"{rid[:12]}: model {a.get('data-model')!r}, want {want['model']!r}")
    decision = row.find_all("td", "decision")
    if a.get("data-decision") != want["decision"] or not decision or not decision[0].text().startswith(want["decision"]):
        problems.append(f"{rid[:12]}: admission {a.get('data-decision')!r}, admission says {want['decision']!r}")
    expiry = row.find_all("td", "expiry")
    if a.get("data-days-to-expiry") != str(want["days"]) or not expiry or \
            not expiry[0].text().startswith(f"{want['days']} days"):
        problems.append(f"{rid[:12]}: days to expiry {a.get('data-days-to-expiry')!r}, want {want['days']}")
    code = row.find_all("code", "record-id")
    if not code or code[0].text() != rid:
        problems.append(f"{rid[:12]}: record id not shown in full")
    links = row.find_all("a", "handoff")
    if not links or links[0].attrs.get("href") != want["handoff"] or not (page_dir / want["handoff"]).is_file():
        problems.append(f"{rid[:12]}: hand-off link {links[0].attrs.get('href') if links else None!r}, "
                        f"want {want['handoff']!r} (an existing file)")
    shown = {(li.attrs.get("data-check"), li.attrs.get("data-figure")): li.text() for li in row.find_all("li", "figure")}
    for key, text in want["figures"].items():
        if key not in shown:
            problems.append(f"{rid[:12]}: figure {key[0]}.{key[1]} missing")
        elif shown[key] != f"{key[0]} {text}":
            problems.append(f"{rid[:12]}: figure {key[0]}.{key[1]} shows {shown[key]!r}, record says {text!r}")
    return problems


def page_problems(dom: Node, want: Expected, page_dir: pathlib.Path) -> list[str]:
    problems = []
    certified, routes, host = dom.by_id("certified"), dom.by_id("routes"), dom.by_id("host")
    if certified is None or routes is None or host is None:
        return ["the page lacks a #certified, #routes or #host section"]
    rows = {r.attrs.get("data-record-id"): r for r in certified.find_all("tr", "record")}
    if set(rows) - set(want.records):
        problems.append(f"records on the page that do not verify: {sorted(set(rows) - set(want.records))}")
    for rid, w in want.records.items():
        problems += _record_problems(rows.get(rid), rid, w, page_dir)
    shown_routes = {r.attrs.get("data-source"): r for r in routes.find_all("tr", "route")}
    for source, w in want.routes.items():
        row = shown_routes.get(source)
        if row is None:
            problems.append(f"route {source} is not on the page")
            continue
        state = row.find_all("td", "state")
        if row.attrs.get("data-state") != w["state"] or not state or not state[0].text().startswith(w["state"]):
            problems.append(f"route {w['lanes']}: state {row.attrs.get('data-state')!r}, admission says {w['state']!r}")
        reasons = [li.text() for li in row.find_all("li", "reason")]
        if reasons != [" ".join(r.split()) for r in w["reasons"]]:
            problems.append(f"route {w['lanes']}: reasons {reasons}, admission's are {w['reasons']}")
        recipe = row.find_all("td", "recipe")
        if not recipe or (not w["has_recipe"]) != recipe[0].text().startswith("none stated by the record"):
            problems.append(f"route {w['lanes']}: recipe cell does not say whether the record states one")
    for action in host.find_all("tr", "lane-action"):
        if not action.find_all("td", "command") or not action.find_all("td", "command")[0].text():
            problems.append(f"host: lane {action.attrs.get('data-lane')} has no command")
    return problems


# ---- rendering -----------------------------------------------------------------------------------

def render(evidence: pathlib.Path) -> pathlib.Path:
    """The committed evidence rendered by the matrix tool's own code path into evidence/matrix.html
    (of a workspace with nothing built, so the host section is the same wherever this runs)."""
    spec = json.loads(_data("lanes/spec.json").read_text())
    availability = json.loads(_data("lanes/availability.json").read_text())
    page = evidence / "matrix.html"
    matrix_view.render(evidence.parent, spec, availability, policy=evidence / "policy.json",
                       records=evidence / "records", html_out=page, model_lock=ROOT / model_lock.LOCK_PATH)
    return page


@pytest.fixture(scope="module")
def page(committed) -> pathlib.Path:
    return render(committed)


@pytest.fixture(scope="module")
def want(committed) -> Expected:
    return expected_from(committed)


def test_the_evidence_has_certified_records_and_a_route(want):
    assert want.records and want.routes
    lanes = {w["lane"] for w in want.records.values()}
    assert {"linux-x86_64-cpu", "linux-x86_64-cuda", "linux-x86_64-vulkan"} <= lanes
    assert {"embedded", "gemma-3-270m-q4_k_m", "smollm2-135m-instruct-q4_1"} <= {w["model"] for w in want.records.values()}


def test_the_page_in_chromium_shows_every_record_and_admissions_route_state(browser, page, want, tmp_path):
    dom = dump_dom(page, tmp_path)
    assert page_problems(dom, want, page.parent) == []
    routes = dom.by_id("routes").find_all("tr", "route")
    print("route states:", [(r.attrs["data-lanes"], r.attrs["data-state"]) for r in routes])
    print("records:", [(r.attrs["data-lane"], r.attrs["data-model"], r.attrs["data-decision"])
                       for r in dom.by_id("certified").find_all("tr", "record")])


def test_a_route_without_a_recipe_is_refused_for_it(want):
    """What admission says about a route whose record states no recipe; the page must say the same."""
    for w in want.routes.values():
        if not w["has_recipe"]:
            assert w["state"] == "refused"
            assert any(f"{admission.COMPAT_RECIPE_MISSING}: states no recipe" in r for r in w["reasons"])


def _tampered(page: pathlib.Path, tmp: pathlib.Path, old: str, new: str, count: int = 1) -> pathlib.Path:
    text = page.read_text()
    assert old in text, old
    out = page.parent / f"tampered-{tmp.name}.html"
    out.write_text(text.replace(old, new, count))
    return out


def _first_figure(page: pathlib.Path) -> str:
    text = page.read_text()
    start = text.index("<li class=figure")
    return text[start:text.index("</li>", start) + len("</li>")]


def _reason_tampered(route: str) -> str:
    """The route row with its first reason dropped, or, for an admitted route (no reasons), one added."""
    if "<li class=reason>" in route:
        return route.replace("<li class=reason>" + route.split("<li class=reason>", 1)[1].split("</li>", 1)[0]
                             + "</li>", "", 1)
    return route.replace(">admitted</span></td>", ">admitted</span><ul class=reasons><li class=reason>"
                         "scope-recipe-mismatch: tampered</li></ul></td>", 1)


@pytest.mark.parametrize("tamper", ["figure-removed", "figure-changed", "route-state-flipped", "route-state-text-flipped",
                                    "route-reason-dropped",
                                    "decision-flipped", "record-dropped", "expiry-changed", "handoff-broken"])
def test_tampered_pages_fail_the_assertions(browser, page, want, tmp_path, tamper):
    text = page.read_text()
    shown = "refused" if 'data-state="refused"' in text else "admitted"
    other = "admitted" if shown == "refused" else "refused"
    before, route = text.split("<tr class=route", 1)
    first_row = text[text.index("<tr class=record"):text.index("</tr>", text.index("<tr class=record")) + 5]
    edits = {
        "figure-removed": (_first_figure(page), ""),
        "figure-changed": (_first_figure(page), _first_figure(page).replace("</b> ", "</b> x", 1)),
        "route-state-flipped": (f'data-state="{shown}"', f'data-state="{other}"'),
        # The words a reader sees, the attribute left alone.
        "route-state-text-flipped": (text, before + "<tr class=route" + route.replace(f">{shown}</span>",
                                                                                      f">{other}</span>", 1)),
        "route-reason-dropped": (text, before + "<tr class=route" + _reason_tampered(route)),
        "decision-flipped": ('data-decision="admitted"', 'data-decision="refused"'),
        "record-dropped": (first_row, ""),
        "expiry-changed": ('data-days-to-expiry="', 'data-days-to-expiry="1'),
        "handoff-broken": ('class=handoff href="runs/', 'class=handoff href="run/'),
    }
    old, new = edits[tamper]
    dom = dump_dom(_tampered(page, tmp_path, old, new), tmp_path)
    problems = page_problems(dom, want, page.parent)
    print(tamper, "->", problems)
    assert problems, f"a page with {tamper} passed every assertion"


def test_dark_and_unavailable_lanes_say_what_would_change_them():
    host = {"os": "linux", "arch": "x86_64"}
    spec = {"lanes": {"a": {"os": "darwin", "arch": "arm64"}, "b": {"os": "linux", "arch": "x86_64"},
                      "c": {"os": "windows", "arch": "x86_64"}, "d": {"os": "linux", "arch": "x86_64"},
                      "e": {"os": "linux", "arch": "x86_64"}}}
    rows = [cm.LaneRow("a", "//lanes:metal", "metal", cm.UNAVAILABLE, "needs a darwin-arm64 host"),
            cm.LaneRow("b", "//lanes:rocm", "rocm", cm.UNAVAILABLE, "no hipcc"),
            cm.LaneRow("c", "", "cuda", cm.UNAVAILABLE, "needs a windows-x86_64 host"),
            cm.LaneRow("d", "//lanes:cpu", "cpu", cm.BUILT, "ok", cs.OTHER_BUILD, [], False, "re-certify"),
            cm.LaneRow("e", "//lanes:vulkan", "vulkan", cm.NOT_BUILT, "no manifest", cm.CERTIFIED, ["x"], True, "")]
    actions = {a.lane_id: a for a in dashboard.lane_actions(rows, spec, host)}
    assert set(actions) == {"a", "b", "c", "d"}  # e is certified and routable: nothing to change
    assert actions["a"].command == "on a darwin-arm64 host: bazel run //tools:certify -- --lane=metal"
    assert actions["b"].command.endswith("bazel sync --only=lane_sdks && bazel run //tools:certify -- --lane=rocm")
    assert "without a target" in actions["c"].command
    assert actions["d"].command == "bazel run //tools:certify -- --lane=cpu" and actions["d"].reason == "re-certify"
    assert actions["b"].status == cm.UNAVAILABLE and actions["d"].status == cs.OTHER_BUILD


def test_screenshot(browser, page, tmp_path):
    out = pathlib.Path(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    shot = out / "dashboard.png"
    chromium(page, tmp_path, "--window-size=1400,2000", f"--screenshot={shot}")
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot
    print("screenshot:", shot)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
