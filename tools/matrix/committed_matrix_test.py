"""The matrix's mixed-route cells over the committed evidence (evidence/records, evidence/compat,
evidence/policy.json) show admission's own verdict and reason: a route whose lane records both
verify and route is routable when its compatibility record states the recipe it was measured under,
and refused for that one reason when it states none. The CUDA+Vulkan route over the committed
records of the embedded model is committed and states its recipe.

The committed dashboard (evidence/matrix.html) is the tool's output for the committed evidence: its
#certified and #routes sections, judged at the newest record's issue time, equal a fresh render. Its
#host section is what the publishing host had built, so it is checked for presence only."""

import datetime as dt
import os
import pathlib
import shutil
import sys

import pytest

from proto import certification_pb2
from tools.admission import admission
from tools.certify import records
from tools.compat import rpc_route
from tools.matrix import capability_matrix as cm
from tools.matrix import certification_status as cs
from tools.matrix import dashboard
from tools.model import model_lock
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib

# Under Bazel the runfiles tree; run directly, the workspace.
ROOT = (pathlib.Path(os.environ["TEST_SRCDIR"], "lanes") if "TEST_SRCDIR" in os.environ
        else pathlib.Path(__file__).resolve().parents[2])
EVIDENCE = ROOT / "evidence"
COMPATS = sorted((EVIDENCE / "records").glob("*.compat.dsse.json"))


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> pathlib.Path:
    """The policy and records as regular files: under Bazel the runfiles are symlinks, which
    admission refuses to open."""
    target = tmp_path_factory.mktemp("committed")
    (target / "records").mkdir()
    shutil.copy(EVIDENCE / "policy.json", target / "policy.json")
    for record in (EVIDENCE / "records").glob("*.dsse.json"):
        shutil.copy(record, target / "records" / record.name)
    for readme in (EVIDENCE / "runs").glob("*/README.md"):  # the hand-offs the page links to
        (target / "runs" / readme.parent.name).mkdir(parents=True)
        shutil.copy(readme, target / "runs" / readme.parent.name / "README.md")
    return target


def _compat(path: pathlib.Path) -> certification_pb2.CompatibilityRecord:
    return certification_pb2.CompatibilityRecord.FromString(dsse.envelope_from_json(path.read_bytes()).payload)


def test_there_is_a_committed_mixed_route():
    assert COMPATS


@pytest.mark.parametrize("path", COMPATS, ids=lambda p: p.name.split(".")[0])
def test_the_routes_cell_shows_admissions_verdict_and_reason(committed, path):
    rec = _compat(path)
    # Judged one hour after issue (as tests/committed_evidence_test.py), so expiry never decides.
    when = timestamps.parse_utc(rec.issued_at) + dt.timedelta(hours=1)
    policy = policy_lib.load_policy(committed / "policy.json")
    store = policy_lib.validate(policy)
    # Both lanes' records verify and each routes its own recipe at that time.
    for record_file in sorted((committed / "records").glob("*.record.dsse.json")):
        item = admission.load_signed(record_file)
        cert = records.verify_record(item.envelope, store, policy.supported_record_schema_versions)
        if cert.record_id not in rec.certification_record_ids:
            continue
        route = admission.route_from_nodes([admission.node_for_record(cert, "matrix-probe")], cert.model.sha256,
                                           "probe", cert.recipe)
        assert admission.decide(policy, [item], [], route, when, trust_store=store).routable
    (pair,) = [p for p in cs.compatibility_pairs(committed / "policy.json", committed / "records", now=when)
               if p["source"] == path.name]
    assert pair["lanes"] == sorted(rec.lane_ids)
    html = cm.render_html([], {"os": "linux", "arch": "x86_64"}, [pair])
    cell = html.split("<h2>Mixed-backend routes</h2>", 1)[1]
    if rec.HasField("recipe"):
        assert pair["routable"] and pair["state"] == cs.ADMITTED, pair["detail"]
        assert '<span class="pill BUILT">admitted</span>' in cell
        return
    # The one reason: its record states no recipe (no lane refusal, no expiry, no recipe mismatch).
    assert not pair["routable"] and pair["state"] == cs.REFUSED
    assert pair["reasons"] == [pair["detail"]]
    assert '<span class="pill FAILED">refused</span>' in cell
    assert pair["detail"].startswith(admission.MIXED_WITHOUT_COMPATIBILITY + ": ")
    assert pair["detail"].count("; candidates: ") == 1
    assert pair["detail"].endswith(f"; candidates: {path.name}: {admission.COMPAT_RECIPE_MISSING}: states no recipe "
                                   "the route was measured under; measure the route again (tools/compat) and sign "
                                   "a record that states it"), pair["detail"]
    assert f"{admission.COMPAT_RECIPE_MISSING}: states no recipe" in cell
    assert "admission: refused" in cm.render_text([], [pair])


@pytest.mark.parametrize("path", COMPATS, ids=lambda p: p.name.split(".")[0])
def test_a_record_without_a_recipe_comes_from_a_measurement_that_ran_another(path):
    """Why the committed record states none: its measurement (evidence/compat) recorded no recipe,
    and its route commands ran F32 KV with flash attention off, not the lanes' certified recipe."""
    rec = _compat(path)
    measurement = EVIDENCE / "compat" / path.name.replace(".compat.dsse.json", "")
    if rec.HasField("recipe"):
        assert rpc_route.recompute(measurement)["recipe"], "a record's recipe comes from its measurement"
        return
    assert rpc_route.recompute(measurement)["recipe"] == {}
    from tools.runner import log_blocks
    ran = [c.argv for c in log_blocks.commands(log_blocks.read(measurement / "logs" / "compat.log"))
           if rpc_route.is_route_command(c.argv)]
    assert ran
    recipe = rpc_route.recipe_from_argv(ran)
    assert list(recipe.kv_cache_types) == ["f32"] and list(recipe.flash_attention) == ["off"]


def _fresh_sections(committed: pathlib.Path) -> str:
    ev = cs.load_evidence(committed / "policy.json", committed / "records")
    entries = cs.certified_entries(ev, committed / "records", cs.locked_model_names(ROOT / model_lock.LOCK_PATH))
    pairs = cs.compatibility_pairs(committed / "policy.json", committed / "records")
    return dashboard.render_page([], {"lanes": {}}, {}, entries, pairs, ev.when, ev.instant, committed)


@pytest.mark.parametrize("section", ["certified", "routes"])
def test_the_committed_dashboard_is_the_tools_output(committed, section):
    page = (EVIDENCE / "matrix.html").read_text()
    fresh = _fresh_sections(committed)
    assert dashboard.section(page, section) == dashboard.section(fresh, section), (
        f"evidence/matrix.html's #{section} is not the tool's output for the committed evidence; regenerate it: "
        "bazel run //tools:matrix -- --html=evidence/matrix.html")


def test_the_committed_dashboard_states_its_instant_and_this_hosts_lanes(committed):
    page = (EVIDENCE / "matrix.html").read_text()
    ev = cs.load_evidence(committed / "policy.json", committed / "records")
    assert f'data-as-of="{timestamps.format_utc(ev.when)}"' in page
    assert "the newest record&#x27;s issue time" in page
    host = dashboard.section(page, "host")  # host-dependent: present, with a command per dark lane
    assert host.count("<tr class=lane-action") == host.count("<td class=command><code>")


def test_the_committed_dashboard_names_every_certified_model(committed):
    page = (EVIDENCE / "matrix.html").read_text()
    certified = dashboard.section(page, "certified")
    locked = cs.locked_model_names(ROOT / model_lock.LOCK_PATH)
    for item in admission.load_records_dir(committed / "records")[0]:
        rec = certification_pb2.CertificationRecord.FromString(item.envelope.payload)
        name = cs.EMBEDDED if rec.model.source.startswith("embedded://") else locked[rec.model.sha256]
        assert f'data-record-id="{rec.record_id}"' in certified
        assert f'data-model="{name}" data-record-id="{rec.record_id}"' in certified
        assert f'href="runs/{item.label.removesuffix(".record.dsse.json")}/README.md"' in certified


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
