"""Issue 15: the main job (which runs the runner in-process) killed with SIGKILL inside every step and
inside the publish phase, against a fake CPU lane; then a disk-full evidence directory (a real 256 KiB
tmpfs when mount works) and a read-only one (a read-only bind mount; as root chmod would be ignored).

After each kill: no process of the run alive (every process carrying this test's FAULT_DIR in its
environment: children, grandchildren, the watchdog), no staging dir left after the next start, the
evidence tree digest and `git status` unchanged, and the next run passes. Prints a table.

The fake checks run real processes through the runner's ProcessTracker (a shell script per step,
`exec sleep` at the kill point; a fake server with a background grandchild for concurrency and
cancellation); preflight and cleanup are the real checks wrapped with such a process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve()
from tools.runner.config import CHECKS as STEPS  # noqa: E402  (every step, in run order)

PUBLISH_POINTS = ("publish:run-dir-staged", "publish:before-record")
SERVER_STEPS = ("concurrency", "cancellation")

FAKE_STEP = """#!/bin/sh
echo "fake step $1 pid $$"
if [ "$1" = "$FAULT_STEP" ]; then echo $$ > "$FAULT_DIR/at-$1"; exec sleep 60; fi
"""
# A server that, like a real one, outlives nothing: but it leaves a grandchild in its process group
# (PDEATHSIG reaches only direct children; the watchdog/preflight must take the group).
FAKE_SERVER = """#!/bin/sh
sleep 120 &
exec sleep 120
"""


# ---- the driver: `python fault_injection_test.py --driver ROOT` runs the main job with fake checks ----

def _driver(root: pathlib.Path) -> None:
    from proto import runner_report_pb2 as rpb
    from tools.core import atomic_files
    from tools.job import main_job
    from tools.runner import checks, runner
    from tools.runner.checks import artifact_integrity

    CR = rpb.CheckResult
    fault = os.environ.get("FAULT_STEP", "")
    fake_step, fake_server = str(root / "fakebin" / "fake-step"), str(root / "fakebin" / "fake-server")
    real = {c.name: c.run for c in checks.REGISTRY}

    def make(name):
        def check(ctx, step, rep):
            # The lane processes get a clean environment: the fault point is passed to them explicitly.
            ctx.tracker.extra_env.update({k: os.environ[k] for k in ("FAULT_DIR", "FAULT_STEP") if k in os.environ})
            server = ctx.tracker.popen([fake_server], stdout=subprocess.DEVNULL) if name in SERVER_STEPS else None
            message = f"fake {name}"
            try:
                if name == "preflight":
                    status, message = real[name](ctx, step, rep)
                    if status != CR.PASS:
                        return status, message
                # What a signable report needs from these steps: artifact digests and a recipe read
                # back from a lane llama-* command line (the fake lane's binaries just echo).
                if name == "artifact_integrity":
                    rep.artifacts.extend(artifact_integrity.hash_artifacts(ctx.config.lane_dir))
                    step.run([ctx.bin("llama-completion"), "--version"], 30)
                if name == "reference_parity":  # a proving step (tools/runner/recipe.py)
                    step.run([ctx.bin("llama-completion"), "-ctk", "f16", "-ctv", "f16", "-fa", "off"], 30)
                res = step.run([fake_step, name], 90)
                if name == "cleanup":
                    return real[name](ctx, step, rep)
            finally:
                if server is not None:
                    ctx.tracker.stop(server)
            return (CR.PASS, message) if res.exit_code == 0 else (CR.FAIL, f"fake {name} exit {res.exit_code}")
        return check

    checks.REGISTRY[:] = [dataclasses.replace(c, run=make(c.name)) for c in checks.REGISTRY]
    runner._recompute_figures = lambda *a, **k: ""  # fake logs carry no figures to re-derive

    if fault.startswith("publish:"):
        records_dir = root / "ws" / "evidence" / "records"

        def hook(stage, path):
            hit = (fault == "publish:run-dir-staged" and stage == "dir-staged") or (
                fault == "publish:before-record" and stage == "file-staged" and path.parent == records_dir
                and path.name.endswith(".record.dsse.json"))
            if hit:
                (root / f"at-{fault}").write_text(str(os.getpid()))
                time.sleep(60)
        atomic_files.test_hook = hook
    if os.environ.get("FAULT_FAKE_ENOSPC"):  # fallback when no tmpfs can be mounted
        import errno

        def full(*a, **k):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        atomic_files._copy_tree_synced = full
        atomic_files.os.write = full

    # The fake lane's checks write no raw files a real check's recompute could re-derive, so the audit
    # that gates signing (main_job.audit_before_signing, tested in committed_evidence_test) is out of
    # this test's scope: it kills the job, it does not certify a lane.
    main_job.audit_before_signing = lambda staging, evidence: None
    from tools.certify import certify as certify_lib
    certify_lib.require_audited = lambda *a, **k: None  # the same audit, inside certify_report
    os.chdir(root / "rf")  # lanes/spec.json, lanes/availability.json as in Bazel's runfiles
    ws = os.environ.get("FAULT_WS", str(root / "ws"))
    sys.exit(main_job.main(main_job.JobOptions(
        lane="cpu", lane_dir=str(root / "lane"), evidence=str(root / "cpu.evidence.pb"), model="model.gguf",
        model_store=str(root), publish=True, workspace=ws, key=str(root / "keys" / "lanes-issuer.key"))))


# ---- helpers ------------------------------------------------------------------------------------

def _tree_digest(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode() + b"\0")
        if p.is_file():
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _git(ws: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=True).stdout


def _run_processes(root: pathlib.Path) -> list[int]:
    """Live processes (not zombies) whose environment carries this test's FAULT_DIR."""
    from tools.runner import run_lock
    marker = f"FAULT_DIR={root}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = pathlib.Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0") and run_lock.start_time(int(entry)) is not None:
            found.append(int(entry))
    return found


def _staging_dirs(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in (root / "tmp").iterdir() if p.name.startswith("lanes-"))


class Env:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.env = dict(os.environ, FAULT_DIR=str(root), TMPDIR=str(root / "tmp"),
                        LANES_RUNNER_LOCK_DIR=str(root / "locks"),
                        PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.env.pop("FAULT_STEP", None)

    def start(self, fault: str = "", **extra) -> subprocess.Popen:
        env = dict(self.env, FAULT_STEP=fault, **extra)
        log = open(self.root / "driver.log", "w")
        return subprocess.Popen([sys.executable, str(HERE), "--driver", str(self.root)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def run(self, fault: str = "", **extra) -> tuple[int, str]:
        proc = self.start(fault, **extra)
        code = proc.wait(timeout=120)
        return code, (self.root / "driver.log").read_text()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from tools.runner.testing import fake_lane
    root = tmp_path_factory.mktemp("fault")
    for d in ("tmp", "locks", "fakebin", "rf/lanes", "ws/evidence", "keys"):
        (root / d).mkdir(parents=True)
    for name, text in (("fake-step", FAKE_STEP), ("fake-server", FAKE_SERVER)):
        (root / "fakebin" / name).write_text(text)
        (root / "fakebin" / name).chmod(0o755)
    lane = fake_lane.make_lane(root / "lane")
    fake_lane.make_evidence(lane, root / "cpu.evidence.pb")
    fake_lane.make_gguf(root / "model.gguf")
    spec = json.loads(fake_lane.SPEC.read_text())
    shutil.copy(fake_lane.SPEC, root / "rf" / "lanes" / "spec.json")
    (root / "rf" / "lanes" / "availability.json").write_text(json.dumps({
        "host": {"os": "linux", "arch": "x86_64"},
        "lanes": {k: {"status": "UNAVAILABLE", "reason": "fault-injection test"} for k in spec["lanes"]}}))
    ws = root / "ws"
    # A recordable run is bound to a policy; the job enrols its new key into this one.
    (ws / "evidence" / "policy.json").write_text(json.dumps({"policy_id": "fault-injection", "schema_version": 1}))
    _git(ws, "init", "-q")
    _git(ws, "config", "user.email", "t@t")
    _git(ws, "config", "user.name", "t")
    e = Env(root)
    code, out = e.run()
    assert code == 0, out
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", "first certified run")
    return e


def _wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


ROWS: list[tuple[str, ...]] = []


def _watchdogs(root: pathlib.Path) -> list[int]:
    from tools.runner import run_lock
    return [p for p in _run_processes(root) if "--watch" in run_lock.cmdline(p)]


def _kill_and_check(e: Env, point: str, sig: int = signal.SIGKILL, kill_watchdog: bool = False) -> None:
    root, ws = e.root, e.root / "ws"
    before, before_git = _tree_digest(ws / "evidence"), _git(ws, "status", "--porcelain")
    marker = root / f"at-{point}"
    marker.unlink(missing_ok=True)
    proc = e.start(point)
    assert _wait_for(marker.exists, 60), f"kill point {point} never reached:\n{(root / 'driver.log').read_text()}"
    if point in SERVER_STEPS:
        time.sleep(0.1)  # the server's background grandchild has forked by now
    started = _run_processes(root)
    if kill_watchdog:  # e.g. the OOM killer took it too: only PDEATHSIG and the next preflight remain
        for pid in _watchdogs(root):
            os.kill(pid, signal.SIGKILL)
    os.kill(proc.pid, sig)
    code = proc.wait(timeout=30)
    # PDEATHSIG is immediate; the watchdog's reaping takes a moment (it is a Python process).
    _wait_for(lambda: not _run_processes(root), 5)
    left = _run_processes(root)
    staging_after_kill = _staging_dirs(root)
    changed = _tree_digest(ws / "evidence") != before
    status_after_kill = _git(ws, "status", "--porcelain", "--untracked-files=all")
    git_changed = _git(ws, "status", "--porcelain") != before_git
    if not (changed or git_changed):
        evidence = "no"
    elif all(".lanes-tmp-" in line for line in status_after_kill.splitlines()):
        evidence = "temp sibling only"
    else:
        evidence = "run dir new+complete, record old"
    lock_after_kill = sorted(p.name for p in (root / "locks").iterdir())
    next_code, out = e.run()
    staging_after_next = _staging_dirs(root)
    left_after_next = _run_processes(root)
    label = f"{point} ({signal.Signals(sig).name}{' + watchdog' if kill_watchdog else ''})"
    ROWS.append((label, str(len(started)), str(len(left)), str(len(left_after_next)), str(len(staging_after_kill)),
                 str(len(staging_after_next)), evidence, "PASS" if next_code == 0 else f"FAIL ({next_code})"))
    assert code == (-sig if sig == signal.SIGKILL else 128 + sig), code
    if kill_watchdog:
        # PDEATHSIG took the direct children; the server's grandchild waits for the next preflight.
        assert left and all(p not in started[:1] for p in left), left
        run_dir = next((ws / "evidence" / "runs").iterdir())
        assert "leftover: killed pid" in (run_dir / "logs" / "preflight.log").read_text()
        pre = next(c for c in json.loads((run_dir / "runner_report.json").read_text())["checks"] if c["name"] == "preflight")
        assert "cleaned up a killed earlier run" in pre["message"], pre
    else:
        assert not left, f"{point}: processes of the killed run still alive: {left}"
    assert not left_after_next, left_after_next
    assert next_code == 0, out  # first: a failed next run keeps its staging dir, which hides why it failed
    assert not staging_after_next, f"{point}: staging dirs left after the next start: {staging_after_next}"
    if point.startswith("publish:"):
        # Killed between staging and rename: evidence is old or new, complete; the next start swept
        # the temporary sibling (checked by the committed-tree comparison below).
        assert ".lanes-tmp-" not in " ".join(str(p) for p in (ws / "evidence").rglob("*")), "temp left after next run"
    else:
        assert not changed and not git_changed, f"{point}: the kill changed evidence/: {_git(ws, 'status', '--porcelain')}"
    if sig == signal.SIGTERM:
        assert not staging_after_kill and not lock_after_kill, "SIGTERM: the runner must clean up itself"
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", f"after {point}", "--allow-empty")


@pytest.mark.parametrize("point", STEPS + PUBLISH_POINTS)
def test_sigkill(env, point):
    _kill_and_check(env, point)


def test_sigkill_runner_and_watchdog(env):
    _kill_and_check(env, "cancellation", kill_watchdog=True)


def test_sigterm_cleans_up_itself(env):
    _kill_and_check(env, "concurrency", signal.SIGTERM)


@contextlib.contextmanager
def _mounted(kind: str, target: pathlib.Path):
    """A 256 KiB tmpfs or a read-only bind mount at target; yields False when mounting is not allowed."""
    cmds = ([["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(target)]] if kind == "tmpfs" else
            [["mount", "--bind", str(target), str(target)], ["mount", "-o", "remount,bind,ro", str(target)]])
    done = 0
    try:
        for c in cmds:
            if subprocess.run(c, capture_output=True).returncode != 0:
                break
            done += 1
        yield done == len(cmds)
    finally:
        for _ in range(done):
            subprocess.run(["umount", str(target)], capture_output=True)


def _copy_evidence(env: Env, name: str) -> pathlib.Path:
    ws = env.root / name
    shutil.copytree(env.root / "ws", ws, ignore=shutil.ignore_patterns(".git"))
    return ws


def test_disk_full_evidence(env):
    ws = _copy_evidence(env, "ws_full")
    saved = env.root / "ws_full_saved"
    shutil.copytree(ws / "evidence", saved)
    shutil.rmtree(ws / "evidence")
    (ws / "evidence").mkdir()
    with _mounted("tmpfs", ws / "evidence") as mounted:
        how = "256 KiB tmpfs, filled up" if mounted else "os.write/copy patched to raise ENOSPC (no mount allowed)"
        shutil.copytree(saved, ws / "evidence", dirs_exist_ok=True)
        if mounted:
            with contextlib.suppress(OSError), open(ws / "evidence" / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        before = _tree_digest(ws / "evidence")
        extra = {} if mounted else {"FAULT_FAKE_ENOSPC": "1"}
        code, out = env.run(FAULT_WS=str(ws), **extra)
        after = _tree_digest(ws / "evidence")
    ROWS.append((f"disk full ({how})", "-", str(len(_run_processes(env.root))), "-", "-", str(len(_staging_dirs(env.root))),
                 "yes" if after != before else "no", f"exit {code}: clear error"))
    assert code == 3, out
    assert "no space left on the device (ENOSPC)" in out and "evidence/runs/" in out, out
    assert after == before, "a partial file or directory was left under evidence/"
    assert not _staging_dirs(env.root)


def test_read_only_evidence(env):
    ws = _copy_evidence(env, "ws_ro")
    before = _tree_digest(ws / "evidence")
    with _mounted("ro", ws / "evidence") as mounted:
        if mounted:
            how, expect = "read-only bind mount", "read-only file system (EROFS)"
        elif os.geteuid() != 0:
            how, expect = "chmod 555", "permission denied (EACCES)"
            for d in [ws / "evidence", *(p for p in (ws / "evidence").rglob("*") if p.is_dir())]:
                d.chmod(0o555)
        else:  # root ignores modes and cannot mount here: a file where the runs directory should be
            how, expect = "a file in place of evidence/runs (root, no mount)", "not a directory (ENOTDIR)"
            shutil.rmtree(ws / "evidence" / "runs")
            (ws / "evidence" / "runs").write_text("")
            before = _tree_digest(ws / "evidence")
        code, out = env.run(FAULT_WS=str(ws))
        after = _tree_digest(ws / "evidence")
    ROWS.append((f"read-only evidence ({how})", "-", str(len(_run_processes(env.root))), "-", "-",
                 str(len(_staging_dirs(env.root))), "yes" if after != before else "no", f"exit {code}: clear error"))
    assert code == 3, out
    assert expect in out, out
    assert after == before


def test_atomic_write_enospc_leaves_nothing(tmp_path, monkeypatch):
    import errno

    from tools.core import atomic_files
    target = tmp_path / "record.json"
    target.write_text("old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(atomic_files.os, "write", full)
    with pytest.raises(atomic_files.AtomicWriteError, match=f"cannot write {target}: no space left on the device"):
        atomic_files.write_text_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_interrupted_dir_swap_is_restored(tmp_path):
    """The non-Linux two-rename path killed between its renames: the next sweep puts the old dir back."""
    from tools.core import atomic_files
    (tmp_path / "runs").mkdir()
    old = tmp_path / "runs" / ".cpu.lanes-old-p999999999s1-abcd"
    old.mkdir()
    (old / "report.json").write_text("old")
    tmp = tmp_path / "runs" / ".cpu.lanes-tmp-p999999999s1-efgh"
    tmp.mkdir()
    done = atomic_files.sweep_leftovers(tmp_path)
    assert (tmp_path / "runs" / "cpu" / "report.json").read_text() == "old" and not tmp.exists(), done


def test_zz_print_table(env):
    header = ("kill point", "procs at kill", "procs left", "procs after next start", "staging after kill",
              "staging after next start", "evidence changed by kill", "next run")
    rows = [header, *ROWS]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    print()
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    assert ROWS, "no fault case ran"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--driver":
        _driver(pathlib.Path(sys.argv[2]))
    else:
        sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
