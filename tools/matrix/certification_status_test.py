"""The matrix binds a record to the build on disk: a lane rebuilt with other artifacts shows
"BUILT, record is for another build", never "certified", and is not routable."""

import datetime as dt
import pathlib
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tools.admission.testing import routes
from tools.certify import records, sample_reports
from tools.evidence import build_evidence, lane_manifest
from tools.matrix import capability_matrix as cm
from tools.matrix import certification_status as cs
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib

LANE = "linux-x86_64-cpu"
SPEC = {"lanes": {LANE: {"alias": "cpu", "backend": "cpu"}}}
AVAIL = {"host": {"os": "linux", "arch": "x86_64"}, "lanes": {LANE: {"status": "AVAILABLE", "reason": ""}}}


def _build_lane(bazel_bin: pathlib.Path, binary: bytes) -> str:
    """Builds (or rebuilds) the lane's artifacts and evidence under bazel_bin; returns the evidence digest."""
    lane_dir = bazel_bin / "lanes" / "cpu"
    (lane_dir / "bin").mkdir(parents=True, exist_ok=True)
    (lane_dir / "bin" / "llama-completion").write_bytes(binary)
    meta = {"name": "cpu_llama", "cache_entries": {}, "started": 1.0, "finished": 2.0,
            "compilers": {"CXX": {"compiler_id": "GNU", "compiler_version": "12.2.0"}}}
    pin = {"source_uri": "pypi-sdist:x", "archive_sha256": "ab" * 32, "commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f",
           "patches": [], "patch_stack_digest": "sha256:" + "ef" * 32}
    ev = build_evidence.make_evidence(lane_id=LANE, lane_dir=lane_dir, pin=pin, sdk={"name": "host-cc"},
                                      stage_metas=[meta], targets=["llama-completion"], bazel_version="7")
    pb = bazel_bin / "lanes" / "cpu.evidence.pb"
    build_evidence.write_evidence(ev, pb, pb.with_suffix(".json"))
    (bazel_bin / "lanes" / "cpu.lane.json").write_text(lane_manifest.encode(
        "cpu", LANE, "lanes/cpu", "lanes/cpu.evidence.pb", "lanes/cpu.evidence.json"))
    return build_evidence.evidence_digest(pb)


def _certify(tmp_path: pathlib.Path, evidence_digest: str, key=None) -> tuple[pathlib.Path, pathlib.Path]:
    """A policy trusting a fresh key and one record for the lane built with evidence_digest."""
    key = key or Ed25519PrivateKey.generate()
    now = timestamps.now()
    policy = sample_reports.make_policy()
    policy.trusted_keys.append(sample_reports.trusted_key(key, now - dt.timedelta(days=1), now + dt.timedelta(days=365)))
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(policy_lib.policy_to_json(policy))
    report = sample_reports.make_report(LANE)
    report.build_evidence_digest = evidence_digest
    data = report.SerializeToString(deterministic=True)
    record = records.record_from_report(report, data, dsse.keyid_for(key), now - dt.timedelta(minutes=1), 30, policy.policy_id)
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    (records_dir / records.record_file_name(record)).write_text(dsse.envelope_to_json(records.sign_record(record, key)))
    return policy_path, records_dir


def _row(bazel_bin, policy_path, records_dir) -> cm.LaneRow:
    certifier = cs.policy_certifier(policy_path, records_dir)
    return cm.matrix(SPEC, AVAIL, bazel_bin, certifier)[0]


def test_the_certified_build_is_certified_and_routable(tmp_path):
    bazel_bin = tmp_path / "bazel-bin"
    digest = _build_lane(bazel_bin, b"\x7fELF build 1")
    policy_path, records_dir = _certify(tmp_path, digest)
    row = _row(bazel_bin, policy_path, records_dir)
    assert (row.build_status, row.certification, row.routable_under_policy) == (cm.BUILT, cs.CERTIFIED, True), row


def test_rebuilt_lane_is_not_certified_by_the_older_build_record(tmp_path):
    bazel_bin = tmp_path / "bazel-bin"
    old = _build_lane(bazel_bin, b"\x7fELF build 1")
    policy_path, records_dir = _certify(tmp_path, old)
    new = _build_lane(bazel_bin, b"\x7fELF build 2, other artifacts")
    assert new != old
    row = _row(bazel_bin, policy_path, records_dir)
    assert row.build_status == cm.BUILT
    assert row.certification == cs.OTHER_BUILD == "BUILT, record is for another build"
    assert not row.routable_under_policy and row.certified_device_classes == []
    assert new in row.certification_detail and old in row.certification_detail
    assert "BUILT, record is for another build" in cm.render_text([row])


def test_lane_not_built_here_keeps_its_record_and_names_the_build(tmp_path):
    policy_path, records_dir = _certify(tmp_path, "sha256:" + "12" * 32)
    status, classes, routable, detail = cs.policy_certifier(policy_path, records_dir)(LANE, "")
    assert (status, routable) == (cs.CERTIFIED, True) and classes
    assert "not built on this host; records name build sha256:" + "12" * 32 in detail


def test_a_revoked_record_leaves_its_lane_dark_with_the_reason(tmp_path):
    from tools.publish import revocations
    key = Ed25519PrivateKey.generate()
    policy_path, records_dir = _certify(tmp_path, "sha256:" + "12" * 32, key)
    revs = tmp_path / "revocations"
    assert cs.policy_certifier(policy_path, records_dir, revs)(LANE, "")[0] == cs.CERTIFIED  # no directory: none
    revs.mkdir()
    rev = revocations.make(lane_id=LANE, reason="kernel bug after certification", now=timestamps.now())
    (revs / "r.dsse.json").write_text(dsse.envelope_to_json(revocations.sign(rev, key)))
    status, classes, routable, detail = cs.policy_certifier(policy_path, records_dir, revs)(LANE, "")
    assert (status, classes, routable) == (cm.DARK, [], False)
    assert "revoked: " in detail and "kernel bug after certification" in detail
    # A revocation signed by a key the policy does not trust cannot be verified: fail closed.
    (revs / "r.dsse.json").write_text(dsse.envelope_to_json(revocations.sign(rev, Ed25519PrivateKey.generate())))
    status, _, routable, detail = cs.policy_certifier(policy_path, records_dir, revs)(LANE, "")
    assert (status, routable) == (cm.DARK, False) and "revocation-unreadable" in detail


def test_an_issuer_key_revocation_covers_its_records_without_a_keyid(tmp_path):
    """The key that verified decides, never the envelope's keyid hint: blanking the keyid of a record
    whose issuer key is revoked does not bring its lane back."""
    import json

    from cryptography.hazmat.primitives import serialization

    from tools.publish import revocations
    key = Ed25519PrivateKey.generate()
    policy_path, records_dir = _certify(tmp_path, "sha256:" + "12" * 32, key)
    (record_file,) = records_dir.iterdir()
    envelope = json.loads(record_file.read_text())
    for signature in envelope["signatures"]:
        signature["keyid"] = ""
    record_file.write_text(json.dumps(envelope))
    assert cs.policy_certifier(policy_path, records_dir)(LANE, "")[0] == cs.CERTIFIED  # keyid-less still verifies
    revs = tmp_path / "revocations"
    revs.mkdir()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    rev = revocations.make(reason="issuer key leaked", now=timestamps.now(), issuer_public_key=raw)
    (revs / "r.dsse.json").write_text(dsse.envelope_to_json(revocations.sign(rev, key)))
    status, _, routable, detail = cs.policy_certifier(policy_path, records_dir, revs)(LANE, "")
    assert (status, routable) == (cm.DARK, False) and "issuer key leaked" in detail, detail


def test_records_of_other_lanes_leave_the_lane_dark(tmp_path):
    policy_path, records_dir = _certify(tmp_path, "sha256:" + "12" * 32)
    certifier = cs.policy_certifier(policy_path, records_dir)
    assert certifier("linux-x86_64-cuda", "sha256:" + "34" * 32)[:3] == (cm.DARK, [], False)


def _certify_pair(tmp_path: pathlib.Path, compat_mutate=None) -> tuple[pathlib.Path, pathlib.Path]:
    """Two lanes certified by one trusted key, and a compatibility record measured with exactly them
    (their pin, under the first lane's recipe)."""
    key = Ed25519PrivateKey.generate()
    now = timestamps.now()
    policy = sample_reports.make_policy()
    policy.trusted_keys.append(sample_reports.trusted_key(key, now - dt.timedelta(days=1), now + dt.timedelta(days=365)))
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(policy_lib.policy_to_json(policy))
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    certs = []
    for lane in ("linux-x86_64-cuda", "linux-x86_64-vulkan"):
        report = sample_reports.make_report(lane)
        data = report.SerializeToString(deterministic=True)
        record = records.record_from_report(report, data, dsse.keyid_for(key), now - dt.timedelta(minutes=1), 30,
                                            policy.policy_id)
        (records_dir / records.record_file_name(record)).write_text(dsse.envelope_to_json(records.sign_record(record, key)))
        certs.append(record)
    compat = routes.compatibility_record(
        certs, kl_divergence=1e-6, top1_agreement=1.0, max_abs_delta_logit=1e-3, greedy_agreement=1.0,
        issuer=dsse.keyid_for(key), issued_at=timestamps.format_utc(now - dt.timedelta(minutes=1)),
        expires_at=timestamps.format_utc(now + dt.timedelta(days=30)))
    compat.tolerances.max_kl_divergence, compat.tolerances.min_top1_agreement = 1e-4, 1.0
    compat.tolerances.max_abs_delta_logit, compat.tolerances.min_greedy_agreement = 0.05, 1.0
    if compat_mutate:
        compat_mutate(compat)
    (records_dir / "pair.compat.dsse.json").write_text(dsse.envelope_to_json(records.sign_compatibility(compat, key)))
    return policy_path, records_dir


def test_matrix_shows_a_routable_pair(tmp_path):
    (pair,) = cs.compatibility_pairs(*_certify_pair(tmp_path))
    assert pair["lanes"] == ["linux-x86_64-cuda", "linux-x86_64-vulkan"] and pair["routable"], pair
    assert "greedy 1.00" in pair["detail"]
    text = cm.render_text([], [pair])
    assert "linux-x86_64-cuda + linux-x86_64-vulkan" in text and "routable" in text


def test_matrix_shows_a_pair_outside_its_tolerances_as_not_routable(tmp_path):
    def worse(rec):
        rec.kl_divergence = 1e-3
    (pair,) = cs.compatibility_pairs(*_certify_pair(tmp_path, worse))
    assert not pair["routable"] and "outside its own tolerances" in pair["detail"]


def test_matrix_probes_a_pair_with_the_recipe_it_was_measured_under(tmp_path):
    # One sequence on the route; the lanes' records prove four. The pair is routable for what it ran.
    def one_sequence(rec):
        rec.recipe.parallel_sequences = 1
    (pair,) = cs.compatibility_pairs(*_certify_pair(tmp_path, one_sequence))
    assert pair["routable"], pair


@pytest.mark.parametrize("mutate, reason", [
    (lambda rec: rec.ClearField("recipe"), "compat-recipe-missing: states no recipe"),
    (lambda rec: rec.ClearField("patch_stack_digest"), "compat-pin-missing: states no patch_stack_digest"),
    (lambda rec: setattr(rec, "upstream_commit", "f" * 40), "compat-pin-mismatch: upstream_commit"),
])
def test_matrix_shows_a_pair_admission_refuses_with_its_reason(tmp_path, mutate, reason):
    (pair,) = cs.compatibility_pairs(*_certify_pair(tmp_path, mutate))
    assert not pair["routable"] and reason in pair["detail"], pair


def test_matrix_shows_a_pair_of_a_revoked_lane_record_as_not_routable(tmp_path):
    from tools.publish import revocations
    policy_path, records_dir = _certify_pair(tmp_path)
    key = Ed25519PrivateKey.generate()  # a revoker the policy trusts
    policy = policy_lib.load_policy(policy_path)
    now = timestamps.now()
    policy.trusted_keys.append(sample_reports.trusted_key(key, now - dt.timedelta(days=1), now + dt.timedelta(days=365)))
    policy_path.write_text(policy_lib.policy_to_json(policy))
    revs = tmp_path / "revocations"
    revs.mkdir()
    rev = revocations.make(reason="vulkan driver regression", now=now, lane_id="linux-x86_64-vulkan")
    (revs / "r.dsse.json").write_text(dsse.envelope_to_json(revocations.sign(rev, key)))
    (pair,) = cs.compatibility_pairs(policy_path, records_dir, revs)
    assert not pair["routable"] and "vulkan driver regression" in pair["detail"], pair
    assert cs.compatibility_pairs(policy_path, records_dir)[0]["routable"]  # without the revocations


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
