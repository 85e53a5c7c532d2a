"""One step = one log (<out_dir>/logs/<step>.log) + one exit status (<step>.exit), like ggml-ci.

Also runs the lane's binaries: every child is tracked (so the cleanup check can prove none is left),
bounded by a timeout, and its output appended to the step's log.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from proto import runner_report_pb2 as rpb
from tools.runner import exits, log_blocks, run_lock

CR = rpb.CheckResult

# The environment of every process the runner starts is built from an allowlist, never by
# stripping what is known to be dangerous: LD_PRELOAD/LD_AUDIT (code injected into every lane
# process), LD_LIBRARY_PATH (overrides the lanes' RUNPATH), GGML_* (GGML_BACKEND_PATH loads an extra
# backend), LLAMA_* (llama.cpp reads LLAMA_ARG_* as flags) and anything else inherited stay out.
ENV_ALLOWED = ("PATH", "HOME", "LANG", "TMPDIR", "TZ")
ENV_ALLOWED_PREFIXES = ("LC_",)
# Device selection the operator gives the run (passed on and logged like the rest): the Vulkan
# loader's ICD manifests (how preflight tells an operator to name the driver) and the CUDA/ROCm
# device masks (the run's --gpu_index counts within them).
ENV_DEVICE_SELECTION = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                        "VK_DRIVER_FILES", "VK_ICD_FILENAMES")
# Set by the runner itself in os.environ during a run (preflight_devices: the Vulkan device it
# chose); an inherited value is dropped when the run's tracker starts, so any value is the runner's.
ENV_RUNNER_SET = ("GGML_VK_VISIBLE_DEVICES",)
# The runner's own Python probes (argv[0] is the runner's interpreter) need its module path.
_ENV_RUNNER_PYTHON = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE")
_SENSITIVE_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
# Never in a lane process's environment, even passed explicitly: code injected into every process.
ENV_NEVER = ("LD_PRELOAD", "LD_AUDIT")
REDACTED = "<redacted>"

_STRIPPED_ENV_PREFIXES = ("LLAMA_ARG_",)


def without_inherited_llama_args(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(_STRIPPED_ENV_PREFIXES)}


def _allowed(name: str) -> bool:
    return name in ENV_ALLOWED or name.startswith(ENV_ALLOWED_PREFIXES) or name in ENV_DEVICE_SELECTION


def child_env(extra: dict[str, str] | None = None, argv0: str | None = None) -> dict[str, str]:
    """The environment of a process the runner starts: the allowlisted names from the runner's own
    environment, the runner's own additions, then `extra` (explicitly passed by the caller)."""
    env = {k: v for k, v in os.environ.items() if _allowed(k)}
    env.update({k: os.environ[k] for k in ENV_RUNNER_SET if k in os.environ})
    if argv0 is not None and argv0 == sys.executable:
        env.update({k: os.environ[k] for k in _ENV_RUNNER_PYTHON if k in os.environ})
    env.update(extra or {})
    for name in ENV_NEVER:
        env.pop(name, None)
    return env


def explicit_extras(env: dict[str, str]) -> dict[str, str]:
    """What a caller-built environment (os.environ plus its own settings, as ctest_run builds one)
    adds or changes: those are passed on; what it merely inherited goes through the allowlist."""
    return {k: v for k, v in without_inherited_llama_args(env).items() if os.environ.get(k) != v}


def shown_env(env: dict[str, str]) -> dict[str, str]:
    """The environment as logged: values of names that look like credentials redacted."""
    return {k: (REDACTED if _SENSITIVE_NAME.search(k) else v) for k, v in sorted(env.items())}


# A step's environment record (Step.record_env; cleanup.after_step writes it into cleanup.steps.log):
# {"environments": [{"commands": [argv0...], "env": {...}, "explicit": [names], "runner_python": bool}],
#  "dropped": [names of the runner's own variables that no process got]}.


def env_record_problems(record: dict, where: str) -> list[str]:
    """Why a recorded environment is not the clean one child_env builds: a name outside the
    allowlist that its caller did not pass explicitly, or an injection variable at all."""
    problems = []
    for entry in record.get("environments", []):
        runner_python = entry.get("runner_python") is True
        for name in sorted(entry.get("env", {})):
            if name in ENV_NEVER:
                problems.append(f"{where}: {name} reached {', '.join(entry.get('commands', []))}")
            elif not (_allowed(name) or name in ENV_RUNNER_SET or name == run_lock.RUN_ID_ENV
                      or name in entry.get("explicit", []) or (runner_python and name in _ENV_RUNNER_PYTHON)):
                problems.append(f"{where}: {name} is neither allowlisted nor passed by the runner "
                                f"({', '.join(entry.get('commands', []))})")
    return problems


# prctl(2) options: the signal a child gets when the thread that forked it dies; and "child
# subreaper": orphaned descendants (a double-forked daemon) re-parent to this process, not to init.
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_LIBC = None
if sys.platform.startswith("linux"):
    try:
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        _LIBC = None


def become_child_subreaper(on: bool = True) -> bool:
    """PR_SET_CHILD_SUBREAPER on this process (Linux): a lane's double-forked, setsid child then
    re-parents to the runner, so cleanup finds it among the runner's descendants even if it cleared
    its environment. False where unsupported."""
    if _LIBC is None:
        return False
    return _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0


def _bind_to_parent(parent_pid: int) -> None:
    """preexec_fn (runs in the child between fork and exec): SIGKILL this child when the runner dies.
    PDEATHSIG fires when the *thread* that forked exits, so the runner forks from its main thread
    (popen() only sets it there). If the runner died before prctl took effect, the child is already
    re-parented: getppid() differs from the runner's pid and the child kills itself."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


class ProcessTracker:
    """Every process the runner starts, so cleanup can check /proc that none outlived its step.

    Each child is bound to the runner's lifetime (issue 15): its own process group (a stop takes the
    binary and whatever it started), PR_SET_PDEATHSIG=SIGKILL on Linux, LANES_RUN_ID=<run id> in its
    environment, and an entry in the run lock (run_lock.py) once `lock` is set, so a watchdog or the
    next run's preflight can kill it if the runner was killed. macOS has no PDEATHSIG: there only
    the watchdog and the next preflight cover it. The runner is a child subreaper (Linux), so a
    child's daemon re-parents to it and cleanup finds it. Every child gets child_env's allowlisted
    environment, recorded per step (Step.record_env) for cleanup to log and check.
    """

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.run_id = run_lock.new_run_id()
        self.lock: run_lock.RunLock | None = None
        self.step: Step | None = None  # the step whose log records the environment of what starts now
        self.extra_env: dict[str, str] = {}  # explicitly given to every child (logged like the rest)
        self.env_records: dict[str, dict] = {}  # step name -> its environment record, until cleanup logs it
        # A multi-GPU run's flocks on its GPUs after the first (the run lock holds the first's).
        self.device_flocks: list[tuple[pathlib.Path, int]] = []
        self.subreaper = become_child_subreaper()
        for name in ENV_RUNNER_SET:  # from here on, a value is the runner's own (child_env)
            os.environ.pop(name, None)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def popen(self, argv: Sequence[str], *, extra_env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Starts argv in the clean environment (child_env): `extra_env`, or what a caller-built
        `env` adds to os.environ, is passed on; the rest is the allowlist. The current step records it."""
        argv = [str(a) for a in argv]
        extra = {**self.extra_env, **(extra_env or {})}
        if kwargs.get("env") is not None:
            extra = {**explicit_extras(kwargs["env"]), **extra}
        env = child_env(extra, argv[0])
        env[run_lock.RUN_ID_ENV] = self.run_id
        kwargs["env"] = env
        if self.step is not None:
            self.step.record_env(argv[0], env, sorted(extra))
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        # Own process group: a timeout kills the binary and anything it started.
        kwargs.setdefault("start_new_session", True)
        if threading.current_thread() is threading.main_thread() and "preexec_fn" not in kwargs:
            kwargs["preexec_fn"] = functools.partial(_bind_to_parent, os.getpid())
        proc = subprocess.Popen(argv, **kwargs)
        self.procs.append(proc)
        if self.lock is not None:
            self.lock.add_child(proc.pid, argv[0])
        return proc

    def release(self) -> None:
        """End of run (after stop_all): the lock removed, the watchdog told (this run left nothing)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        while self.device_flocks:
            run_lock.release_flock(*self.device_flocks.pop())

    def stop_all(self, grace_s: float = 5.0) -> None:
        for proc in self.procs:
            self.stop(proc, grace_s)

    @staticmethod
    def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> int:
        """SIGTERM then SIGKILL the process group; returns the exit status."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=grace_s)
        return proc.returncode


@dataclasses.dataclass
class CommandResult:
    argv: list[str]
    exit_code: int
    output: str
    seconds: float
    timed_out: bool = False


class Step:
    """The log and result of one check."""

    def __init__(self, name: str, logs_dir: pathlib.Path, tracker: ProcessTracker, required: bool = True):
        self.name = name
        self.log_path = logs_dir / f"{name}.log"
        self.exit_path = logs_dir / f"{name}.exit"
        self.tracker = tracker
        self.result = CR(name=name, required=required)
        self._log = open(self.log_path, "w", encoding="utf-8", errors="replace")
        self.extra_logs: list[pathlib.Path] = []
        self._config: dict[str, str] = {}
        self.config_path = log_blocks.config_path(logs_dir, name)
        self.config_path.unlink(missing_ok=True)  # a reused --out_dir: only this run's configuration
        self._envs: list[dict] = []
        self._env_lock = threading.Lock()
        tracker.step = self

    def record_env(self, argv0: str, env: dict[str, str], explicit: list[str] | None = None) -> None:
        """The environment a process of this step got, kept for cleanup.after_step, which writes it
        into cleanup.steps.log (runner-owned, digested) and checks it: each distinct environment once,
        with the commands that got it and the names its caller passed explicitly, and the names of
        the runner's own variables that no process got (values left out: they may be secrets)."""
        shown = shown_env(env)
        explicit = sorted(explicit or [])
        with self._env_lock:
            runner_python = argv0 == sys.executable
            entry = next((e for e in self._envs if (e["env"], e["explicit"], e["runner_python"]) ==
                          (shown, explicit, runner_python)), None)
            if entry is None:
                entry = {"commands": [], "env": shown, "explicit": explicit, "runner_python": runner_python}
                self._envs.append(entry)
            if argv0 not in entry["commands"]:
                entry["commands"].append(argv0)
            passed = {k for e in self._envs for k in e["env"]}
            self.tracker.env_records[self.name] = {
                "environments": [dict(e, commands=list(e["commands"])) for e in self._envs],
                "dropped": sorted(k for k in os.environ if k not in passed)}

    def config(self, key: str, value: object) -> None:
        """One configuration value of this step, into <step>.config.json (digested with its logs);
        a key is given once."""
        if key in self._config:
            raise log_blocks.StepConfigError(f"{self.name}: configuration key {key!r} given twice")
        self._config[key] = str(value)
        log_blocks.write_config(self.config_path, self._config)
        if self.config_path not in self.extra_logs:
            self.extra_logs.append(self.config_path)

    def log(self, text: str) -> None:
        self._log.write(text if text.endswith("\n") else text + "\n")
        self._log.flush()

    def run(self, argv: Sequence[str], timeout_s: float, cwd: pathlib.Path | None = None) -> CommandResult:
        """Runs argv to completion (stdout+stderr captured into this step's log)."""
        argv = [str(a) for a in argv]
        self.log(log_blocks.command_line(argv))
        start = time.monotonic()
        proc = self.tracker.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.tracker.stop(proc)
            out, _ = proc.communicate()
        seconds = time.monotonic() - start
        text = out.decode("utf-8", errors="replace")
        # The `# exit` line must start a line of its own: a tool whose last output has no newline
        # (llama.cpp's async logger can end a run mid-line) would otherwise hide it from the parsers,
        # which then saw no exit status at all (the cancellation and op_oracle CI flakes).
        self._log.write(text if not text or text.endswith("\n") else text + "\n")
        code = proc.returncode if not timed_out else 124
        detail = f"timed out at {timeout_s:.0f}s" if timed_out else (exits.meaning(code) if code < 0 else "")
        self.log(log_blocks.exit_line(code, seconds, detail or ""))
        return CommandResult(argv, code, text, seconds, timed_out)

    def finish(self, status: int, message: str) -> CR:
        self.result.status = status
        self.result.message = message
        self.log(f"# {CR.Status.Name(status)}: {message}")
        self._log.close()
        if self.tracker.step is self:
            self.tracker.step = None
        self.exit_path.write_text(f"{0 if status == CR.PASS else 1} {CR.Status.Name(status)}\n")
        return self.result
