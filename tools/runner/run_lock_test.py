"""The run lock is exclusive and per device (issue 15): one flock per GPU or CPU, whatever the lane."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time
import types

import pytest

from tools.runner import run_lock
from tools.runner.checks import preflight, preflight_devices

# A runner stand-in: takes the device lock, writes its JSON, starts `sleep` (own session, no
# PDEATHSIG: only a reaper ends it) and waits to be killed.
HOLDER = """
import os, pathlib, subprocess, sys, time
from tools.runner import run_lock
path, run_id, lane, backend, watch = pathlib.Path(sys.argv[1]), *sys.argv[2:]
fd = run_lock.try_flock(path)
if fd is None:
    print("busy", flush=True)
    sys.exit(3)
lock = run_lock.RunLock(path, run_id, lane, backend, 0, [], "", flock_fd=fd)
lock.write()
child = subprocess.Popen(["sleep", "60"], start_new_session=True, env=dict(os.environ, LANES_RUN_ID=run_id))
lock.add_child(child.pid, "sleep")
if watch == "watch":
    lock.start_watchdog()
print("ready", child.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(run_lock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    return tmp_path / "locks"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def _holder(path: pathlib.Path, run_id: str, lane: str, backend: str, watch: bool = False):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), run_id, lane, backend,
                             "watch" if watch else "-"], stdout=subprocess.PIPE, text=True, env=_env())
    words = proc.stdout.readline().split()
    return proc, words


def _wait_for(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.02)
    return pred()


def _ctx(tmp_path: pathlib.Path, lane_id: str, backend: str, gpu_index: int = 0):
    ctx = types.SimpleNamespace(
        config=types.SimpleNamespace(gpu_index=gpu_index, out_dir=tmp_path / "out"),
        lane=types.SimpleNamespace(lane_id=lane_id, backend=backend),
        tracker=types.SimpleNamespace(run_id=run_lock.new_run_id(), lock=None),
        scratch_dir=tmp_path / "scratch")
    lines: list[str] = []
    step = types.SimpleNamespace(log=lines.append, result=types.SimpleNamespace(counts={}, metrics={}))
    return ctx, step, lines


def test_lock_is_per_device_not_per_lane():
    assert run_lock.lock_path("cuda", 0) == run_lock.lock_path("vulkan", 0)
    assert run_lock.lock_path("cuda", 0).name == "gpu0.lock.json"
    assert run_lock.lock_path("cuda", 1).name == "gpu1.lock.json"
    assert run_lock.lock_path("cpu").name == "cpu.lock.json"
    assert run_lock.flock_path(run_lock.lock_path("cuda", 0)).name == "gpu0.flock"


def test_second_acquisition_in_one_process_is_refused():
    path = run_lock.lock_path("cpu")
    fd = run_lock.try_flock(path)
    assert fd is not None
    assert run_lock.try_flock(path) is None  # flock is per open file: the same process is refused too
    run_lock.release_flock(path, fd)
    assert not run_lock.flock_path(path).exists()
    fd = run_lock.try_flock(path)
    assert fd is not None
    run_lock.release_flock(path, fd)


def test_second_process_is_refused_while_first_holds(lock_dir):
    path = run_lock.lock_path("cuda", 0)
    first, words = _holder(path, "run-a", "linux-x86_64-cuda.gpu0", "cuda")
    try:
        assert words[0] == "ready", words
        second, words2 = _holder(path, "run-b", "linux-x86_64-vulkan.gpu0", "vulkan")
        assert second.wait(timeout=30) == 3 and words2 == ["busy"]
        assert run_lock.try_flock(path) is None
        assert run_lock.read_lock(path)["run_id"] == "run-a"  # the refused run wrote nothing
    finally:
        first.kill()
        first.wait()
        with contextlib.suppress(OSError):
            os.kill(int(words[1]), signal.SIGKILL)


def test_cuda_and_vulkan_on_gpu0_share_one_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock.RunLock, "start_watchdog", lambda self: None)
    ctx_a, step_a, _ = _ctx(tmp_path, "linux-x86_64-cuda.gpu0", "cuda")
    preflight.check_leftovers(ctx_a, step_a)
    try:
        ctx_b, step_b, _ = _ctx(tmp_path, "linux-x86_64-vulkan.gpu0", "vulkan")
        with pytest.raises(preflight_devices.Failed, match=r"another run is using device gpu0.*kill -TERM"):
            preflight.check_leftovers(ctx_b, step_b)
        assert ctx_b.tracker.lock is None
        # The refused run did not touch the holder's lock.
        assert run_lock.read_lock(run_lock.lock_path("cuda", 0))["run_id"] == ctx_a.tracker.run_id
        # GPU 1 and the CPU are other devices.
        ctx_c, step_c, _ = _ctx(tmp_path, "linux-x86_64-vulkan.gpu1", "vulkan", gpu_index=1)
        preflight.check_leftovers(ctx_c, step_c)
        ctx_c.tracker.lock.release()
    finally:
        ctx_a.tracker.lock.release()
    ctx_b, step_b, _ = _ctx(tmp_path, "linux-x86_64-vulkan.gpu0", "vulkan")
    preflight.check_leftovers(ctx_b, step_b)  # free again once released
    assert step_b.result.counts == {}  # a normal release leaves nothing to reap
    ctx_b.tracker.lock.release()
    assert not list(run_lock.lock_dir().iterdir())


def test_next_run_reaps_a_sigkilled_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock.RunLock, "start_watchdog", lambda self: None)
    path = run_lock.lock_path("cuda", 0)
    holder, words = _holder(path, "run-dead", "linux-x86_64-cuda.gpu0", "cuda")
    assert words[0] == "ready", words
    orphan = int(words[1])
    try:
        ctx, step, lines = _ctx(tmp_path, "linux-x86_64-vulkan.gpu0", "vulkan")
        with pytest.raises(preflight_devices.Failed):
            preflight.check_leftovers(ctx, step)
        holder.kill()
        holder.wait()
        # The kernel dropped the flock; `sleep` inherited no fd that keeps it.
        assert run_lock.start_time(orphan) is not None
        ctx, step, lines = _ctx(tmp_path, "linux-x86_64-vulkan.gpu0", "vulkan")
        preflight.check_leftovers(ctx, step)
        assert step.result.counts["leftover_processes_killed"] == 1, lines
        assert any("previous run run-dead" in line for line in lines), lines
        assert _wait_for(lambda: run_lock.start_time(orphan) is None)
        assert run_lock.read_lock(path)["run_id"] == ctx.tracker.run_id
        ctx.tracker.lock.release()
    finally:
        with contextlib.suppress(OSError):
            os.kill(orphan, signal.SIGKILL)


def test_watchdog_reaps_its_own_sigkilled_run():
    path = run_lock.lock_path("cpu")
    holder, words = _holder(path, "run-w", "linux-x86_64-cpu", "cpu", watch=True)
    assert words[0] == "ready", words
    orphan = int(words[1])
    try:
        holder.kill()
        holder.wait()
        assert _wait_for(lambda: run_lock.start_time(orphan) is None), "the watchdog did not reap its run"
        assert _wait_for(lambda: not path.exists() and not run_lock.flock_path(path).exists())
    finally:
        with contextlib.suppress(OSError):
            os.kill(orphan, signal.SIGKILL)


def test_watchdog_leaves_another_runs_lock_alone():
    """A watchdog whose run's lock was taken over (a next run reaped it) must not touch the new one."""
    path = run_lock.lock_path("cpu")
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True, env=dict(os.environ, LANES_RUN_ID="other"))
    try:
        lock = run_lock.RunLock(path, "other", "linux-x86_64-cpu", "cpu", 0, [], "")
        lock.data["runner_pid"], lock.data["runner_start_time"] = 1, -5  # a dead runner
        lock.add_child(sleeper.pid, "sleep")
        r, w = os.pipe()
        subprocess.run([sys.executable, "-m", "tools.runner.run_lock", "--watch", str(path), "mine"],
                       stdin=r, env=_env(), timeout=30, check=True)
        os.close(r)
        os.close(w)  # EOF: the watchdog wakes up, finds a lock that is not its run's
        time.sleep(1.5)
        assert sleeper.poll() is None
        assert run_lock.read_lock(path)["run_id"] == "other"
    finally:
        sleeper.kill()
        sleeper.wait()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
