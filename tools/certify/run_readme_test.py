"""The run README is generated from the report, logs and record only: it carries the exact
commands, host and device, every figure (per-op tables for op.<OP>.<field> keys), the limitations
and the record, says it is generated, and is byte-for-byte reproducible."""

import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import runner_report_pb2 as rpb
from tools.certify import records, sample_reports
from tools.evidence import run_readme
from tools.policy import dsse

CMD = "$ /lanes/cpu/bin/test-backend-ops test -b CPU -o ADD,FLASH_ATTN_EXT"


def _report() -> rpb.RunnerReport:
    report = sample_reports.make_report("linux-x86_64-cuda")
    del report.checks[:]
    fixture = report.checks.add(name="fixture_parity", status=rpb.CheckResult.PASS, required=True,
                                message="3 tests evaluated over 1 op")
    fixture.counts.update({"op.ADD.evaluated": 3, "op.ADD.passed": 3, "op.FLASH_ATTN_EXT.evaluated": 0,
                           "op.FLASH_ATTN_EXT.not_supported": 4, "tests_evaluated": 3})
    fixture.metrics["op.ADD.nmse_threshold"] = 1e-7
    fixture.logs.add(path="logs/fixture_parity.log", sha256="ab" * 32, size=10)
    oracle = report.checks.add(name="op_oracle", status=rpb.CheckResult.PASS, required=True, message="14 ops")
    oracle.counts["op.FLASH_ATTN_EXT.evaluated"] = 2
    oracle.metrics["op.FLASH_ATTN_EXT.max_abs_error"] = 3.5e-6
    report.checks.add(name="cancellation", status=rpb.CheckResult.SKIPPED, required=False,
                      message="skipped with --skip=cancellation (bring-up only)")
    report.non_recordable_reasons.append("--skip=cancellation used")
    report.host.hostname = "vm"
    return report


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "runs" / "lane.dev"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "fixture_parity.log").write_text(f"{CMD}\n  ADD(type=f32): OK\nprinted: $ not a command\n")
    return run


def test_generated_header_commands_figures_and_limitations(run_dir):
    text = run_readme.render(_report(), None, run_dir=run_dir)
    assert text.startswith(run_readme.GENERATED_MARK) and "Do not edit" in text
    assert f"```\n{CMD}\n```" in text and "printed: $ not a command" not in text  # only lines that start with "$ "
    assert "| driver | 580.65.06 (major 580) |" in text and "| runtime | 12.8 |" in text
    # op.<OP>.<field> keys become a per-op table; other keys stay a figure table.
    assert "| op | evaluated | nmse_threshold | not_supported | passed |" in text
    assert "| ADD | 3 | 1e-07 | - | 3 |" in text and "| FLASH_ATTN_EXT | 0 | - | 4 | - |" in text and "| tests_evaluated | 3 |" in text
    assert "| op | evaluated | max_abs_error |" in text and "| FLASH_ATTN_EXT | 2 | 3.5e-06 |" in text
    assert "`fixture_parity` evaluated no test of op FLASH_ATTN_EXT; covered by `op_oracle`" in text
    assert "`cancellation` (optional) is SKIPPED: skipped with --skip=cancellation" in text
    assert "not recordable: --skip=cancellation used" in text
    assert "No certification record was produced from this run." in text
    assert "No step log (the check did not run)." in text


def test_record_section_and_reproducible(tmp_path, run_dir):
    report = _report()
    report.non_recordable_reasons[:] = []
    report.checks[2].required = True
    report.checks[2].status = rpb.CheckResult.PASS
    data = report.SerializeToString(deterministic=True)
    (run_dir / "runner_report.pb").write_bytes(data)
    key = Ed25519PrivateKey.generate()
    record = records.record_from_report(report, data, dsse.keyid_for(key), sample_reports.NOW, 90, "p")
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    path = records_dir / "lane.dev.record.dsse.json"
    path.write_text(dsse.envelope_to_json(records.sign_record(record, key)))
    assert run_readme.find_record(run_dir) == path
    written = run_readme.write_readme(run_dir).read_text()
    assert f"| record_id | {record.record_id} |" in written and f"| issued_at | {record.issued_at} |" in written
    assert "| file | evidence/records/lane.dev.record.dsse.json |" in written
    assert written == run_readme.expected_readme(run_dir)
    assert written == run_readme.render(report, path, run_dir=run_dir)


def test_unreadable_record_is_an_error(tmp_path):
    bad = tmp_path / "x.record.dsse.json"
    bad.write_text("{}")
    with pytest.raises(run_readme.ReadmeError, match="x.record.dsse.json"):
        run_readme.render(_report(), bad)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
