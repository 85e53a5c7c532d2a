"""Cleanup is checked after every step: a child left running by one step fails that step's cleanup
sub-result and the final cleanup check, with per-step figures recomputed from the logs."""

from __future__ import annotations

import sys

import pytest

from tools.runner.checks import cleanup
from tools.runner.context import RunContext
from tools.runner.lane_spec import load_lane
from tools.runner.steps import Step
from tools.runner.testing import fake_lane


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setattr(cleanup, "GRACE_S", 0.3)
    logs = tmp_path / "out" / "logs"
    logs.mkdir(parents=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = fake_lane.config(tmp_path, tmp_path / "lane", None, None)
    c = RunContext(config=cfg, lane=load_lane(fake_lane.SPEC, "cpu"), logs_dir=logs, scratch_dir=scratch)
    yield c
    c.tracker.stop_all(grace_s=1.0)


def _final(ctx):
    step = Step("cleanup", ctx.logs_dir, ctx.tracker)
    status, message = cleanup.run_cleanup(ctx, step)
    step.finish(status, message)
    return status, message, step


def test_leftover_of_one_step_fails_with_per_step_figures(ctx):
    before = len(ctx.tracker.pids)
    done = ctx.tracker.popen(["true"])
    done.wait()
    cleanup.after_step(ctx, "graph_smoke", ctx.tracker.pids[before:])
    before = len(ctx.tracker.pids)
    left = ctx.tracker.popen(["sleep", "60"])  # e.g. a server the step forgot to stop
    cleanup.after_step(ctx, "speed", ctx.tracker.pids[before:])
    # The leftover was recorded, then stopped so later steps run clean.
    assert left.poll() is not None
    status, message, step = _final(ctx)
    assert status == cleanup.CR.FAIL
    assert f"after speed: processes still running: [{left.pid}]" in message
    counts, metrics = cleanup.recompute(ctx.logs_dir)
    assert counts["step.graph_smoke.processes_started"] == 1 and counts["step.graph_smoke.processes_left"] == 0
    assert counts["step.speed.processes_started"] == 1 and counts["step.speed.processes_left"] == 1
    assert counts["steps_checked"] == 2 and counts["steps_failed"] == 1
    assert counts["processes_left"] == 0 and counts["processes_started"] == 2
    # The check's figures are recompute's.
    assert dict(step.result.counts) == counts and dict(step.result.metrics) == metrics
    assert cleanup.steps_log_path(ctx.logs_dir) in step.extra_logs


def test_clean_run_passes(ctx):
    before = len(ctx.tracker.pids)
    ctx.tracker.popen(["true"]).wait()
    cleanup.after_step(ctx, "concurrency", ctx.tracker.pids[before:])
    status, message, _ = _final(ctx)
    assert status == cleanup.CR.PASS, message
    assert not ctx.scratch_dir.exists()


def test_device_memory_not_back_fails_that_step(tmp_path):
    q = "$ " + " ".join(cleanup.NVIDIA_QUERY)
    (tmp_path / cleanup.STEPS_LOG).write_text(
        "# lanes-config backend=cuda\n# lanes-config gpu_index=0\n# lanes-config memory_tolerance_mib=64.0\n"
        f"## baseline (device memory before any lane binary ran)\n{q}\nNVIDIA H200, 9.0, 580.1, 143771 MiB, 0 MiB\n# exit 0 after 0s\n"
        f"## speed (1 processes started)\ntracked pid 11: gone\n{q}\nNVIDIA H200, 9.0, 580.1, 143771 MiB, 8200 MiB\n# exit 0 after 0s\n")
    (tmp_path / "cleanup.log").write_text(
        f"## final (every process the run started)\ntracked pid 11: gone\ntemp dir /tmp/x: removed\n"
        f"{q}\nNVIDIA H200, 9.0, 580.1, 143771 MiB, 1 MiB\n# exit 0 after 0s\n")
    counts, metrics, problems = cleanup.evaluate(tmp_path)
    assert metrics["step.speed.memory_used_mib"] == 8200 and metrics["memory_before_mib"] == 0
    assert metrics["memory_after_mib"] == 1 and counts["steps_failed"] == 1
    assert problems == ["after speed: device memory used 8200 MiB > baseline 0 + 64 MiB"]


def test_zombie_and_gone_are_not_leftovers(tmp_path):
    (tmp_path / cleanup.STEPS_LOG).write_text(
        "# lanes-config backend=cpu\n## x (2 processes started)\ntracked pid 5: gone\n"
        "tracked pid 6: /proc/6/stat: 6 (llama-server) Z 1 6 6 0\n")
    (tmp_path / "cleanup.log").write_text("## final\ntracked pid 5: gone\ntemp dir /t: removed\n")
    counts, _, problems = cleanup.evaluate(tmp_path)
    assert problems == [] and counts["step.x.processes_left"] == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
