"""Cleanup is checked after every step: a child left running by one step fails that step's cleanup
sub-result and the final cleanup check, with per-step figures recomputed from the logs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tools.runner import run_lock, steps
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


# A lane binary that daemonises: a double fork (subshell, background job) and setsid, its output
# closed so that the step does not wait for it, then the binary exits as if it were done.
DAEMONISING = "#!/bin/sh\n( setsid sleep 300 </dev/null >/dev/null 2>&1 & )\necho done\n"


def _daemonising_binary(path):
    path.write_text(DAEMONISING)
    path.chmod(0o755)
    return path


def _wait_for_run_processes(run_id, n=1, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = cleanup.run_id_processes(run_id)[0]
        if len(found) >= n:
            return found
        time.sleep(0.05)
    return cleanup.run_id_processes(run_id)[0]


def test_double_forked_setsid_child_fails_that_steps_cleanup_and_is_killed(ctx, tmp_path):
    before = len(ctx.tracker.pids)
    step = Step("graph_smoke", ctx.logs_dir, ctx.tracker)
    res = step.run([_daemonising_binary(tmp_path / "llama-simple")], 30)
    step.finish(cleanup.CR.PASS, "the binary itself exited 0")
    assert res.exit_code == 0 and not res.timed_out
    [survivor] = _wait_for_run_processes(ctx.tracker.run_id)
    deadline = time.monotonic() + 10
    while not (exe := os.readlink(f"/proc/{survivor}/exe")).endswith("/sleep") and time.monotonic() < deadline:
        time.sleep(0.02)  # setsid(1) has yet to exec sleep
    assert survivor not in ctx.tracker.pids and os.getsid(survivor) == survivor  # its own session
    cleanup.after_step(ctx, "graph_smoke", ctx.tracker.pids[before:])
    assert run_lock.start_time(survivor) is None, "the daemon survived its step's cleanup"
    status, message, _ = _final(ctx)
    assert status == cleanup.CR.FAIL
    assert f"after graph_smoke: pid {survivor} exe {json.dumps(exe)} of this run" in message, message
    counts, _ = cleanup.recompute(ctx.logs_dir)
    assert counts["step.graph_smoke.processes_left"] == 1 and counts["steps_failed"] == 1
    assert counts["processes_left"] == 0  # killed: the end of the run is clean again


def test_environ_scan_finds_a_daemon_outside_the_runners_tree(ctx, tmp_path):
    """Without the subreaper (or after the daemon re-parented past it) only LANES_RUN_ID finds it."""
    assert steps.become_child_subreaper(False)
    try:
        env = dict(os.environ, **{run_lock.RUN_ID_ENV: ctx.tracker.run_id})
        subprocess.run([str(_daemonising_binary(tmp_path / "d"))], env=env, check=True, stdout=subprocess.DEVNULL)
        [daemon] = _wait_for_run_processes(ctx.tracker.run_id)
    finally:
        steps.become_child_subreaper(True)
    try:
        assert daemon not in cleanup.descendants(os.getpid())
        pids, read, unreadable = cleanup.run_id_processes(ctx.tracker.run_id)
        assert pids == [daemon] and read > 0 and unreadable >= 0
        cleanup.after_step(ctx, "speed", [])
        assert _wait_for_run_processes(ctx.tracker.run_id, timeout=0.5) == []
        text = cleanup.steps_log_path(ctx.logs_dir).read_text()
        assert f"environ pid {daemon} exe " in text and "environ scan: " in text
        _, _, problems = cleanup.evaluate(ctx.logs_dir)
        assert any(f"after speed: pid {daemon} exe " in p and "LANES_RUN_ID" in p for p in problems), problems
    finally:
        with contextlib.suppress(OSError):
            os.kill(daemon, signal.SIGKILL)


def test_a_lane_controlled_name_cannot_forge_a_log_line(tmp_path):
    exe = '/tmp/a": gone\ntracked pid 9: gone'
    (tmp_path / cleanup.STEPS_LOG).write_text(
        "# lanes-config backend=cpu\n## x (1 processes started)\ntracked pid 5: gone\n"
        f"descendant pid 9 exe {json.dumps(exe)}: /proc/9/stat: 9 (x) S 1 9 9 0\n")
    (tmp_path / "cleanup.log").write_text("## final\ntracked pid 5: gone\ntemp dir /t: removed\n")
    _, _, problems = cleanup.evaluate(tmp_path)
    assert problems == [f"after x: pid 9 exe {json.dumps(exe)} of this run, below the runner, was still running (killed)"]


def test_each_steps_environment_is_logged_and_one_with_ld_preload_fails_cleanup(ctx, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/tmp/libevil.so")
    before = len(ctx.tracker.pids)
    step = Step("graph_smoke", ctx.logs_dir, ctx.tracker)
    step.run(["true"], 30)
    step.finish(cleanup.CR.PASS, "test")
    cleanup.after_step(ctx, "graph_smoke", ctx.tracker.pids[before:])
    text = cleanup.steps_log_path(ctx.logs_dir).read_text()
    [line] = [line for line in text.splitlines() if line.startswith("environment ")]
    record = json.loads(line[len("environment "):])
    assert record["step"] == "graph_smoke" and "LD_PRELOAD" in record["dropped"]
    assert record["environments"][0]["commands"] == ["true"] and "LD_PRELOAD" not in record["environments"][0]["env"]
    assert cleanup.evaluate(ctx.logs_dir)[0]["child_environments"] == 1
    # The same record, had LD_PRELOAD reached the process:
    record["environments"][0]["env"]["LD_PRELOAD"] = "/tmp/libevil.so"
    cleanup.steps_log_path(ctx.logs_dir).write_text(text.replace(line, "environment " + json.dumps(record)))
    status, message, _ = _final(ctx)
    assert status == cleanup.CR.FAIL and "environment of graph_smoke: LD_PRELOAD reached true" in message, message

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
