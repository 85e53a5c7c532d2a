"""Cleanup: nothing the runner started is still running, its temp files are gone, and on GPU lanes
device memory is back to the baseline taken at preflight."""

from __future__ import annotations

import os
import pathlib
import shutil

from proto import runner_report_pb2 as rpb
from tools.runner import preflight
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a live process from /proc/<pid>/stat, None if gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def live_pids(pids: list[int]) -> list[int]:
    """Tracked PIDs still present and not zombies (a zombie has exited; it only awaits reaping)."""
    return [p for p in pids if (st := _stat(p)) is not None and st[0] != "Z"]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None and st[0] != "Z":
            children.setdefault(st[1], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def run_cleanup(ctx: RunContext, step: Step) -> tuple[int, str]:
    problems = []
    leftover = sorted(set(live_pids(ctx.tracker.pids)) | set(descendants(os.getpid())))
    step.result.counts["processes_started"] = len(ctx.tracker.pids)
    step.result.counts["processes_left"] = len(leftover)
    if leftover:
        problems.append(f"processes still running: {leftover}")
    shutil.rmtree(ctx.scratch_dir, ignore_errors=True)
    if ctx.scratch_dir.exists():
        problems.append(f"temp dir {ctx.scratch_dir} could not be removed")
    step.result.counts["temp_files_left"] = sum(1 for _ in ctx.scratch_dir.rglob("*")) if ctx.scratch_dir.exists() else 0
    if ctx.lane.backend == "cuda" and ctx.memory_before_mib is not None:
        after = preflight.gpu_memory_used_mib(step, ctx.config.gpu_index)
        step.result.metrics["memory_before_mib"] = ctx.memory_before_mib
        step.result.metrics["memory_after_mib"] = after
        if after - ctx.memory_before_mib > ctx.config.memory_tolerance_mib:
            problems.append(f"GPU memory used {after:.0f} MiB > baseline {ctx.memory_before_mib:.0f} MiB "
                            f"+ {ctx.config.memory_tolerance_mib:.0f}")
    if problems:
        return CR.FAIL, "; ".join(problems)
    return CR.PASS, f"{len(ctx.tracker.pids)} processes started, none left; temp dir removed"
