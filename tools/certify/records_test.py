"""Records: only recordable PASS reports are certified; signed records verify; in-toto export."""

import datetime as dt
import json
import pathlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import certification_pb2, runner_report_pb2
from tools.audit import audit
from tools.certify import certify, intoto, records, sample_reports
from tools.policy import dsse, keys
from tools.policy import policy as policy_lib
from tools.policy.errors import (
    ExpiredRecordError,
    IssuerMismatchError,
    KeyOutsideValidityError,
    NotRecordableError,
    UnknownKeyError,
    UnreadableInputError,
    UnsupportedSchemaError,
)

NOW = sample_reports.NOW
FAIL = runner_report_pb2.CheckResult.FAIL


def _record(report, key=None, now=NOW):
    key = key or Ed25519PrivateKey.generate()
    return records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), now, 30, "p")


def test_record_fields():
    report = sample_reports.make_report("linux-x86_64-cuda")
    data = report.SerializeToString()
    rec = records.record_from_report(report, data, "k" * 64, NOW, 30, "test-policy")
    assert rec.scope.lane_id == "linux-x86_64-cuda"
    assert rec.scope.device_class == report.device_class
    assert rec.report_digest == records.sha256_digest(data)
    assert rec.issued_at == "2026-03-01T12:00:00Z" and rec.expires_at == "2026-03-31T12:00:00Z"
    assert rec.metrics["speed.tg_tokens_per_s"] == 50.0
    assert rec.policy_id == "test-policy" and rec.issuer == "k" * 64
    assert [c.name for c in rec.checks] == [c.name for c in report.checks]
    assert len(rec.record_id) == 64


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: setattr(r, "pass_recordable", False),
        lambda r: setattr(r, "status", runner_report_pb2.RunnerReport.FAIL),
        lambda r: setattr(r.checks[1], "status", FAIL),  # recordable claimed, a required check failed
        lambda r: setattr(r.checks[1], "status", runner_report_pb2.CheckResult.SKIPPED),
        lambda r: [setattr(c, "required", False) for c in r.checks],
    ],
)
def test_refuses_non_recordable_reports(spoil):
    report = sample_reports.make_report()
    spoil(report)
    with pytest.raises(NotRecordableError):
        _record(report)


def test_refuses_unknown_report_schema():
    report = sample_reports.make_report()
    report.schema_version = 2
    with pytest.raises(UnsupportedSchemaError):
        _record(report)


def test_sign_and_verify():
    key = Ed25519PrivateKey.generate()
    rec = _record(sample_reports.make_report(), key)
    env = records.sign_record(rec, key)
    assert env.payload_type == "application/vnd.lanes.certification-record.v1+protobuf"
    back = records.verify_record(dsse.envelope_from_json(dsse.envelope_to_json(env)), {dsse.keyid_for(key): key.public_key()})
    assert back == rec


def test_verify_refuses_other_payload_type_and_version():
    key = Ed25519PrivateKey.generate()
    trusted = {dsse.keyid_for(key): key.public_key()}
    rec = _record(sample_reports.make_report(), key)
    env = dsse.sign("application/vnd.lanes.certification-record.v2+protobuf", rec.SerializeToString(), key)
    with pytest.raises(UnsupportedSchemaError):
        records.verify_record(env, trusted)
    compat = records.sign_compatibility(certification_pb2.CompatibilityRecord(schema_version=1, lane_ids=["a", "b"]), key)
    with pytest.raises(UnsupportedSchemaError):
        records.verify_record(compat, trusted)


def test_issuer_must_be_signer():
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    rec = _record(sample_reports.make_report(), key)
    with pytest.raises(IssuerMismatchError):
        records.sign_record(rec, other)


def test_check_times():
    key = Ed25519PrivateKey.generate()
    policy = sample_reports.make_policy(key)
    store = policy_lib.validate(policy)
    rec = _record(sample_reports.make_report(), key)
    records.check_times(rec, store, NOW + dt.timedelta(days=1), 90)
    with pytest.raises(ExpiredRecordError):
        records.check_times(rec, store, NOW + dt.timedelta(days=31), 90)
    with pytest.raises(ExpiredRecordError):
        records.check_times(rec, store, NOW + dt.timedelta(days=3), 2)
    late = _record(sample_reports.make_report(), key, NOW + dt.timedelta(days=400))
    with pytest.raises(KeyOutsideValidityError):
        records.check_times(late, store, NOW + dt.timedelta(days=401), 90)


def test_intoto_statement():
    rec = _record(sample_reports.make_report())
    st = intoto.statement(rec)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == intoto.PREDICATE_TYPE
    names = [s["name"] for s in st["subject"]]
    assert names == ["bin/llama-cli", "lib/libggml.so", "model:tiny-llama-f16"]
    assert all(len(s["digest"]["sha256"]) == 64 for s in st["subject"])
    assert st["predicate"]["scope"]["lane_id"] == "linux-x86_64-cpu"
    key = Ed25519PrivateKey.generate()
    env = intoto.sign_statement(rec, key)
    assert json.loads(env.payload)["_type"] == intoto.STATEMENT_TYPE
    dsse.verify(env, {dsse.keyid_for(key): key.public_key()})


@pytest.fixture
def audit_passes(monkeypatch):
    """The audit is tested over real runs in tools/audit and tests/red_team; here, what certify does
    once the run dir audits (a sample report has no logs to audit)."""
    audited = []

    def fake_audit(run_dir, **kw):
        audited.append((run_dir, kw))
        return audit.AuditResult(run_dir=run_dir)

    monkeypatch.setattr(certify.audit, "audit_run", fake_audit)
    return audited


def _run_dir_report(tmp_path, report) -> pathlib.Path:
    (tmp_path / "run").mkdir(exist_ok=True)
    report_path = tmp_path / "run" / "runner_report.pb"
    report_path.write_bytes(report.SerializeToString())
    return report_path


def test_certify_report_end_to_end(tmp_path, audit_passes):
    files = keys.generate("ci", tmp_path / "keys")
    policy = sample_reports.make_policy(keys.load_private_key(files.private_key))
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(policy_lib.policy_to_json(policy))
    report_path = _run_dir_report(tmp_path, sample_reports.make_report("linux-x86_64-cuda"))
    path = certify.certify_report(report_path, files.private_key, policy_path, tmp_path / "records", 30, now=NOW)
    # The run dir was audited against the policy it is signed under.
    assert [(d, kw["policy_required"]) for d, kw in audit_passes] == [(tmp_path / "run", list(sample_reports.REQUIRED_CHECKS))]
    assert path.name == "linux-x86_64-cuda.cuda-nvidia-h200-9.0-580.record.dsse.json"
    rec = certify.verify(path, policy_path, now=NOW + dt.timedelta(hours=1))
    assert rec.scope.lane_id == "linux-x86_64-cuda" and rec.policy_id == "test-policy"
    later = NOW + dt.timedelta(hours=1)
    certify.export_intoto(path, policy_path, tmp_path / "st.json", now=later)
    assert json.loads((tmp_path / "st.json").read_text())["predicate"]["record_id"] == rec.record_id
    signed = dsse.envelope_from_json(certify.export_intoto(path, policy_path, key_path=files.private_key, now=later))
    assert signed.payload_type == intoto.INTOTO_PAYLOAD_TYPE


def test_certify_refuses_a_run_that_does_not_audit(tmp_path):
    """A report alone (no logs, no build evidence) re-derives nothing: refused, naming the run dir and
    the audit's findings, nothing written."""
    files = keys.generate("ci", tmp_path / "keys")
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(policy_lib.policy_to_json(sample_reports.make_policy(keys.load_private_key(files.private_key))))
    report_path = _run_dir_report(tmp_path, sample_reports.make_report())
    with pytest.raises(certify.AuditFailedError, match=rf"{tmp_path / 'run'} does not audit \(\d+ finding\(s\): .*"
                       r"nothing signed") as err:
        certify.certify_report(report_path, files.private_key, policy_path, tmp_path / "out", 30, now=NOW)
    assert "[required] " in str(err.value)
    assert err.value.code == "audit-failed"
    assert not (tmp_path / "out").exists()
    other = tmp_path / "run" / "linux-x86_64-cpu.report.pb"
    other.write_bytes(report_path.read_bytes())
    with pytest.raises(UnreadableInputError, match="runner_report.pb"):
        certify.certify_report(other, files.private_key, policy_path, tmp_path / "out", 30, now=NOW)


def test_certify_report_refuses_untrusted_key_and_bad_report(tmp_path, audit_passes):
    files = keys.generate("ci", tmp_path / "keys")
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(policy_lib.policy_to_json(sample_reports.make_policy(Ed25519PrivateKey.generate())))
    report_path = _run_dir_report(tmp_path, sample_reports.make_report())
    with pytest.raises(UnknownKeyError, match="policy_tool"):
        certify.certify_report(report_path, files.private_key, policy_path, tmp_path / "out", 30, now=NOW)
    bad = sample_reports.make_report()
    bad.pass_recordable = False
    bad.non_recordable_reasons.append("--skip=speed")
    report_path.write_bytes(bad.SerializeToString())
    with pytest.raises(NotRecordableError, match="skip=speed"):
        certify.certify_report(report_path, files.private_key, policy_path, tmp_path / "out", 30, now=NOW)
    assert not (tmp_path / "out").exists()


if __name__ == "__main__":
    import sys

    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
