"""What evidence/ holds is self-consistent, verifies under the committed policy, and admits only
its exact scope: each record's report, raw logs and build evidence re-hash to the digests that the
signed record and the report name."""

import datetime as dt
import hashlib
import os
import pathlib
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format

from proto import admission_pb2, certification_pb2, runner_report_pb2
from tools.admission import admission
from tools.audit import audit
from tools.certify import records, sample_reports
from tools.matrix import certification_status
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib

# Under Bazel the runfiles tree; run directly (/opt/lanes-pytest), the workspace's evidence/.
EVIDENCE = (pathlib.Path(os.environ["TEST_SRCDIR"], "lanes", "evidence") if "TEST_SRCDIR" in os.environ
            else pathlib.Path(__file__).resolve().parent.parent / "evidence")
POLICY = EVIDENCE / "policy.json"
RECORDS = sorted((EVIDENCE / "records").glob("*.record.dsse.json"))
RUNS = sorted(d for d in (EVIDENCE / "runs").iterdir() if d.is_dir()) if (EVIDENCE / "runs").is_dir() else []
COMPATS = sorted((EVIDENCE / "records").glob("*.compat.dsse.json"))
CTESTS = sorted(d for d in (EVIDENCE / "ctest").iterdir() if d.is_dir()) if (EVIDENCE / "ctest").is_dir() else []
BENCHES = sorted(d for d in (EVIDENCE / "bench").iterdir() if d.is_dir()) if (EVIDENCE / "bench").is_dir() else []


# The embedded model (--model=PATH under Bazel), for recomputing figures that need it (op_oracle).
for _arg in sys.argv:
    if _arg.startswith("--model="):
        from tools.runner.checks import op_oracle
        os.environ[op_oracle.MODELS_ENV] = os.path.abspath(_arg.split("=", 1)[1])


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _policy_and_store():
    policy = policy_lib.load_policy(POLICY)
    return policy, policy_lib.validate(policy, str(POLICY))


def _verified(path: pathlib.Path):
    policy, store = _policy_and_store()
    record = records.verify_record(dsse.envelope_from_json(path.read_bytes()), store, policy.supported_record_schema_versions)
    # Judged as of one hour after issue, so the test does not start failing when records age out.
    when = timestamps.parse_utc(record.issued_at) + dt.timedelta(hours=1)
    records.check_times(record, store, when, policy.max_record_age_days)
    return policy, record, when


def _node(record, **device_changes) -> admission_pb2.NodeDescription:
    node = admission_pb2.NodeDescription(node_id="node-1", lane_id=record.scope.lane_id,
                                         build_evidence_digest=record.build_evidence_digest)
    node.device_class.CopyFrom(record.scope.device_class)
    for field, value in device_changes.items():
        setattr(node.device_class, field, value)
    node.artifacts.extend(record.artifacts)
    return node


def test_there_is_evidence():
    assert RECORDS, "evidence/records holds no record"


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name.split(".")[0])
def test_record_report_logs_and_build_evidence_agree(path):
    _, record, _ = _verified(path)
    run = EVIDENCE / "runs" / path.name.replace(".record.dsse.json", "")
    report_pb = run / "runner_report.pb"
    assert "sha256:" + _sha(report_pb) == record.report_digest
    report = runner_report_pb2.RunnerReport.FromString(report_pb.read_bytes())
    assert report.pass_recordable and all(c.status == c.PASS for c in report.checks if c.required)
    # A check may be not required only where it does not apply (op_oracle on accelerators), and then
    # it says so as SKIPPED: never a FAIL, never a PASS that was not earned.
    assert all(c.status == c.SKIPPED for c in report.checks if not c.required)
    assert "sha256:" + _sha(run / "build_evidence.pb") == record.build_evidence_digest == report.build_evidence_digest
    logs = list(report.logs) + [l for c in report.checks for l in c.logs]
    assert logs
    for log in logs:
        assert _sha(run / log.path) == log.sha256, log.path


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name.split(".")[0])
def test_admission_routes_only_the_exact_scope(path):
    policy, record, when = _verified(path)
    signed = admission.load_signed(path)
    def decide(node):
        # The route asks for exactly the recipe the record proves (a route stating none is refused).
        route = admission.route_from_nodes([node], record.model.sha256, recipe=record.recipe,
                                           model_shard_sha256=[s.sha256 for s in record.model.shards])
        return admission.decide(policy, [signed], [], route, when)
    assert decide(_node(record)).routable
    other_device = decide(_node(record, device_name="Some Other Device", compute_capability="0.0"))
    assert not other_device.routable and any("scope-device-class-mismatch" in r for r in other_device.reasons)
    if record.scope.device_class.driver_major:
        other_driver = decide(_node(record, driver_major=str(int(record.scope.device_class.driver_major) + 1)))
        assert not other_driver.routable and any("scope-device-class-mismatch" in r for r in other_driver.reasons)
    other_os = decide(_node(record, os="windows"))
    assert not other_os.routable
    if record.scope.device_class.backend == "cpu":
        # The CPU variant ggml loaded is the ISA level: another variant on the same CPU model is
        # another device class (a zen4 record does not admit a host that loads haswell).
        other_variant = decide(_node(record, compute_capability="haswell"))
        assert not other_variant.routable and any("compute_capability" in r for r in other_variant.reasons)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name.split(".")[0])
def test_audit_recomputes_every_figure_of_the_committed_run(run):
    """`bazel run //tools:audit` on each committed run: digests, no undigested file, every figure
    re-derived by its check's recompute(), the .json twin and the generated README current."""
    result = audit.audit_run(run)
    assert result.ok, (f"{len(result.findings)} mismatches in {run.name} "
                       f"({result.figures_recomputed} of {result.figures_in_report} figures recomputed):\n"
                       + "\n".join(str(f) for f in result.findings))


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name.split(".")[0])
def test_audit_names_a_flipped_check_status(run, tmp_path):
    """A status the raw files do not support is a finding (admission trusts these statuses)."""
    import shutil

    from google.protobuf import json_format
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    report = runner_report_pb2.RunnerReport.FromString((copy / "runner_report.pb").read_bytes())
    check = next(c for c in report.checks if c.name == "reference_parity")
    check.status = check.FAIL
    (copy / "runner_report.pb").write_bytes(report.SerializeToString(deterministic=True))
    (copy / "runner_report.json").write_text(json_format.MessageToJson(report, preserving_proto_field_name=True))
    found = [str(f) for f in audit.audit_run(copy, require_readme=False).findings]
    assert any(f.startswith("[verdict] reference_parity: report says FAIL, the raw files say PASS") for f in found), found
    assert any(f.startswith("[verdict] report: status PASS") for f in found), found


def test_every_committed_run_is_audited():
    assert RUNS, "evidence/runs holds no run"
    assert {r.name.replace(".record.dsse.json", "") for r in map(pathlib.Path, map(str, RECORDS))} <= {r.name for r in RUNS}


def _compat_verified(path: pathlib.Path):
    policy, store = _policy_and_store()
    rec = records.verify_compatibility(dsse.envelope_from_json(path.read_bytes()), store)
    return policy, rec, timestamps.parse_utc(rec.issued_at) + dt.timedelta(hours=1)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name.split(".")[0])
def test_lanes_that_run_upstreams_ctest_in_certification_have_it_in_the_record(path):
    """The committed policy requires llama.cpp's own CTest suite of the lanes whose certification runs
    it (CUDA, Vulkan): their records carry upstream_ctest PASS with tests evaluated and none failed,
    and the policy refuses such a record once that check is gone. The CPU lane's runs in CI."""
    policy, record, when = _verified(path)
    lane = record.scope.lane_id
    required = policy_lib.required_checks_for(policy, lane)
    checks = {c.name: c for c in record.checks}
    if lane in ("linux-x86_64-cuda", "linux-x86_64-vulkan"):
        assert "upstream_ctest" in required
        ctest = checks["upstream_ctest"]
        assert ctest.status == runner_report_pb2.CheckResult.PASS
        assert ctest.counts["tests_passed"] > 0 and ctest.counts["tests_failed"] == ctest.counts["tests_not_run"] == 0
        route = admission.route_from_nodes([_node(record)], record.model.sha256, recipe=record.recipe,
                                           model_shard_sha256=[s.sha256 for s in record.model.shards])
        assert admission.record_refusals(record, _node(record), policy, route) == []
        stripped = type(record)()
        stripped.CopyFrom(record)
        del stripped.checks[:]
        stripped.checks.extend(c for c in record.checks if c.name != "upstream_ctest")
        refusals = admission.record_refusals(stripped, _node(record), policy, route)
        assert any("policy requires check 'upstream_ctest'" in r for r in refusals), refusals
    else:
        assert "upstream_ctest" not in required


@pytest.mark.parametrize("path", COMPATS, ids=lambda p: p.name.split(".")[0])
def test_compatibility_record_is_recomputed_from_its_committed_measurement(path):
    """The signed figures are what the committed raw files give (rpc_route.recompute), each raw
    file re-hashes to the record's digest, and the measurement names exactly the certified runs."""
    from tools.compat import compat_record, rpc_route
    _, rec, _ = _compat_verified(path)
    measurement = EVIDENCE / "compat" / path.name.replace(".compat.dsse.json", "")
    report = compat_record.load_measurement(measurement)  # raw digests + recompute == report
    assert "sha256:" + _sha(measurement / rpc_route.REPORT_FILE) == rec.measurement_digest
    assert dict(rec.raw_file_digests) == report["log_digests"]
    again = rpc_route.recompute(measurement)
    # Re-derived on this CPU: equal to the signed figures but for NumPy's last bits (1e-9 relative).
    assert again["compatible"] and compat_record.same_figures(rec.kl_divergence, again["worst"]["mean_kl"])
    assert compat_record.same_figures(rec.max_abs_delta_logit, again["worst"]["max_abs_delta_logit"])
    ids = compat_record.record_ids_by_report_digest(EVIDENCE / "records")
    assert sorted(rec.certification_record_ids) == sorted(
        ids[lane["certification_report_digest"]] for lane in report["lanes"])


@pytest.mark.parametrize("path", COMPATS, ids=lambda p: p.name.split(".")[0])
def test_mixed_route_is_admitted_only_with_its_compatibility_record(path):
    policy, rec, when = _compat_verified(path)
    certs = [admission.load_signed(p) for p in RECORDS]
    by_id = {}
    for p in RECORDS:
        _, record, _ = _verified(p)
        by_id[record.record_id] = record
    nodes = [_node(by_id[rid]) for rid in rec.certification_record_ids]
    for i, node in enumerate(nodes):
        node.node_id = f"node-{i}"
    first = by_id[rec.certification_record_ids[0]]
    # The route asks for the recipe measured on it (a record that states none: the lanes'), as the
    # matrix asks admission.
    recipe = certification_status.compatibility_probe_recipe(rec, [by_id[i] for i in rec.certification_record_ids])

    def decide(route_nodes, compats, model=rec.model_sha256, pol=policy):
        route = admission.route_from_nodes(route_nodes, model, recipe=recipe)
        return admission.decide(pol, certs, compats, route, when)
    compat = admission.load_signed(path)
    ok = decide(nodes, [compat])
    if not rec.HasField("recipe"):
        # Measured before compatibility records stated their recipe (schema v1): it admits no route.
        assert not ok.routable and all(lane.routable for lane in ok.lanes), ok.reasons
        assert any(f"{path.name}: {admission.COMPAT_RECIPE_MISSING}: " in r for r in ok.reasons), ok.reasons
        return
    assert ok.routable, ok.reasons
    without = decide(nodes, [])
    assert not without.routable and any(r.startswith(admission.MIXED_WITHOUT_COMPATIBILITY) for r in without.reasons)
    other_model = decide(nodes, [compat], model="b" * 64)
    assert not other_model.routable
    moved = [_node(by_id[rec.certification_record_ids[0]]), _node(by_id[rec.certification_record_ids[1]], driver_major="1")]
    assert not decide(moved, [compat]).routable
    unbounded = admission_pb2.AdmissionPolicy()
    unbounded.CopyFrom(policy)
    unbounded.ClearField("compatibility")
    assert not decide(nodes, [compat], pol=unbounded).routable
    print(f"{path.name}: recipe {json_format.MessageToDict(rec.recipe)}, pin {rec.upstream_commit} "
          f"{rec.patch_stack_digest}: routable={ok.routable}")

    # Another recipe that both lane records prove (their 4 server slots) but the route never ran:
    # refused by the compatibility record's scope, not by a lane.
    lanes_recipe = first.recipe
    route = admission.route_from_nodes(nodes, rec.model_sha256, recipe=lanes_recipe)
    other_recipe = admission.decide(policy, certs, [compat], route, when)
    print("another recipe:", other_recipe.reasons)
    assert not other_recipe.routable and all(lane.routable for lane in other_recipe.lanes), other_recipe.reasons
    assert any(f"{path.name}: scope-recipe-mismatch: " in r for r in other_recipe.reasons), other_recipe.reasons

    # The same measurement stating another llama.cpp pin than the lanes' records (signed here with a
    # key a copy of the policy trusts): refused for the pin.
    key = Ed25519PrivateKey.generate()
    trusting = admission_pb2.AdmissionPolicy()
    trusting.CopyFrom(policy)
    trusting.trusted_keys.append(sample_reports.trusted_key(key, when - dt.timedelta(days=30),
                                                            when + dt.timedelta(days=30), owner="committed-evidence-test"))
    for field, value in (("upstream_commit", "1" * 40), ("patch_stack_digest", "sha256:" + "2" * 64)):
        moved_pin = certification_pb2.CompatibilityRecord()
        moved_pin.CopyFrom(rec)
        setattr(moved_pin, field, value)
        moved_pin.issuer = dsse.keyid_for(key)
        signed = records.sign_compatibility(moved_pin, key)
        other_pin = decide(nodes, [admission.SignedInput.from_envelope(signed, path.name)], pol=trusting)
        print(f"another {field}:", other_pin.reasons)
        assert not other_pin.routable and any(": compat-pin-mismatch: " in r for r in other_pin.reasons), other_pin.reasons


@pytest.mark.parametrize("run", BENCHES, ids=lambda p: p.name)
def test_bench_report_is_what_its_raw_files_give(run):
    """Every figure of a committed lane-vs-upstream benchmark re-derives from its raw llama-bench
    JSON (digests included). (A benchmark may be of a build no longer certified: the CPU lane
    before its variants, kept as the 'before' of that change.)"""
    from proto import bench_report_pb2
    from tools.bench import bench
    report = bench_report_pb2.BenchReport.FromString((run / "bench_report.pb").read_bytes())
    again = bench.recompute(run)
    again.lane_build_evidence_digest = report.lane_build_evidence_digest
    assert again == report and report.lane_build_evidence_digest.startswith("sha256:")


@pytest.mark.parametrize("run", CTESTS, ids=lambda p: p.name)
def test_ctest_report_is_what_its_raw_log_gives(run):
    """A committed CTest run on a GPU host (tools/ctest/run_remote.sh): the log is the one the
    report digests, every test the log ran has the report's status, and the lane is certified."""
    from proto import ctest_report_pb2
    from tools.ctest import ctest_log
    report = ctest_report_pb2.CTestReport.FromString((run / "ctest_report.pb").read_bytes())
    log = (run / "ctest.log").read_text()
    assert _sha(run / "ctest.log") == report.log_sha256
    parsed = ctest_log.parse(log)
    by_name = {t.name: t for t in report.tests}
    for name, result in parsed.results.items():
        assert ctest_report_pb2.CTestReport.Status.Name(by_name[name].status) == result.status, name
    ran = {t.name for t in report.tests if t.status != report.EXCLUDED}
    assert ran == set(parsed.results) and report.passed
    assert report.totals.passed == sum(1 for r in parsed.results.values() if r.status == ctest_log.PASSED)
    certified = {_verified(p)[1].build_evidence_digest.removeprefix("sha256:") for p in RECORDS}
    assert report.build_evidence_sha256.removeprefix("sha256:") in certified


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
