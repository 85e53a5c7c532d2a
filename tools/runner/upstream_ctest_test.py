"""The runner's upstream_ctest step: required where the lane spec says so, figures and verdict from
ctest's raw log, a failing, missing or foreign suite fails the step (real ctest, fake bundle)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
from google.protobuf import json_format

from proto import ctest_report_pb2 as ctest_pb
from proto import runner_report_pb2 as rpb
from tools.ctest import ctest_run, fake_bundle
from tools.runner import log_blocks
from tools.runner import report as report_lib
from tools.runner.checks import upstream_ctest
from tools.runner.config import RunnerConfig
from tools.runner.context import RunContext
from tools.runner.lane_spec import Lane
from tools.runner.steps import Step

CR = rpb.CheckResult


def _lane(in_certification: bool, lane_id: str = fake_bundle.LANE_ID,
          excluded: dict[str, str] | None = None) -> Lane:
    return Lane(lane_id=lane_id, alias="fake", os="linux", arch="x86_64", backend="cuda" if in_certification else "cpu",
                sdk="", targets=(), log_evidence=(), ggml_libs=(), ctest_in_certification=in_certification,
                ctest_excluded=dict(fake_bundle.SPEC["excluded"]) if excluded is None else excluded)


def _run(tmp: pathlib.Path, lane: Lane, bundle: pathlib.Path | None,
         ctest_timeout_s: float = 3600.0) -> tuple[int, str, Step, RunContext]:
    tmp.mkdir(parents=True, exist_ok=True)
    model = tmp / "tiny.gguf"
    model.write_text("GGUF")
    spec = fake_bundle.write_spec(tmp / "spec.json", lane.lane_id)
    cfg = RunnerConfig(lane=lane.lane_id, lane_dir=fake_bundle.lane_dir(tmp), evidence=None, spec=spec,
                       model=model, out_dir=tmp / "out", report=tmp / "out" / "runner_report.pb", ctest_bundle=bundle,
                       ctest_timeout_s=ctest_timeout_s)
    logs = tmp / "out" / "logs"
    logs.mkdir(parents=True)
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp / "scratch")
    step = Step(upstream_ctest.STEP, logs, ctx.tracker)
    status, message = upstream_ctest.run_upstream_ctest(ctx, step)
    step.finish(status, message)
    # What the runner does next: digest every raw file the step lists (a listed file that is not
    # there would crash the run instead of failing the check).
    for path in [step.log_path, step.exit_path, *step.extra_logs]:
        report_lib.log_digest(path, tmp / "out")
    return status, message, step, ctx


def _set_config(step: Step, key: str, value: str) -> None:
    """Tampers with the step's configuration file (what an edited run directory would carry)."""
    values = log_blocks.load_config(step.config_path)
    log_blocks.write_config(step.config_path, {**values, key: value})


def test_a_lane_whose_suite_gates_in_ci_records_not_applicable_never_a_pass(tmp_path):
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=False), None)
    assert status == CR.SKIPPED and not step.result.required
    assert "in CI (//tests:fake_ctest_test)" in message
    assert upstream_ctest.recompute(ctx.logs_dir) == ({}, {})


def test_a_lane_that_needs_the_suite_fails_without_a_bundle(tmp_path):
    status, message, step, _ = _run(tmp_path, _lane(in_certification=True), None)
    assert status == CR.FAIL and step.result.required
    assert "no --ctest_bundle" in message and "build //lanes:fake_ctest" in message


def test_another_lanes_bundle_fails(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b", lane_id="linux-x86_64-other")
    status, message, _, _ = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.FAIL
    assert "a CTest bundle for 'linux-x86_64-other', not linux-x86_64-fake" in message


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
    assert names == {upstream_ctest.CTEST_LOG, upstream_ctest.MANIFEST, upstream_ctest.REPORT_PB, upstream_ctest.REPORT_JSON,
                     "upstream_ctest.config.json"}
    assert {p.name for p in ctx.logs_dir.iterdir()} == names | {"upstream_ctest.log", "upstream_ctest.exit"}


def test_a_failing_test_fails_the_step_by_name(tmp_path):
    scripts = dict(fake_bundle.SCRIPTS, **{"test-tok": 'echo "expected [1, 2] got [1, 3]"; exit 1'})
    bundle = fake_bundle.make_bundle(tmp_path / "b", scripts)
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.FAIL
    assert "test-tok-llama: FAILED (***Failed)" in message
    assert step.result.counts["tests_failed"] == 1
    assert "expected [1, 2] got [1, 3]" in step.log_path.read_text()
    assert any("test-tok-llama" in p for p in upstream_ctest.problems(ctx.logs_dir))


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


def test_a_nonzero_ctest_exit_is_a_problem_even_when_every_line_passed(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    _, _, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    _set_config(step, "ctest_exit", "8")
    assert "ctest exited 8" in upstream_ctest.problems(ctx.logs_dir)


def test_a_suite_that_outlasts_its_bound_fails_with_its_log_kept(tmp_path):
    scripts = dict(fake_bundle.SCRIPTS, **{"test-chat": "sleep 60"})
    bundle = fake_bundle.make_bundle(tmp_path / "b", scripts)
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle, ctest_timeout_s=2)
    assert status == CR.FAIL, message
    assert "(timed out at 2s)" in step.log_path.read_text()
    # The truncated log is kept and digested; the report it could not yield is not listed.
    assert {p.name for p in step.extra_logs} == {upstream_ctest.CTEST_LOG, upstream_ctest.MANIFEST, "upstream_ctest.config.json"}
    assert not dict(step.result.counts)
    assert upstream_ctest.recompute(ctx.logs_dir) == ({}, {})


def test_a_bundle_whose_exclusions_are_not_the_lane_specs_fails(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    lane = _lane(in_certification=True, excluded={"test-download": "network: downloads a model",
                                                    "test-chat": "a reason the bundle does not have"})
    status, message, _, _ = _run(tmp_path, lane, bundle)
    assert status == CR.FAIL
    assert "exclusions are not the lane spec's (test-chat)" in message and "rebuild //lanes:fake_ctest" in message


def test_raw_files_that_disagree_with_themselves_are_problems(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    status, _, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.PASS
    logs = ctx.logs_dir
    # A config line in the log (e.g. in a test's output) changes nothing: the configuration is the
    # runner's file, and a file that names a key twice is refused.
    with step.log_path.open("a") as f:
        f.write("# lanes-config ctest_exit=3\n")
    assert upstream_ctest.problems(logs) == []
    saved = step.config_path.read_text()
    step.config_path.write_text(saved.replace('"ctest_exit": "0"', '"ctest_exit": "0", "ctest_exit": "3"'))
    with pytest.raises(log_blocks.StepConfigError, match="'ctest_exit' given twice"):
        upstream_ctest.problems(logs)
    step.config_path.write_text(saved)
    # The kept .pb must be the .json's report.
    assert upstream_ctest.problems(logs) == []
    kept = logs / upstream_ctest.REPORT_PB
    forged = ctest_pb.CTestReport.FromString(kept.read_bytes())
    forged.totals.passed += 1
    kept.write_bytes(forged.SerializeToString())
    assert f"{upstream_ctest.REPORT_PB} and {upstream_ctest.REPORT_JSON} are not the same report" in upstream_ctest.problems(logs)
    # The spec's exclusions, logged by the runner, must be the bundle's.
    kept.write_bytes(json_format.Parse((logs / upstream_ctest.REPORT_JSON).read_text(), ctest_pb.CTestReport()).SerializeToString())
    step.config_path.write_text(step.config_path.read_text().replace('{\\"test-download\\"', '{\\"test-gen\\"'))
    assert any("exclusions are not the lane spec's" in p for p in upstream_ctest.problems(logs))
    # A kept manifest with a repeated key is refused outright.
    manifest = logs / upstream_ctest.MANIFEST
    manifest.write_text(manifest.read_text().replace('{', '{"lane_id": "linux-x86_64-other", ', 1))
    with pytest.raises(ctest_run.RunError, match="appear twice"):
        upstream_ctest.problems(logs)


def test_a_bundle_of_one_echo_test_plus_the_spec_exclusions_fails(tmp_path):
    # Issue 23 class 10: ctest passes the one test it was given; the suite is not the spec's.
    bundle = fake_bundle.make_bundle(tmp_path / "b", scripts={}, ctest_file=fake_bundle.ECHO_CTEST_FILE)
    status, message, step, ctx = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.FAIL, message
    assert "1 passed, 0 failed" in message
    assert "test test-ok runs '/bin/echo', not a test executable the lane spec names" in message
    assert ("4 test executable(s) the lane spec names ran in no passed test: test-autorelease, test-chat, test-gen, "
            "test-tok") in message
    assert any("ran in no passed test" in p for p in upstream_ctest.problems(ctx.logs_dir))


def test_a_spec_target_whose_tests_did_not_pass_or_run_fails(tmp_path):
    # A test the manifest drops (or that ctest never ran) leaves its executable unrun.
    ctest_file = fake_bundle.CTEST_FILE.replace("add_test([=[test-gen]=]", "#add_test([=[test-gen]=]")
    bundle = fake_bundle.make_bundle(tmp_path / "b", ctest_file=ctest_file)
    status, message, _, _ = _run(tmp_path, _lane(in_certification=True), bundle)
    assert status == CR.FAIL and "1 test executable(s) the lane spec names ran in no passed test: test-gen" in message


def test_test_binaries_must_be_the_ones_the_bundle_recorded(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    (bundle / "bin" / "test-chat").write_text("#!/bin/sh\necho chat ok\n")  # swapped after bundling
    status, message, _, _ = _run(tmp_path / "swapped", _lane(in_certification=True), bundle)
    assert status == CR.FAIL and "bin/test-chat: sha256" in message and "is not the manifest's" in message
    # A bundle made before the manifest carried digests cannot be bound.
    bundle = fake_bundle.make_bundle(tmp_path / "c")
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["binaries"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    status, message, _, _ = _run(tmp_path / "old", _lane(in_certification=True), bundle)
    assert status == CR.FAIL and "no 'binaries' digests" in message
    # The digests the step logged must be the kept manifest's.
    bundle = fake_bundle.make_bundle(tmp_path / "d")
    status, _, step, ctx = _run(tmp_path / "logged", _lane(in_certification=True), bundle)
    assert status == CR.PASS
    _set_config(step, "test_binary.test-chat", "sha256:" + "0" * 64)
    assert any(p.startswith("test binary test-chat: ran as sha256:0000") for p in upstream_ctest.problems(ctx.logs_dir))


def test_a_lane_spec_without_ctest_targets_fails(tmp_path):
    bundle = fake_bundle.make_bundle(tmp_path / "b")
    lane = _lane(in_certification=True)
    spec = {k: v for k, v in fake_bundle.SPEC.items() if k != "targets"}
    model = tmp_path / "tiny.gguf"
    model.write_text("GGUF")
    cfg = RunnerConfig(lane=lane.lane_id, lane_dir=fake_bundle.lane_dir(tmp_path), evidence=None,
                       spec=fake_bundle.write_spec(tmp_path / "spec.json", lane.lane_id, spec), model=model,
                       out_dir=tmp_path / "out", report=tmp_path / "out" / "r.pb", ctest_bundle=bundle)
    logs = tmp_path / "out" / "logs"
    logs.mkdir(parents=True)
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp_path / "scratch")
    status, message = upstream_ctest.run_upstream_ctest(ctx, Step(upstream_ctest.STEP, logs, ctx.tracker))
    assert status == CR.FAIL and "names no CTest targets" in message


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
