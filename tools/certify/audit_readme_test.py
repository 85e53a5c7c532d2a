"""A run's generated README goes stale when its record appears (the audit says so), and is current
again once regenerated. Here, above certify, because the record is signed."""

import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import runner_report_pb2 as rpb
from tools.audit import audit, synthetic_run
from tools.certify import records, sample_reports
from tools.evidence import run_readme
from tools.policy import dsse


def _sign(report: rpb.RunnerReport, report_bytes: bytes) -> str:
    key = Ed25519PrivateKey.generate()
    record = records.record_from_report(report, report_bytes, dsse.keyid_for(key), sample_reports.NOW, 90, "test-policy")
    return dsse.envelope_to_json(records.sign_record(record, key))


def _audit(run):
    # The synthetic run's two checks only (tools/audit/whole_run_test audits whole runs).
    return audit.audit_run(run, loader=synthetic_run.loader, verdicts=synthetic_run.verdicts, whole_run=False)


def test_readme_goes_stale_when_a_record_appears(tmp_path):
    run = synthetic_run.make_run(tmp_path, base=sample_reports.make_report("linux-x86_64-cpu"))
    assert _audit(run).ok  # its README says no record was produced
    # The synthetic run is deterministic: another one signed has the same report digest, so its
    # record is this run's record once it sits in evidence/records/.
    other = synthetic_run.make_run(tmp_path / "other", base=sample_reports.make_report("linux-x86_64-cpu"), sign=_sign)
    record = next((other.parent.parent / "records").glob("*.record.dsse.json"))
    (run.parent.parent / "records").mkdir()
    (run.parent.parent / "records" / record.name).write_bytes(record.read_bytes())
    assert run_readme.find_record(run) is not None
    assert [f.kind for f in _audit(run).findings] == ["readme"]
    run_readme.write_readme(run)
    assert _audit(run).ok and "record_id" in (run / "README.md").read_text()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
