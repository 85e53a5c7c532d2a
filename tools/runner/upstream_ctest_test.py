"""The runner's upstream_ctest step: required where the lane spec says so, figures and verdict from
ctest's raw log, a failing, missing or foreign suite fails the step (real ctest, fake bundle)."""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.ctest import ctest_run, fake_bundle
from tools.runner import upstream_ctest
from tools.runner.config import RunnerConfig
from tools.runner.context import RunContext
from tools.runner.lane_spec import Lane
from tools.runner.steps import Step

CR = rpb.CheckResult
needs_ctest = pytest.mark.skipif(shutil.which("ctest") is None, reason="needs CMake's ctest")


def _lane(in_certification: bool, lane_id: str = fake_bundle.LANE_ID) -> Lane:
    return Lane(lane_id=lane_id, alias="fake", os="linux", arch="x86_64", backend="cuda" if in_certification else "cpu",
                sdk="", targets=(), log_evidence=(), ggml_libs=(), ctest_in_certification=in_certification)


def _run(tmp: pathlib.Path, lane: Lane, bundle: pathlib.Path | None) -> tuple[int, str, Step, RunContext]:
    model = tmp / "tiny.gguf"
    model.write_text("GGUF")
    cfg = RunnerConfig(lane=lane.lane_id, lane_dir=fake_bundle.lane_dir(tmp), evidence=None, spec=tmp / "spec.json",
                       model=model, out_dir=tmp / "out", report=tmp / "out" / "runner_report.pb", ctest_bundle=bundle)
    logs = tmp / "out" / "logs"
    logs.mkdir(parents=True)
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp / "scratch")
    step = Step(upstream_ctest.STEP, logs, ctx.tracker)
    status, message = upstream_ctest.run_upstream_ctest(ctx, step)
    step.finish(status, message)
    return status, message, step, ctx


def test_a_lane_whose_suite_gates_in_ci_records_not_applicable_never_a_pass(tmp_path):
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=False), None)
    assert status == CR.SKIPPED and not step.result.required
    assert "in CI (//tests:fake_ctest_test)" in message
    assert upstream_ctest.recompute(ctx.logs_dir) == ({}, {})


def test_a_lane_that_needs_the_suite_fails_without_a_bundle(tmp_path):
    status, message, step, _ = _run(tmp_path, _lane(in_certification=True), None)
    assert status == CR.FAIL and step.result.required
    assert "no --ctest_bundle" in message and "build //lanes:fake_ctest" in message


@needs_ctest
def test_another_lanes_bundle_fails(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b", lane_id="linux-x86_64-other")
    status, message, _, _ = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.FAIL
    assert "a CTest bundle for 'linux-x86_64-other', not linux-x86_64-fake" in message


@needs_ctest
def test_a_passing_suite_reports_what_the_raw_log_says(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.PASS, message
    assert "4 passed, 0 failed, 0 skipped, 0 not run, 1 excluded (reasons in the lane spec) of 5 registered" in message
    counts, metrics = upstream_ctest.recompute(ctx.logs_dir)
    assert counts == dict(step.result.counts)
    assert counts["tests_passed"] == 4 and counts["tests_excluded"] == 1
    assert set(metrics) == {"test_seconds", "wall_seconds"}
    assert upstream_ctest.problems(ctx.logs_dir) == []
    # ctest ran as a tracked child of the run (the cleanup check proves it is gone).
    assert len(ctx.tracker.pids) == 1
    # Every raw file it wrote is digested with the step.
    names = {p.name for p in step.extra_logs}
    assert names == {upstream_ctest.CTEST_LOG, upstream_ctest.MANIFEST, upstream_ctest.REPORT_PB, upstream_ctest.REPORT_JSON}
    assert {p.name for p in ctx.logs_dir.iterdir()} == names | {"upstream_ctest.log", "upstream_ctest.exit"}


@needs_ctest
def test_a_failing_test_fails_the_step_by_name(tmp_path):
    scripts = dict(fake_bundle.SCRIPTS, **{"test-tok": 'echo "expected [1, 2] got [1, 3]"; exit 1'})
    bundle = fake_bundle.make_bundle(tmp_path / "b", scripts)
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.FAIL
    assert "test-tok-llama: FAILED (***Failed)" in message
    assert step.result.counts["tests_failed"] == 1
    assert "expected [1, 2] got [1, 3]" in step.log_path.read_text()
    assert any("test-tok-llama" in p for p in upstream_ctest.problems(ctx.logs_dir))


@needs_ctest
def test_edited_raw_files_change_the_figures_or_the_verdict(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    status, _, _, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.PASS
    logs = ctx.logs_dir
    # A CTest report whose totals are not the raw log's is refused.
    report_json = logs / upstream_ctest.REPORT_JSON
    forged = json.loads(report_json.read_text())
    forged["totals"]["passed"] = 5
    report_json.write_text(json.dumps(forged))
    assert any("totals.passed: report says 5, the raw log gives 4" in p for p in upstream_ctest.problems(logs))
    # A result line edited from passed to failed no longer agrees with ctest's own summary line:
    # the figures cannot be re-derived, which the audit reports (never a pass).
    ctest_log = logs / upstream_ctest.CTEST_LOG
    ctest_log.write_text(ctest_log.read_text().replace("test-chat ......", "test-chat ...***Failed"))
    with pytest.raises(ctest_run.RunError, match="the summary says 0 failed, the result lines say 1"):
        upstream_ctest.recompute(logs)


@needs_ctest
def test_a_nonzero_ctest_exit_is_a_problem_even_when_every_line_passed(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    _, _, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    text = step.log_path.read_text()
    step.log_path.write_text(text.replace("ctest_exit=0", "ctest_exit=8"))
    assert "ctest exited 8" in upstream_ctest.problems(ctx.logs_dir)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
