"""Reading step logs back: the `$ <argv>` command blocks Step.run writes, and `# lanes-config` lines.

Recompute functions and the recipe read the runner's own logs through these, so a figure is derived
from the tool output that follows a command line, never from a line the runner wrote about it.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex

_EXIT = re.compile(r"^# exit (-?\d+) after", re.MULTILINE)
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
        m = _EXIT.match(line)
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
    return len(_EXIT.findall(log_text)) - len(commands(log_text))


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
