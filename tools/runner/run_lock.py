"""The run lock: what a certification run started, so that a killed run's leftovers are found.

A run writes ${LANES_RUNNER_LOCK_DIR | $TEST_TMPDIR/lanes-runner | $XDG_RUNTIME_DIR/lanes-runner |
<tmp>/lanes-runner}/<device>.lock.json, <device> = cpu or gpu<N> (JSON, replaced atomically as children
start): the runner's pid and start time, a run id (also put in every child's environment as
LANES_RUN_ID), its lane, staging and output directories, the device, and each child's pid, start time
and argv[0]. The lock is per device, not per lane: a CUDA and a Vulkan lane on GPU 0 disturb each
other's memory baseline and speed figures just as two runs of one lane do.

Exclusion is an fcntl.flock(LOCK_EX) on <device>.flock, held on a close-on-exec fd for the whole run:
only its holder writes the JSON, and the kernel drops it when the holder dies, so a JSON whose flock
is free belongs to a dead run (reaped by whoever takes the flock next: the watchdog or a preflight).

Who ends a killed run's processes (issue 15):
  Linux: every child gets PR_SET_PDEATHSIG=SIGKILL (steps.ProcessTracker), so the kernel kills it
    when the runner dies; plus a watchdog (this module, --watch) that notices the runner's death
    through a pipe and kills what provably belongs to the run (its process groups, grandchildren
    included, found by LANES_RUN_ID) and removes its staging directory; plus the next run's
    preflight, which does the same from the lock file if the watchdog was killed too.
  macOS / other POSIX: no PDEATHSIG; the watchdog and the next run's preflight (process identity
    by `ps`, no environment scan, so grandchildren are found only through their process group).
A process is only ever killed when it provably belongs to the dead run: same pid AND same start
time AND same argv[0] as recorded, or (Linux) LANES_RUN_ID=<that run's id> in its environment.
The lock records its runner's uid and user: another user's live run is named, never to be killed.

Staging dirs (make_staging_dir) carry their owner's pid in their name, but what keeps them is an
flock on STAGING_FLOCK inside, held by the owner for its lifetime: a sweeper in another PID
namespace cannot see the pid, but it sees the flock (sweep_stale_staging, staging_in_use).
Only stdlib here: the watchdog starts in milliseconds and tools/evidence can import this.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from tools.core.process_identity import same_process, start_time

LOCK_DIR_ENV = "LANES_RUNNER_LOCK_DIR"
RUN_ID_ENV = "LANES_RUN_ID"
KEPT_MARKER = ".lanes-kept"  # a finished run's staging dir kept for inspection: not swept
# Staging directories carry their owner: lanes-runner-p<pid>s<start>-XXXX (the runner's scratch),
# lanes-run-<alias>-p<pid>s<start>-XXXX (the main job's run dir), lanes-remote-run-p...-XXXX.
STAGING_RE = re.compile(r"^lanes-(?:runner|remote-run|run-[A-Za-z0-9_.-]+?)-p(\d+)s(\d+)-[A-Za-z0-9_]+$")
_LINUX = sys.platform.startswith("linux")


# ---- process identity (tools/core/process_identity.py) -----

def cmdline(pid: int) -> list[str]:
    try:
        raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    except OSError:
        pass
    try:
        return subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True,
                              timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return []


def _environ_run_id(pid: int) -> str | None:
    try:
        raw = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = (RUN_ID_ENV + "=").encode()
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# ---- locations ----------------------------------------------------------------------------------

def lock_dir() -> pathlib.Path:
    for env, sub in ((LOCK_DIR_ENV, ""), ("TEST_TMPDIR", "lanes-runner"), ("XDG_RUNTIME_DIR", "lanes-runner")):
        if os.environ.get(env):
            return pathlib.Path(os.environ[env]) / sub
    return pathlib.Path(tempfile.gettempdir()) / "lanes-runner"


def _make_lock_dir(directory: pathlib.Path) -> None:
    """The default directory in the shared temp dir is every user's (sticky, like /tmp): a device's
    lock there excludes every user's runs on it."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    if directory == pathlib.Path(tempfile.gettempdir()) / "lanes-runner" and directory.stat().st_uid == os.getuid():
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o1777)


def device_key(backend: str = "cpu", gpu_index: int = 0) -> str:
    return "cpu" if backend == "cpu" else f"gpu{gpu_index}"


def lock_path(backend: str = "cpu", gpu_index: int = 0) -> pathlib.Path:
    """One lock per device, whatever the lane: two runs on one GPU (or two CPU-lane runs) would
    disturb each other's cleanup baseline and speed figures."""
    return lock_dir() / f"{device_key(backend, gpu_index)}.lock.json"


def flock_path(path: pathlib.Path) -> pathlib.Path:
    """The file whose flock guards the JSON lock `path` (a separate file: the JSON is os.replace'd)."""
    return path.with_name(path.name.removesuffix(".lock.json") + ".flock")


def try_flock(path: pathlib.Path) -> int | None:
    """An fd holding LOCK_EX on flock_path(path), or None while another open file holds it. The fd
    is close-on-exec (os.open's default), so no child keeps the device locked after we die."""
    fpath = flock_path(path)
    _make_lock_dir(fpath.parent)
    while True:
        try:
            fd = os.open(fpath, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except PermissionError:  # another user's flock file in the shared dir: a read-only fd locks too
            fd = os.open(fpath, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        # A holder unlinks the file before letting go: locking an unlinked inode locks nothing.
        try:
            st = os.stat(fpath)
        except FileNotFoundError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            return fd
        os.close(fd)


def release_flock(path: pathlib.Path, fd: int) -> None:
    """Unlinks the flock file while still holding it (see try_flock), then lets go."""
    with contextlib.suppress(OSError):
        flock_path(path).unlink(missing_ok=True)
    os.close(fd)


def owner_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"p{pid}s{start_time(pid) or 0}-"


# Each staging dir holds STAGING_FLOCK, flock(LOCK_EX)ed by its owner for the owner's lifetime (the
# fd is kept here, close-on-exec): a flock is seen across PID namespaces, which the owner's pid in
# the dir's name is not (a Bazel-sandboxed test in its own PID namespace, with the real /tmp, sees
# no owner and would sweep a live run's dir). The sweeper removes a dir only once it holds that flock.
STAGING_FLOCK = ".lanes-owner.flock"
# A dir without the flock file is a runner's that predates it, or one killed between mkdtemp and
# taking it: swept only when older than this and its owner pid is gone as well.
UNLOCKED_STAGING_MIN_AGE_S = 3600.0
_STAGING_LOCKS: dict[str, int] = {}


def _lock_staging(path: pathlib.Path) -> int:
    """Takes the staging dir's flock on a file under a temporary name, then renames it into place,
    so a sweeper that finds STAGING_FLOCK always finds it held."""
    tmp = path / f".lanes-owner.flock.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, path / STAGING_FLOCK)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return fd


def make_staging_dir(prefix: str, parent: pathlib.Path | None = None) -> pathlib.Path:
    """tempfile.mkdtemp whose name says which process owns it and whose flock (STAGING_FLOCK) this
    process holds until it exits or release_staging(): a sweeper removes it only once that is free."""
    for gone in [d for d in _STAGING_LOCKS if not os.path.isdir(d)]:  # removed by their users
        release_staging(pathlib.Path(gone))
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix + owner_tag(), dir=parent))
    _STAGING_LOCKS[str(path)] = _lock_staging(path)
    return path


def release_staging(path: pathlib.Path) -> None:
    """Lets go of a staging dir's flock (after removing it, or to hand a kept dir to the sweeper's rules)."""
    fd = _STAGING_LOCKS.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def staging_owner(path: pathlib.Path) -> tuple[int, int] | None:
    m = STAGING_RE.match(path.name)
    return (int(m[1]), int(m[2])) if m else None


def staging_in_use(path: pathlib.Path) -> bool:
    """Whether a live process (in any PID namespace) holds the staging dir's flock; for a dir without
    one (an older runner's), whether its owner pid lives or it is too young to judge."""
    try:
        fd = os.open(path / STAGING_FLOCK, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        owner = staging_owner(path)
        try:
            age = time.time() - path.stat().st_mtime
        except OSError:
            return False
        return age < UNLOCKED_STAGING_MIN_AGE_S or (owner is not None and same_process(*owner))
    except OSError:
        return True  # unreadable (another user's): not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # ours, if taken: the dir is removed right after, and nobody re-takes a flock
    return False


def sweep_stale_staging(tmp: pathlib.Path | None = None) -> list[str]:
    """Removes lanes-run*/lanes-runner-* staging dirs in the temp dir whose flock nobody holds."""
    tmp = tmp or pathlib.Path(tempfile.gettempdir())
    done = []
    try:
        entries = list(tmp.iterdir())
    except OSError:
        return done
    for path in entries:
        owner = staging_owner(path)
        if owner is None or path.is_symlink() or not path.is_dir() or (path / KEPT_MARKER).exists():
            continue
        if str(path) in _STAGING_LOCKS or staging_in_use(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            done.append(f"removed stale staging dir {path} (its owner's flock is free; owner pid {owner[0]})")
    return done


# ---- the lock file --------------------------------------------------------------------------------

def _write_json_atomic(path: pathlib.Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-{owner_tag()}")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_LOCK_TMP_RE = re.compile(r"^\..+\.lock\.json\.tmp-p(\d+)s(\d+)-")


def sweep_lock_temps(directory: pathlib.Path) -> list[str]:
    """Temporary lock files of writers killed mid-write (the lock itself is never torn)."""
    done = []
    with contextlib.suppress(OSError):
        for p in directory.iterdir():
            m = _LOCK_TMP_RE.match(p.name)
            if m and not same_process(int(m[1]), int(m[2])):
                p.unlink(missing_ok=True)
                done.append(f"removed {p} (a lock write interrupted by a kill)")
    return done


def read_lock(path: pathlib.Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable (a torn write is impossible, but a hand edit is not): treated as dead


class RunLock:
    """This run's lock file; add_child() is called by ProcessTracker for every process it starts.
    `flock_fd` (from try_flock) is held until release(): only the flock's holder writes the JSON."""

    def __init__(self, path: pathlib.Path, run_id: str, lane_id: str, backend: str, gpu_index: int,
                 staging_dirs: list[str], out_dir: str, flock_fd: int | None = None):
        self.path = path
        self.flock_fd = flock_fd
        self.data = {
            "schema_version": 1, "run_id": run_id, "runner_pid": os.getpid(),
            "runner_start_time": start_time(os.getpid()), "runner_argv0": sys.argv[0] if sys.argv else "",
            "lane_id": lane_id, "backend": backend, "gpu_index": gpu_index, "device": device_key(backend, gpu_index),
            "staging_dirs": staging_dirs, "out_dir": out_dir, "children": [], "started_unix": time.time(),
            "uid": os.getuid(), "user": user_name(os.getuid()),
        }
        self._watch_w: int | None = None
        self.watchdog_pid: int | None = None  # a subreaping runner's child: cleanup leaves it alone

    def write(self) -> None:
        _write_json_atomic(self.path, self.data)

    def add_child(self, pid: int, argv0: str) -> None:
        self.data["children"].append({"pid": pid, "start_time": start_time(pid), "argv0": argv0})
        self.write()

    def start_watchdog(self) -> None:
        """A detached process that reaps this run if the runner dies without release()."""
        r, w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            proc = subprocess.Popen([sys.executable, "-m", "tools.runner.run_lock", "--watch", str(self.path),
                                     self.data["run_id"]], stdin=r, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=env, start_new_session=True)
            out, _ = proc.communicate(timeout=30)  # the intermediate exits once the watchdog has forked away
            with contextlib.suppress(ValueError):
                self.watchdog_pid = int(out.split()[0]) if out.split() else None
        except (OSError, subprocess.TimeoutExpired):
            os.close(w)
            w = None  # the PDEATHSIG + next-preflight layers still hold
        finally:
            os.close(r)
        self._watch_w = w

    def release(self) -> None:
        """Normal end: the lock goes first, then the flock, then the watchdog is told (pipe closed)
        and exits (it finds no JSON of this run once it gets the flock)."""
        cur = read_lock(self.path)
        if cur and cur.get("run_id") == self.data["run_id"]:
            self.path.unlink(missing_ok=True)
        if self.flock_fd is not None:
            release_flock(self.path, self.flock_fd)
            self.flock_fd = None
        if self._watch_w is not None:
            os.close(self._watch_w)
            self._watch_w = None


def runner_alive(lock: dict) -> bool:
    return same_process(int(lock.get("runner_pid") or 0), int(lock.get("runner_start_time") or -1))


def run_processes(lock: dict) -> list[int]:
    """Live processes that provably belong to the run of `lock` (never the caller)."""
    me = os.getpid()
    found: set[int] = set()
    for child in lock.get("children", []):
        pid, start, argv0 = int(child.get("pid") or 0), child.get("start_time"), child.get("argv0")
        if pid <= 0 or pid == me or start is None or not same_process(pid, int(start)):
            continue
        # argv[0] as started; a script shows its interpreter first and its path second.
        if argv0 in cmdline(pid)[:2]:
            found.add(pid)
    run_id = lock.get("run_id")
    if run_id and os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me and _environ_run_id(int(entry)) == run_id:
                if start_time(int(entry)) is not None:
                    found.add(int(entry))
    return sorted(found)


def kill_run(lock: dict, wait_s: float = 10.0) -> list[int]:
    """SIGKILLs the run's provable processes (and the process groups they lead); returns their pids."""
    pids = run_processes(lock)
    for pid in pids:
        if _pgid(pid) == pid:  # a child started in its own session leads its group: take it whole
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(start_time(p) is not None for p in pids):
        time.sleep(0.05)
    return pids


def remove_staging(lock: dict) -> list[str]:
    """The dead run's staging dirs; only paths named like ours (never an arbitrary path from a lock)."""
    done = []
    for d in [*lock.get("staging_dirs", []), lock.get("out_dir", "")]:
        p = pathlib.Path(d) if d else None
        if (p is not None and staging_owner(p) is not None and p.exists() and not (p / KEPT_MARKER).exists()
                and not staging_in_use(p)):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed its staging dir {p}")
    return done


def reap_dead_run(lock: dict, path: pathlib.Path) -> tuple[list[int], list[str]]:
    """Cleans up after a dead run: kills its processes, removes its staging dirs and its lock."""
    killed = kill_run(lock)
    lines = [f"killed pid {p} ({' '.join(cmdline(p)[:1]) or 'exited'}) of dead run {lock.get('run_id')}" for p in killed]
    lines += remove_staging(lock)
    path.unlink(missing_ok=True)
    return killed, lines


def user_name(uid: int) -> str:
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def holder_uid(lock: dict) -> int | None:
    """The uid of a lock's runner: recorded, or (locks written before that) its runner process's owner."""
    if isinstance(lock.get("uid"), int):
        return lock["uid"]
    try:
        return os.stat(f"/proc/{int(lock.get('runner_pid') or 0)}").st_uid
    except (OSError, ValueError):
        return None


def cleanup_command(lock: dict) -> str:
    """How to end the run that holds a device: for the caller's own run, the signals that stop it;
    for another user's run (the CPU and each GPU are locked host-wide: two certifications on one
    device would corrupt each other's speed figures), whose run it is, and never a kill."""
    pid = lock.get("runner_pid")
    uid = holder_uid(lock)
    if uid is not None and uid != os.getuid():
        user = lock.get("user") or user_name(uid)
        return (f"it is user {user}'s run (uid {uid}, runner pid {pid}): wait for it to finish or ask {user} to stop "
                f"it; do not stop another user's processes")
    return (f"kill -TERM {pid}   # the runner stops its children and removes its staging dir; "
            f"if pid {pid} is still there after 10 s: kill -KILL {pid} and start again (preflight then reaps what it left)")


# ---- signals ------------------------------------------------------------------------------------

class RunInterrupted(SystemExit):
    """SIGTERM/SIGINT/SIGHUP: children stopped, staging removed; exits 128+signal."""


@contextlib.contextmanager
def stop_run_on_signal(on_signal):
    """While active, SIGTERM/SIGINT/SIGHUP call on_signal() (stop children, remove staging, release
    the lock) and then raise RunInterrupted, so callers' finally blocks run too. Handlers can only
    be set from the main thread; elsewhere this does nothing."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        del frame
        for s in sigs:  # a second signal during cleanup must not interrupt it
            signal.signal(s, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            on_signal()
        print(f"[runner] {signal.Signals(signum).name}: children stopped, staging removed", file=sys.stderr, flush=True)
        raise RunInterrupted(128 + signum)

    sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
    old = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ---- the watchdog -------------------------------------------------------------------------------

def _watch(path: pathlib.Path, run_id: str) -> None:
    """Detaches (so it is no descendant of the runner and its cleanup check never sees it), waits
    for EOF on stdin (the runner exited or died), takes the device's flock (free once the runner is
    gone) and reaps the run if the lock still names `run_id`. Holding the flock while reaping keeps
    a next run from writing its lock meanwhile, so only this run's lock is ever removed."""
    if (child := os.fork()) > 0:
        os.write(1, f"{child}\n".encode())  # the runner, a subreaper, becomes its parent: it must know it
        os._exit(0)
    os.setsid()
    with contextlib.suppress(OSError):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    deadline = time.monotonic() + 30
    while (fd := try_flock(path)) is None:
        cur = read_lock(path)
        if not cur or cur.get("run_id") != run_id or time.monotonic() > deadline:
            return  # released normally, or a next run took the device (its preflight reaped ours)
        time.sleep(0.05)
    try:
        lock = read_lock(path)
        if not lock or lock.get("run_id") != run_id:
            return  # released normally
        end = time.monotonic() + 5
        while runner_alive(lock) and time.monotonic() < end:  # its exit may still be in progress
            time.sleep(0.02)
        if runner_alive(lock):
            return  # closed the pipe but lives on: never reap a live run
        reap_dead_run(lock, path)
        # The main job's run dir of the same (dead) process, if it used one.
        for p in pathlib.Path(tempfile.gettempdir()).iterdir():
            if (staging_owner(p) == (lock.get("runner_pid"), lock.get("runner_start_time"))
                    and not (p / KEPT_MARKER).exists() and not staging_in_use(p)):
                shutil.rmtree(p, ignore_errors=True)
    finally:
        release_flock(path, fd)


def new_run_id() -> str:
    return uuid.uuid4().hex


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--watch":
        _watch(pathlib.Path(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: python -m tools.runner.run_lock --watch <lock.json> <run id>")
