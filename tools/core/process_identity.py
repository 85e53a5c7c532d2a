"""Process identity: a pid plus its start time names one process (a reused pid starts later).

Stdlib only. Used by the runner's run lock and by the evidence writer's crash-safe publishing, so it
sits in the lowest stage (tools/evidence) that both import.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

_LINUX = sys.platform.startswith("linux")


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields from 3 (state) on; comm may contain spaces


def start_time(pid: int) -> int | None:
    """When `pid` started (Linux: clock ticks since boot, /proc/<pid>/stat field 22; elsewhere: epoch
    seconds from ps), None if there is no such live process. With the pid it names one process:
    a reused pid has a later start time."""
    if _LINUX or os.path.isdir("/proc/self"):
        f = _proc_stat(pid)
        if f is None or f[0] in ("Z", "X"):  # a zombie has exited; it only awaits reaping
            return None
        return int(f[19])
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not out.strip():
        return None
    return int(time.mktime(time.strptime(out.strip(), "%a %b %d %H:%M:%S %Y")))


def same_process(pid: int, start: int) -> bool:
    return pid > 0 and start_time(pid) == start
