"""The step-log grammar, written and read here only: `$ <argv>` command lines, `# exit N after Ts`
lines, and each step's configuration (<step>.config.json, runner-owned and digested).

Recompute functions, the recipe and the audit read the runner's own logs through these, so a figure
is derived from the tool output that follows a command line, and a configuration value only from
the runner's own file (runs made before that file: its `# lanes-config` lines outside command blocks).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import pathlib
import re
import shlex

from tools.core import atomic_files, errors

EXIT_LINE = re.compile(r"^# exit (?P<code>-?\d+) after", re.MULTILINE)
_CONFIG = re.compile(r"^# lanes-config (\S+?)=(.*)$", re.MULTILINE)
# Step.run / llama_server / speed write `$ <shlex.join(argv)>` and, for commands whose output goes
# to a file of its own, an annotation after two spaces: `  (log: x.server.log)`, `  (stdout: ...)`.
_ANNOTATION = re.compile(r"  \((?:log|stdout|stderr|SIGINT)[^)]*\)\s*$|  \(SIGINT once output appears\)\s*$")
_FILES = re.compile(r"\b(?:log|stdout|stderr): ([\w.+-]+)")


@dataclasses.dataclass
class Command:
    argv: list[str]
    output: str  # what followed the `$` line in the same log, up to its `# exit` line
    exit_code: int | None
    files: list[str]  # files the annotation names (the command's own output files)


def command_line(argv: list[str], annotation: str = "") -> str:
    """`$ <argv>`, with an optional annotation naming the command's own output files."""
    return f"$ {shlex.join(argv)}" + (f"  ({annotation})" if annotation else "")


def exit_line(code: int, seconds: float, detail: str = "") -> str:
    return f"# exit {code} after {seconds:.2f}s" + (f" ({detail})" if detail else "")


def commands(log_text: str) -> list[Command]:
    out: list[Command] = []
    current: Command | None = None
    lines: list[str] = []
    for line in log_text.splitlines():
        if line.startswith("$ "):
            if current is not None:
                current.output = "\n".join(lines)
                out.append(current)
            cmd = line[2:]
            files = _FILES.findall(cmd[cmd.find("  (") :]) if "  (" in cmd else []
            cmd = _ANNOTATION.sub("", cmd)
            try:
                argv = shlex.split(cmd)
            except ValueError:
                argv = cmd.split()
            current, lines = Command(argv, "", None, files), []
            continue
        if current is None:
            continue
        m = EXIT_LINE.match(line)
        if m and current.exit_code is None:
            current.exit_code = int(m.group(1))
            current.output = "\n".join(lines)
            out.append(current)
            current, lines = None, []
            continue
        lines.append(line)
    if current is not None:
        current.output = "\n".join(lines)
        out.append(current)
    return out


def config_values(log_text: str) -> dict[str, str]:
    """`# lanes-config key=value` lines: the configured inputs (floors, tolerances) a step used."""
    return {m.group(1): m.group(2).strip() for m in _CONFIG.finditer(log_text)}


def runner_config(log_text: str) -> dict[str, str]:
    """The config lines the runner wrote before the step's first command: a tool's output, which
    follows its `$` line, cannot add to them or override them."""
    head = "" if log_text.startswith("$ ") else log_text.split("\n$ ", 1)[0]
    return config_values(head)


def stray_exit_lines(log_text: str) -> int:
    """Exit lines beyond one per command: a tool that printed `# exit ...` itself, which would end its
    block early (commands() takes the first) and hide how it really ended."""
    return len(EXIT_LINE.findall(log_text)) - len(commands(log_text))


def read(path: pathlib.Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def flag_value(argv: list[str], *names: str) -> str | None:
    """The last value given for any of the flag names (`-c 4096` or `--ctx-size=4096`)."""
    value = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                value = argv[i + 1]
            elif a.startswith(n + "="):
                value = a[len(n) + 1:]
    return value


# ---- check configuration: a runner-owned file per step, never read out of tool output ----------

CONFIG_SUFFIX = ".config.json"


class StepConfigError(errors.LanesError):
    """A step's configuration file is unreadable, or names a key twice."""

    code = "step-config"


def config_path(logs_dir: pathlib.Path, step: str) -> pathlib.Path:
    return pathlib.Path(logs_dir) / f"{step}{CONFIG_SUFFIX}"


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise StepConfigError(f"configuration key {key!r} given twice")
        out[key] = value
    return out


def write_config(path: pathlib.Path, values: dict[str, str]) -> None:
    atomic_files.write_bytes_atomic(path, (json.dumps(values, indent=1, sort_keys=True) + "\n").encode())


def load_config(path: pathlib.Path) -> dict[str, str]:
    """A step's configuration file: one JSON object of strings, each key once."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_refuse_duplicates)
    except (OSError, ValueError) as err:
        raise StepConfigError(f"{path.name}: {err}") from err
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise StepConfigError(f"{path.name}: not an object of strings")
    return values


def runner_lines(log_text: str) -> str:
    """The lines the runner wrote itself: everything outside the command blocks (`$` line up to its
    `# exit` line). A tool's output lies inside its block and is left out."""
    out: list[str] = []
    inside = False
    for line in log_text.splitlines():
        if line.startswith("$ "):
            inside = True
            continue
        if inside:
            if EXIT_LINE.match(line):
                inside = False
            continue
        out.append(line)
    return "\n".join(out)


# Runs made before <step>.config.json existed kept their configuration as `# lanes-config` lines in
# the step log, where a lane's own output can print the same lines. A live run and the audit of a
# current run turn them off (legacy_config_allowed(False)): there a step without its config file has
# no configuration. Reading an older run's logs (and tests that build such logs) keeps them.
_LEGACY_CONFIG = contextvars.ContextVar("lanes_legacy_step_config", default=True)


@contextlib.contextmanager
def legacy_config_allowed(allowed: bool = True):
    token = _LEGACY_CONFIG.set(allowed)
    try:
        yield
    finally:
        _LEGACY_CONFIG.reset(token)


# The runner version of the run being judged (None: the current runner's own run). The audit sets
# it from the report, so a run is judged by the rules of the runner that made it: the checks whose
# raw files changed keep their older evaluation for the runs made before (tools/runner/legacy).
_RUN_VERSION: contextvars.ContextVar[tuple[int, ...] | None] = contextvars.ContextVar("lanes_run_version", default=None)


def parse_runner_version(runner_version: str) -> tuple[int, ...] | None:
    """(0, 2, 1) from "lanes-runner 0.2.1"; None when it names no version (judged as current)."""
    try:
        return tuple(int(p) for p in runner_version.rsplit(" ", 1)[-1].split("."))
    except ValueError:
        return None


@contextlib.contextmanager
def judging_run_of(runner_version: str):
    token = _RUN_VERSION.set(parse_runner_version(runner_version))
    try:
        yield
    finally:
        _RUN_VERSION.reset(token)


def run_predates(version: tuple[int, ...]) -> bool:
    """True when the run being judged was made by a runner older than `version`."""
    made_by = _RUN_VERSION.get()
    return made_by is not None and made_by < version


def step_config(logs_dir: pathlib.Path, step: str) -> dict[str, str]:
    """The configuration the runner gave one step: its <step>.config.json (inside
    legacy_config_allowed(): for older runs without it, their in-log `# lanes-config` lines)."""
    path = config_path(logs_dir, step)
    if path.is_file():
        return load_config(path)
    if _LEGACY_CONFIG.get():
        return legacy_config(read(pathlib.Path(logs_dir) / f"{step}.log"))
    return {}


def legacy_config(log_text: str) -> dict[str, str]:
    return config_values(runner_lines(log_text))


def legacy_config_lines(values: dict[str, str]) -> list[str]:
    """Configuration in the in-log form of older runs (for tests that build such logs)."""
    return [f"# lanes-config {k}={v}" for k, v in values.items()]
