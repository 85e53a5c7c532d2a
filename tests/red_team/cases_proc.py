"""Issue 23 classes 6 (environment), 8 and 13: what a certifier's process environment, a lane's
daemon and a neighbouring sandboxed test can do to a run, over fake lanes."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import time

from tests.red_team.case import RedTeamCase, Refusal
from tools.runner import run_lock
from tools.runner.checks import cleanup
from tools.runner.context import RunContext
from tools.runner.lane_spec import load_lane
from tools.runner.steps import Step
from tools.runner.testing import fake_lane

CR = cleanup.CR


@contextlib.contextmanager
def _environ(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ctx(tmp: pathlib.Path) -> RunContext:
    logs = tmp / "out" / "logs"
    logs.mkdir(parents=True)
    (tmp / "scratch").mkdir()
    lane_dir = fake_lane.make_lane(tmp / "lane")
    cfg = fake_lane.config(tmp, lane_dir, None, None)
    return RunContext(config=cfg, lane=load_lane(fake_lane.SPEC, "cpu"), logs_dir=logs, scratch_dir=tmp / "scratch")


def _binary(path: pathlib.Path, script: str) -> pathlib.Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def _environment_records(ctx: RunContext) -> list[dict]:
    text = cleanup.steps_log_path(ctx.logs_dir).read_text()
    return [json.loads(line[len("environment "):]) for line in text.splitlines() if line.startswith("environment {")]


def ld_preload_in_the_certifiers_environment(tmp: pathlib.Path) -> Refusal:
    """The certifier's shell exports LD_PRELOAD (and friends) before starting the runner."""
    injected = {"LD_PRELOAD": str(tmp / "libevil.so"), "LD_AUDIT": str(tmp / "libaudit.so"),
                "LD_LIBRARY_PATH": str(tmp / "evil-libs"), "GGML_BACKEND_PATH": str(tmp / "libggml-evil.so")}
    with _environ(**injected):
        ctx = _ctx(tmp)
        try:
            binary = _binary(ctx.config.lane_dir / "bin" / "llama-simple", "env\n")
            before = len(ctx.tracker.pids)
            step = Step("graph_smoke", ctx.logs_dir, ctx.tracker)
            res = step.run([binary], 30)
            step.finish(CR.PASS, "fake")
            cleanup.after_step(ctx, "graph_smoke", ctx.tracker.pids[before:])
        finally:
            ctx.tracker.stop_all(grace_s=1.0)
    seen = {line.split("=", 1)[0] for line in res.output.splitlines() if "=" in line}
    assert not seen & set(injected), f"the lane process saw {sorted(seen & set(injected))}"
    [record] = _environment_records(ctx)
    assert set(injected) <= set(record["dropped"]), record["dropped"]
    assert not any(set(injected) & set(e["env"]) for e in record["environments"]), record
    assert cleanup.environment_problems(ctx.logs_dir) == [], "a clean environment failed cleanup"
    return Refusal("runner environment",
                   f"cleanup.steps.log records the environment of graph_smoke's {binary.name}: "
                   f"{', '.join(sorted(record['environments'][0]['env']))}; dropped: "
                   f"{', '.join(n for n in record['dropped'] if n in injected)}")


def double_forked_setsid_child(tmp: pathlib.Path) -> Refusal:
    """A lane binary that exits 0 after leaving a daemon behind (double fork + setsid, output closed)."""
    ctx = _ctx(tmp)
    try:
        binary = _binary(ctx.config.lane_dir / "bin" / "llama-simple",
                         "( setsid sleep 300 </dev/null >/dev/null 2>&1 & )\necho done\n")
        before = len(ctx.tracker.pids)
        step = Step("graph_smoke", ctx.logs_dir, ctx.tracker)
        assert step.run([binary], 30).exit_code == 0
        step.finish(CR.PASS, "the binary exited 0")
        deadline = time.monotonic() + 10
        while not (survivors := cleanup.run_id_processes(ctx.tracker.run_id)[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert survivors, "the daemon was not started"
        cleanup.after_step(ctx, "graph_smoke", ctx.tracker.pids[before:])
        final = Step("cleanup", ctx.logs_dir, ctx.tracker)
        status, message = cleanup.run_cleanup(ctx, final)
        final.finish(status, message)
    finally:
        ctx.tracker.stop_all(grace_s=1.0)
    alive = [p for p in survivors if run_lock.start_time(p) is not None]
    assert not alive, f"the daemon {alive} outlived the run's cleanup"
    assert status != CR.PASS, f"cleanup passed: {message}"
    assert all(f"after graph_smoke: pid {p} exe " in message for p in survivors), message
    return Refusal("cleanup", message)


# Holds a staging dir's flock from another process, as a live run seen from another PID namespace.
_FLOCK_HOLDER = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
                 "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('ready', flush=True)\ntime.sleep(60)\n")


def staging_of_a_live_run_in_another_pid_namespace(tmp: pathlib.Path) -> Refusal:
    """A sandboxed `bazel test` (own PID namespace, the real /tmp) sweeps the temp dir while a
    certification runs: the run's owner pid (in the dir's name) is invisible to it."""
    staging = tmp / "lanes-runner-p999999999s1-live"  # a pid above pid_max: visible nowhere
    staging.mkdir()
    (staging / "model.gguf").write_text("the live run's file\n")
    holder = subprocess.Popen([sys.executable, "-c", _FLOCK_HOLDER, str(staging / run_lock.STAGING_FLOCK)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert not run_lock.same_process(999999999, 1)
        swept = run_lock.sweep_stale_staging(tmp)
        assert staging.is_dir() and (staging / "model.gguf").is_file(), f"the live run's staging was swept: {swept}"
    finally:
        holder.kill()
        holder.wait()
    assert run_lock.sweep_stale_staging(tmp) and not staging.exists(), "a dead run's staging was kept"
    return Refusal("run_lock", f"sweep_stale_staging kept {staging.name}: owner pid 999999999 is invisible, but "
                               f"its {run_lock.STAGING_FLOCK} is held (by pid {holder.pid}); swept once free")


CASES = [
    RedTeamCase(6, "LD_PRELOAD in the certifier's environment", ld_preload_in_the_certifiers_environment),
    RedTeamCase(8, "double-forked setsid child of a lane binary", double_forked_setsid_child),
    RedTeamCase(13, "staging of a live run in another PID namespace", staging_of_a_live_run_in_another_pid_namespace),
]
