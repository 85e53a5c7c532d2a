"""Cleanup: nothing the runner started outlives its step, the runner's temp files are gone, and on
GPU lanes device memory is back to the baseline taken after preflight.

After every step that starts processes, the runner calls after_step(): it reads /proc for each child
that step started (and for any descendant of the runner), and on CUDA lanes nvidia-smi's memory.used,
and appends the raw observations to logs/cleanup.steps.log. A leftover fails that step's cleanup
sub-result (and the leftover is then stopped, so the next step starts clean). The cleanup check runs
last, makes the same observations for the whole run, and aggregates the per-step results:
counts step.<step>.processes_started / processes_left, metrics step.<step>.memory_used_mib.
recompute() derives every figure from cleanup.steps.log and cleanup.log alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

from proto import runner_report_pb2 as rpb
from tools.runner import backends, log_blocks, run_lock, steps
from tools.runner.checks.base import Check, option
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

STEPS_LOG = "cleanup.steps.log"
NVIDIA_QUERY = backends.NVIDIA_QUERY
# Teardown is not instantaneous: a killed child may take a moment to leave /proc, and the driver
# to return its memory. Observations are repeated for up to this long before a leftover is declared.
GRACE_S = 5.0
_SECTION = re.compile(r"^## (\S+)(?: .*)?$")
# `<kind> pid N[ exe "<json string>"]: gone | /proc/N/stat: <stat line>`; kind: tracked (started by
# the tracker), descendant (below the runner: a subreaper's orphans too), environ (LANES_RUN_ID=<this
# run's id> in its environment, wherever it is).
_PROC = re.compile(r'^(tracked|descendant|environ) pid (\d+)(?: exe ("(?:[^"\\]|\\.)*"))?: (gone|/proc/\d+/stat: .*)$')
_ENVIRON_SCAN = re.compile(r"^environ scan: (\d+) processes read, (\d+) unreadable \(skipped\)$", re.MULTILINE)
# /proc/<pid>/environ is read up to this many bytes (a lane can make its environment huge).
ENVIRON_READ_MAX = 1 << 20
_MIB = re.compile(r",\s*([0-9.]+)\s*MiB\s*$")


def steps_log_path(logs_dir: pathlib.Path) -> pathlib.Path:
    return logs_dir / STEPS_LOG


def _stat(pid: int) -> str | None:
    """The raw /proc/<pid>/stat line of a process, None if gone."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().strip()
    except OSError:
        return None


def _state_ppid(stat: str) -> tuple[str, int]:
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _alive(stat: str | None) -> bool:
    """Present and not a zombie (a zombie has exited; it only awaits reaping)."""
    return stat is not None and _state_ppid(stat)[0] != "Z"


def _alive_raw(observed: str) -> bool:
    """Whether a logged observation ("gone" or "/proc/<pid>/stat: <stat line>") shows a live process."""
    if observed == "gone":
        return False
    try:
        return _alive(observed.partition(": ")[2])
    except (ValueError, IndexError):
        return True  # an unreadable observation is not proof that the process is gone


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive(st := _stat(int(entry))):
            children.setdefault(_state_ppid(st)[1], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def run_id_processes(run_id: str, exclude: tuple[int, ...] = ()) -> tuple[list[int], int, int]:
    """Live processes with LANES_RUN_ID=<run_id> in their environment (a daemonised child of a lane
    binary keeps it: it re-parents away, not out of the run). Bounded reads of /proc/*/environ;
    (pids, processes read, processes whose environment could not be read: skipped, counted)."""
    needle = f"{run_lock.RUN_ID_ENV}={run_id}".encode()
    found: list[int] = []
    read = unreadable = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [], 0, 0
    for entry in entries:
        if not entry.isdigit() or int(entry) in exclude or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                raw = f.read(ENVIRON_READ_MAX)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        except OSError:
            unreadable += 1
            continue
        read += 1
        if needle in raw.split(b"\0") and _alive(_stat(int(entry))):
            found.append(int(entry))
    return sorted(found), read, unreadable


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return "(unreadable)"


def _one_line(text: str) -> str:
    """A /proc field the lane controls (its comm) can hold a newline: it must not start a log line."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _not_ours(ctx: RunContext) -> tuple[int, ...]:
    """The runner's own helper processes: the run lock's watchdog (a subreaping runner's child)."""
    lock = getattr(ctx.tracker, "lock", None)
    pid = getattr(lock, "watchdog_pid", None)
    return (pid,) if pid else ()


def _observe(ctx: RunContext, pids: list[int]) -> tuple[list[str], bool, list[int]]:
    """/proc lines for the tracked pids, the runner's live descendants and every live process with
    this run's LANES_RUN_ID; (lines, anything left, the untracked ones left)."""
    deadline = time.monotonic() + GRACE_S
    skip = _not_ours(ctx)
    while True:
        tracked = {p: _stat(p) for p in pids}
        by_env, read, unreadable = run_id_processes(ctx.tracker.run_id, skip)
        by_env = [p for p in by_env if p not in tracked]
        extra = [p for p in descendants(os.getpid()) if p not in tracked and p not in skip and p not in by_env]
        left = any(_alive(s) for s in tracked.values()) or bool(extra) or bool(by_env)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    lines = [f"tracked pid {p}: {'gone' if s is None else f'/proc/{p}/stat: {_one_line(s)}'}" for p, s in tracked.items()]
    lines += [f"{kind} pid {p} exe {json.dumps(_exe(p))}: /proc/{p}/stat: {_one_line(_stat(p) or '(exited while read)')}"
              for kind, group in (("environ", by_env), ("descendant", extra)) for p in group]
    lines.append(f"environ scan: {read} processes read, {unreadable} unreadable (skipped)")
    return lines, left, by_env + extra


def _kill_strays(ctx: RunContext, pids: list[int]) -> list[str]:
    """SIGKILLs what outlived its step outside the tracker (and the process groups they are in, never
    the runner's own), then reaps those that re-parented to the runner."""
    own_group = os.getpgid(0)
    lines = []
    for pid in pids:
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
                lines.append(f"# killed process group {group} of pid {pid}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            lines.append(f"# killed pid {pid}")
    tracked = set(ctx.tracker.pids)
    deadline = time.monotonic() + GRACE_S
    for pid in pids:
        while pid not in tracked and _alive(_stat(pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        if pid not in tracked:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # a subreaper's orphan: ours to reap
    return lines


def gpu_indices(gpu_index: int, gpus: int) -> list[int]:
    """The GPUs a run uses: --gpu_index and, with --gpus=N, the N-1 after it."""
    return list(range(gpu_index, gpu_index + max(gpus, 1)))


def _ctx_indices(ctx: RunContext) -> list[int]:
    return gpu_indices(ctx.config.gpu_index, getattr(ctx.config, "gpus", 1))


def memory_used_set(nvidia_smi_output: str, indices: list[int]) -> list[float] | None:
    """memory.used of each GPU in `indices`; None when any of them cannot be read."""
    used = [memory_used_mib(nvidia_smi_output, i) for i in indices]
    return None if any(u is None for u in used) else used


def _above(used: list[float] | None, baseline: list[float] | None, tolerance: float) -> bool:
    return baseline is not None and used is not None and any(u - b > tolerance for u, b in zip(used, baseline))


def _memory_probe(ctx: RunContext, baseline: list[float] | None) -> list[str]:
    """`$ nvidia-smi ...` blocks (raw output), repeated within the grace period while any of the run's
    GPUs is above tolerance."""
    lines: list[str] = []
    deadline = time.monotonic() + GRACE_S
    while True:
        argv = backends.memory_probe(ctx.device.vendor) or NVIDIA_QUERY
        lines.append("$ " + " ".join(argv))
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            out, code = (res.stdout + res.stderr).rstrip("\n"), res.returncode
        except (OSError, subprocess.TimeoutExpired) as err:
            out, code = f"{type(err).__name__}: {err}", 127
        lines += [out, f"# exit {code} after 0s"]
        used = memory_used_set(out, _ctx_indices(ctx)) if code == 0 else None
        if not _above(used, baseline, ctx.config.memory_tolerance_mib):
            return lines
        if time.monotonic() >= deadline:
            return lines
        time.sleep(0.5)


def memory_used_mib(nvidia_smi_output: str, gpu_index: int) -> float | None:
    rows = [line for line in nvidia_smi_output.splitlines() if len(line.split(",")) == 5]
    if gpu_index >= len(rows):
        return None
    m = _MIB.search(rows[gpu_index])
    return float(m.group(1)) if m else None


def _gpu(ctx: RunContext) -> bool:
    """Device memory is measured where the driver's own tool can (backends.MEMORY_PROBES, by vendor)."""
    probe = backends.memory_probe(ctx.device.vendor)
    return ctx.lane.is_accelerator and probe is not None and shutil.which(probe[0]) is not None


def after_step(ctx: RunContext, step_name: str, pids: list[int]) -> None:
    """Appends one section to cleanup.steps.log: what is left of `step_name`'s processes."""
    path = steps_log_path(ctx.logs_dir)
    first = not path.exists()
    lines: list[str] = []
    if first:
        lines += [f"# lanes-config backend={ctx.lane.backend}", f"# lanes-config gpu_index={ctx.config.gpu_index}",
                  f"# lanes-config memory_tolerance_mib={ctx.config.memory_tolerance_mib!r}"]
        if getattr(ctx.config, "gpus", 1) >= 2:  # every GPU of a split run is measured
            lines.append(f"# lanes-config gpus={ctx.config.gpus}")
        if _gpu(ctx):
            lines += ["## baseline (device memory before any lane binary ran)"] + _memory_probe(ctx, None)
    # Observed after every step: a daemon of a step that tracked no process of its own is found too.
    proc_lines, left, strays = _observe(ctx, pids)
    if pids or first or left:
        lines += [f"## {step_name} ({len(pids)} processes started)"] + _env_lines(ctx, step_name) + proc_lines
        if _gpu(ctx) and pids:
            lines += _memory_probe(ctx, _baseline(path.read_text() if path.exists() else "\n".join(lines), ctx))
        if left:
            # Recorded above; now stopped so that the next step is not measured with it running.
            for proc in ctx.tracker.procs:
                if proc.pid in pids and proc.poll() is None:
                    ctx.tracker.stop(proc)
                    lines.append(f"# stopped leftover pid {proc.pid}")
            lines += _kill_strays(ctx, strays)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _baseline(text: str, ctx: RunContext) -> list[float] | None:
    for cmd in _sections(text).get("baseline", {}).get("commands", []):
        return memory_used_set(cmd.output, _ctx_indices(ctx)) if cmd.exit_code == 0 else None
    return None


def _sections(text: str) -> dict[str, dict]:
    """{section name: {"proc": [(kind, pid, alive)], "commands": [Command]}} of a cleanup log."""
    out: dict[str, dict] = {}
    name, body = None, []

    def close():
        if name is not None:
            procs = []
            for line in body:
                m = _PROC.match(line)
                if m:
                    exe = json.loads(m.group(3)) if m.group(3) else ""
                    procs.append((m.group(1), int(m.group(2)), _alive_raw(m.group(4)), exe))
            envs = [line[len("environment "):] for line in log_blocks.runner_lines("\n".join(body)).splitlines()
                    if line.startswith("environment {")]
            out[name] = {"proc": procs, "commands": log_blocks.commands("\n".join(body)), "environment": envs}

    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            close()
            name, body = m.group(1), []
        elif name is not None:
            body.append(line)
    close()
    return out


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str]]:
    steps_text = log_blocks.read(logs_dir / STEPS_LOG)
    final_text = log_blocks.read(logs_dir / "cleanup.log")
    cfg = log_blocks.legacy_config(steps_text)  # the runner writes this file whole, tool output in blocks
    gpu_index = int(cfg.get("gpu_index", "0"))
    indices = gpu_indices(gpu_index, int(cfg.get("gpus", "1")))
    multi = len(indices) > 1
    tolerance = float(cfg.get("memory_tolerance_mib", "64"))
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    problems: list[str] = []
    sections = _sections(steps_text)
    baseline = None
    if "baseline" in sections:
        cmds = sections["baseline"]["commands"]
        baseline = memory_used_set(cmds[-1].output, indices) if cmds and cmds[-1].exit_code == 0 else None
        if baseline is None:
            problems.append("baseline device memory could not be read")
        else:
            metrics["memory_before_mib"] = baseline[0]  # the first GPU, as for a one-GPU run
            if multi:
                for i, b in zip(indices, baseline):
                    metrics[f"gpu{i}.memory_before_mib"] = b
        metrics["memory_tolerance_mib"] = tolerance

    def judge(where: str, sec: dict, key_prefix: str) -> bool:
        """Records one section's figures; True when something was left."""
        tracked = [p for p in sec["proc"] if p[0] == "tracked"]
        left = [p[1] for p in sec["proc"] if p[2]]
        counts[f"{key_prefix}processes_started"] = len(tracked)
        counts[f"{key_prefix}processes_left"] = len(left)
        if tracked_left := [p[1] for p in tracked if p[2]]:
            problems.append(f"{where}: processes still running: {tracked_left}")
        for kind, pid, alive, exe in sec["proc"]:
            if alive and kind != "tracked":
                how = "with this run's LANES_RUN_ID" if kind == "environ" else "below the runner"
                problems.append(f"{where}: pid {pid} exe {json.dumps(exe)} of this run, {how}, was still running (killed)")
        if "baseline" in sections and tracked and not sec["commands"]:
            problems.append(f"{where}: device memory not observed")
            return True
        if "baseline" in sections and sec["commands"]:
            last = sec["commands"][-1]
            used = memory_used_set(last.output, indices) if last.exit_code == 0 else None
            if used is None:
                problems.append(f"{where}: device memory could not be read")
                return True
            name = f"{key_prefix}memory_used_mib" if key_prefix else "memory_after_mib"
            metrics[name] = used[0]
            if multi:
                for i, u in zip(indices, used):
                    metrics[f"{key_prefix}gpu{i}.{name.removeprefix(key_prefix)}"] = u
            if _above(used, baseline, tolerance):
                for i, u, b in zip(indices, used, baseline):
                    if u - b > tolerance:
                        gpu = f"GPU {i} " if multi else ""
                        problems.append(f"{where}: {gpu}device memory used {u:.0f} MiB > baseline {b:.0f} + {tolerance:g} MiB")
                return True
        return bool(left)

    checked = failed = 0
    for name, sec in sections.items():
        if name == "baseline":
            continue
        checked += 1
        failed += judge(f"after {name}", sec, f"step.{name}.")
    counts["steps_checked"] = checked
    counts["steps_failed"] = failed
    final = _sections(final_text)
    if "final" not in final:
        problems.append("cleanup.log has no final observation")
    else:
        judge("end of run", final["final"], "")
        if m := _ENVIRON_SCAN.search(final_text):
            counts["environ_unreadable"] = int(m.group(2))
        m = re.search(r"^temp dir \S+: (removed|present, (\d+) files)$", final_text, re.MULTILINE)
        counts["temp_files_left"] = int(m.group(2)) if m and m.group(2) else 0
        if not m or m.group(1) != "removed":
            problems.append("the runner's temp dir is still present")
    if not log_blocks.run_predates((0, 3, 0)):  # environments are recorded since runner 0.3.0
        counts["child_environments"], env_problems = _env_problems({**sections, **final})
        problems += env_problems
    return counts, metrics, problems


def _env_lines(ctx: RunContext, step_name: str | None) -> list[str]:
    """`environment <json>` lines: the environment record(s) of a step's processes (all that are
    left, at the end of the run), taken from the tracker (steps.Step.record_env)."""
    records = ctx.tracker.env_records
    names = [step_name] if step_name is not None else sorted(records)
    return [f"environment {json.dumps(dict(records.pop(n), step=n), sort_keys=True)}" for n in names if n in records]


def _env_problems(sections: dict[str, dict]) -> tuple[int, list[str]]:
    """(environments recorded, why any is not the clean one steps.child_env builds)."""
    n, out = 0, []
    for name, sec in sections.items():
        for raw in sec["environment"]:
            try:
                record = json.loads(raw)
            except ValueError as err:
                out.append(f"{name}: environment record is not JSON ({err})")
                continue
            n += len(record.get("environments", []))
            out += steps.env_record_problems(record, f"environment of {record.get('step', name)}")
    return n, out


def environment_problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the recorded child environments of a run (so far) are not the clean ones."""
    sections = {**_sections(log_blocks.read(logs_dir / STEPS_LOG)), **_sections(log_blocks.read(logs_dir / "cleanup.log"))}
    return _env_problems(sections)[1]


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    counts, metrics, _ = evaluate(logs_dir)
    return counts, metrics


def run_cleanup(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    shutil.rmtree(ctx.scratch_dir, ignore_errors=True)
    proc_lines, _, strays = _observe(ctx, ctx.tracker.pids)
    lines = (["## final (every process the run started)"] + _env_lines(ctx, None) + proc_lines
             + _kill_strays(ctx, strays))
    if ctx.scratch_dir.exists():
        lines.append(f"temp dir {ctx.scratch_dir}: present, {sum(1 for _ in ctx.scratch_dir.rglob('*'))} files")
    else:
        lines.append(f"temp dir {ctx.scratch_dir}: removed")
    if _gpu(ctx):
        lines += _memory_probe(ctx, _baseline(log_blocks.read(steps_log_path(ctx.logs_dir)), ctx))
    for line in lines:
        step.log(line)
    if steps_log_path(ctx.logs_dir).is_file():
        step.extra_logs.append(steps_log_path(ctx.logs_dir))
    counts, metrics, problems = evaluate(ctx.logs_dir)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    if problems:
        return CR.FAIL, "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else "")
    return CR.PASS, (f"{counts.get('processes_started', 0)} processes started, none left after any of "
                     f"{counts['steps_checked']} steps; temp dir removed"
                     + (f"; device memory {metrics['memory_after_mib']:.0f} MiB vs baseline {metrics['memory_before_mib']:.0f}"
                        if "memory_after_mib" in metrics else
                        (f"; device memory not measured (no memory probe for {ctx.device.vendor or 'this'} devices)"
                         if ctx.lane.is_accelerator else "")))


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    return evaluate(logs_dir)[2]


@dataclasses.dataclass(frozen=True)
class Options:
    memory_tolerance_mib: float = option(64.0, "cleanup: allowed GPU memory growth, MiB.")


CHECK = Check(name="cleanup", run=run_cleanup, recompute=recompute, problems=problems,
              figures=("processes_started", "processes_left", "memory_before_mib", "memory_after_mib"), options=Options)
