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


# Holds a staging dir's flock as its owner would, from another process (another PID namespace, for
# all the sweeper can tell: the pid in the dir's name is one it cannot see).
FLOCK_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(60)
"""
INVISIBLE_OWNER = "p999999999s1"  # above pid_max: no such process anywhere


def _staging(tmp: pathlib.Path, suffix: str) -> pathlib.Path:
    d = tmp / f"lanes-runner-{INVISIBLE_OWNER}-{suffix}"
    d.mkdir()
    (d / "work.txt").write_text("a live run's file\n")
    return d


def test_staging_whose_flock_is_held_is_not_swept_though_its_owner_pid_is_invisible(tmp_path):
    live = _staging(tmp_path, "live")
    dead = _staging(tmp_path, "dead")
    (dead / run_lock.STAGING_FLOCK).write_text("")  # its holder exited: the flock is free
    holder = subprocess.Popen([sys.executable, "-c", FLOCK_HOLDER, str(live / run_lock.STAGING_FLOCK)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert not run_lock.same_process(999999999, 1)
        swept = run_lock.sweep_stale_staging(tmp_path)
        assert live.is_dir() and (live / "work.txt").is_file(), swept
        assert not dead.exists() and len(swept) == 1 and str(dead) in swept[0]
    finally:
        holder.kill()
        holder.wait()
    # Its owner gone (the kernel dropped the flock): now it is swept.
    assert run_lock.sweep_stale_staging(tmp_path) and not live.exists()


def test_own_staging_dir_is_held_against_a_sweeper_in_another_process(tmp_path):
    mine = run_lock.make_staging_dir("lanes-runner-", tmp_path)
    assert (mine / run_lock.STAGING_FLOCK).is_file()
    sweep = f"import pathlib; from tools.runner import run_lock; print(run_lock.sweep_stale_staging(pathlib.Path({str(tmp_path)!r})))"
    out = subprocess.run([sys.executable, "-c", sweep], env=_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out
    assert mine.is_dir()
    run_lock.release_staging(mine)
    out = subprocess.run([sys.executable, "-c", sweep], env=_env(), capture_output=True, text=True, timeout=60)
    assert str(mine) in out.stdout and not mine.exists(), out


def test_staging_without_a_flock_file_is_swept_only_when_old_and_its_owner_is_gone(tmp_path):
    young = _staging(tmp_path, "young")  # e.g. between mkdtemp and taking the flock
    old = _staging(tmp_path, "old")  # an older runner's, killed long ago
    past = time.time() - run_lock.UNLOCKED_STAGING_MIN_AGE_S - 60
    os.utime(old, (past, past))
    run_lock.sweep_stale_staging(tmp_path)
    assert young.is_dir() and not old.exists()


def test_another_users_run_is_named_and_never_to_be_killed():
    other = {"runner_pid": 4321, "uid": os.getuid() + 1, "user": "alice"}
    message = run_lock.cleanup_command(other)
    assert "alice" in message and f"uid {os.getuid() + 1}" in message and "kill" not in message, message
    mine = {"runner_pid": 4321, "uid": os.getuid()}
    assert "kill -TERM 4321" in run_lock.cleanup_command(mine)


def test_the_lock_names_its_user(lock_dir):
    lock = run_lock.RunLock(run_lock.lock_path("cpu"), "r", "linux-x86_64-cpu", "cpu", 0, [], "")
    assert lock.data["uid"] == os.getuid() and lock.data["user"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
