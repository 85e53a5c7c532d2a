"""Class 11 (the audit and certify) and class 13 (a recompute that cannot run): a report edited after
the run is never signed, and what the audit cannot verify is named.

Each case runs the real runner over the fake lane (tools/runner/testing/fake_lane.py: several checks
FAIL on it), edits what a forger would edit, and runs certify or the audit over the run directory.
"""

from __future__ import annotations

import pathlib
import shutil

from proto import runner_report_pb2 as rpb
from tests.red_team.case import RedTeamCase, Refusal
from tools.audit import audit, synthetic_run
from tools.certify import certify, sample_reports
from tools.policy import keys
from tools.policy import policy as policy_lib
from tools.runner.testing import fake_lane

CR = rpb.CheckResult
# evidence/policy.json's required_checks (the lane spec requires op_oracle of the CPU lane on its own).
POLICY_REQUIRED = ("preflight", "artifact_integrity", "fixture_parity", "reference_parity", "graph_smoke",
                   "concurrency", "cancellation", "cleanup", "speed")


def _fake_run(tmp: pathlib.Path) -> pathlib.Path:
    """A finished runner run over the fake lane, its build evidence beside the report (as the main
    job lays a run out before it signs)."""
    lane_dir, evidence, model = fake_lane.make_inputs(tmp)
    fake_lane.run(fake_lane.config(tmp, lane_dir, evidence, model))
    run_dir = tmp / "out"
    shutil.copyfile(evidence, run_dir / audit.BUILD_EVIDENCE_PB)
    return run_dir


def _forge_pass(report: rpb.RunnerReport) -> None:
    """What a forger writes: every check PASS, the run PASS and recordable."""
    for c in report.checks:
        c.status = CR.PASS
    report.status = rpb.RunnerReport.PASS
    report.pass_recordable = True
    del report.non_recordable_reasons[:]


def _certify(tmp: pathlib.Path, run_dir: pathlib.Path) -> Refusal:
    """certify over the run; the refusal it raises (AssertionError if it signed anything)."""
    files = keys.generate("redteam", tmp / "keys")
    policy = tmp / "policy.json"
    trusted = sample_reports.make_policy(keys.load_private_key(files.private_key))
    del trusted.required_checks[:]
    trusted.required_checks.extend(POLICY_REQUIRED)
    policy.write_text(policy_lib.policy_to_json(trusted))
    records = tmp / "records"
    try:
        path = certify.certify_report(run_dir / audit.REPORT_PB, files.private_key, policy, records, 30,
                                      spec_path=fake_lane.SPEC)
    except certify.AuditFailedError as err:
        assert not records.exists(), "certify wrote something while refusing"
        return Refusal("certify", str(err))
    raise AssertionError(f"certify signed the edited report: {path}")


def fail_edited_to_pass(tmp: pathlib.Path) -> Refusal:
    run_dir = _fake_run(tmp)
    synthetic_run.rewrite_report(run_dir, _forge_pass)  # .pb and its .json twin, consistently
    refusal = _certify(tmp, run_dir)
    assert "report says PASS, the raw files say FAIL" in refusal.reason, refusal.reason
    return refusal


def op_oracle_not_required(tmp: pathlib.Path) -> Refusal:
    run_dir = _fake_run(tmp)

    def edit(report: rpb.RunnerReport) -> None:
        _forge_pass(report)
        oracle = next(c for c in report.checks if c.name == "op_oracle")
        oracle.status, oracle.required = CR.FAIL, False  # its FAIL kept, declared not to count

    synthetic_run.rewrite_report(run_dir, edit)
    refusal = _certify(tmp, run_dir)
    assert "[required] op_oracle: the report marks it not required" in refusal.reason, refusal.reason
    return refusal


def raw_file_deleted_with_digest(tmp: pathlib.Path) -> Refusal:
    run_dir = _fake_run(tmp)
    name = "logs/cancellation.server.log"  # cancellation.log names it as its server's own log
    (run_dir / name).unlink()

    def edit(report: rpb.RunnerReport) -> None:
        for logs in [report.logs] + [c.logs for c in report.checks]:
            kept = [d for d in logs if d.path != name]
            del logs[:]
            logs.extend(kept)
        # What the deleted server log would have contradicted.
        next(c for c in report.checks if c.name == "cancellation").status = CR.PASS

    synthetic_run.rewrite_report(run_dir, edit)
    result = audit.audit_run(run_dir, require_readme=False, spec=fake_lane.SPEC)
    found = [f for f in result.findings if f.kind == "raw-file" and name in f.detail]
    assert found, result.summary()
    assert not [f for f in result.findings if f.kind == "digest"], "a digest finding: the deletion was not consistent"
    return Refusal("audit", str(found[0]))


def recompute_cannot_run(tmp: pathlib.Path) -> Refusal:
    run_dir = _fake_run(tmp)
    # op_oracle's recompute re-runs the float64 reference on the model its log names; the auditor
    # has none (LANES_AUDIT_MODELS unset): the recompute cannot run, which must be a named failure.
    result = audit.audit_run(run_dir, require_readme=False, spec=fake_lane.SPEC)
    found = [f for f in result.findings if f.kind == "recompute" and f.where == "op_oracle"]
    assert found and "recompute cannot run" in found[0].detail, result.summary()
    assert "NOT VERIFIED" in result.summary() and "op_oracle" in result.summary().splitlines()[-1]
    assert not result.ok
    return Refusal("audit", str(found[0]))


CASES = [
    RedTeamCase(11, "report edited FAIL->PASS, then certify", fail_edited_to_pass),
    RedTeamCase(11, "op_oracle FAIL marked required=False", op_oracle_not_required),
    RedTeamCase(11, "raw file and its digest deleted together", raw_file_deleted_with_digest),
    RedTeamCase(13, "a recompute that cannot run", recompute_cannot_run),
]
