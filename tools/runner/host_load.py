"""How busy the host is, measured by preflight before any check that times the lane (issue 28).

ggml's CPU threads spin at their barriers: on an oversubscribed host one descheduled thread stalls
the others, and a run's speed collapses (pp 277 tok/s on a busy host where an idle one gives ~43,800)
while nothing said why. So preflight samples the tasks (threads) in state R, running or waiting for
a CPU, from /proc/<pid>/task/<tid>/stat a few times over about a second, leaving out the runner's own
process tree (the runner and every descendant: its own children are this run), and reads
/proc/loadavg and the CPU count. A sleeping task (S, D, I, ...) is not counted; D (uninterruptible)
is load average's business, not a CPU's. Kernel threads (PF_KTHREAD in the stat flags, which no
process can set for itself) are sampled and named apart but not judged: khugepaged or a kworker
runnable for a second is the host's own housekeeping, which no operator can stop, and it only ever
makes the lane look slower.

The judged figure is the median of the samples (a task that runs for a moment is not a busy host; a
CPU burner is runnable in every sample). The load average is recorded and named in the message but
not judged: it is a 1-minute mean that still carries the minute before the run (the build, the
previous test) and counts tasks in D state.

/proc is untrusted text (a process names itself: comm may hold any byte but NUL): every read is
bounded, a malformed or vanished entry is skipped and counted, never raised. Tests read a fake /proc
tree through `reading(ProcFS(root, cpu_count))`, a context variable the command line cannot reach:
a recordable run always reads the host's /proc.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import pathlib
import re
import statistics
import time
from collections.abc import Callable, Iterator

MAX_STAT_BYTES = 4096        # /proc/<pid>/stat is < 1 KiB; comm is at most 64 bytes
MAX_LOADAVG_BYTES = 256
MAX_PIDS = 1 << 16           # /proc entries read per sample (pid_max is usually 4M; hosts run far fewer)
MAX_TASKS_PER_PID = 1 << 12  # threads of one process read per sample
MAX_NAMED = 8                # runnable tasks named in the message and the log
SAMPLES = 5
INTERVAL_S = 0.25

# After comm's closing paren: state, ppid, then pgrp, session, tty_nr, tpgid and flags.
_STAT_TAIL = re.compile(r"\s*(\S)\s+(-?\d+)\s(?:\s*-?\d+\s+-?\d+\s+-?\d+\s+-?\d+\s+(\d+)\s)?")
PF_KTHREAD = 0x00200000  # include/linux/sched.h
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+:@=/-]")


def safe_comm(comm: str) -> str:
    """A process's self-chosen name, safe to put on a log line (no newline, no spaces, bounded)."""
    return _UNSAFE.sub("?", comm[:32]) or "?"


@dataclasses.dataclass(frozen=True)
class TaskStat:
    pid: int      # the task's id (a thread's tid)
    comm: str
    state: str
    ppid: int
    flags: int = 0

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD)


def parse_stat(text: str) -> TaskStat | None:
    """pid, comm, state, ppid of one /proc/<pid>/stat line; None when it does not parse. comm is
    whatever lies between the first '(' and the LAST ')' (a name may contain parens and spaces)."""
    head, open_paren, rest = text.partition("(")
    close = rest.rfind(")")
    if not open_paren or close < 0:
        return None
    m = _STAT_TAIL.match(rest[close + 1:])
    try:
        pid = int(head.strip())
    except ValueError:
        return None
    if m is None or pid <= 0:
        return None
    return TaskStat(pid=pid, comm=rest[:close], state=m.group(1), ppid=int(m.group(2)), flags=int(m.group(3) or 0))


class ProcFS:
    """Bounded reads of a /proc tree: the host's (root=/proc) or a test's fake directory."""

    def __init__(self, root: str | pathlib.Path = "/proc", cpu_count: int | None = None):
        self.root = pathlib.Path(root)
        self._cpu_count = cpu_count

    def cpu_count(self) -> int:
        return self._cpu_count if self._cpu_count is not None else (os.cpu_count() or 1)

    def _read(self, path: pathlib.Path, limit: int) -> str | None:
        try:
            with open(path, "rb") as f:
                return f.read(limit).decode("utf-8", errors="replace")
        except OSError:  # vanished, not readable (hidepid), not a file
            return None

    def loadavg(self) -> str | None:
        return self._read(self.root / "loadavg", MAX_LOADAVG_BYTES)

    def _numeric(self, directory: pathlib.Path, limit: int) -> list[int]:
        out: list[int] = []
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    if entry.name.isdigit() and entry.name.isascii():
                        out.append(int(entry.name))
                        if len(out) >= limit:
                            break
        except OSError:
            pass
        return out

    def pids(self) -> list[int]:
        return self._numeric(self.root, MAX_PIDS)

    def stat(self, pid: int) -> str | None:
        return self._read(self.root / str(pid) / "stat", MAX_STAT_BYTES)

    def tasks(self, pid: int) -> list[int]:
        return self._numeric(self.root / str(pid) / "task", MAX_TASKS_PER_PID)

    def task_stat(self, pid: int, tid: int) -> str | None:
        return self._read(self.root / str(pid) / "task" / str(tid) / "stat", MAX_STAT_BYTES)


_READER: contextvars.ContextVar[ProcFS | None] = contextvars.ContextVar("lanes_host_load_proc", default=None)


@contextlib.contextmanager
def reading(proc: ProcFS) -> Iterator[ProcFS]:
    """Tests: preflight reads `proc` (a fake /proc tree) instead of the host's."""
    token = _READER.set(proc)
    try:
        yield proc
    finally:
        _READER.reset(token)


def reader() -> ProcFS:
    """The /proc preflight reads: the host's, unless a test set another (reading())."""
    return _READER.get() or ProcFS()


def injected() -> bool:
    return _READER.get() is not None


@dataclasses.dataclass
class Sample:
    runnable: list[tuple[int, str]]  # (tid, comm) of each runnable task besides the run's own
    malformed: int = 0               # stat files that did not parse (vanished ones are not counted)
    kernel: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # runnable kernel threads


def own_tree(parents: dict[int, int], root_pid: int) -> set[int]:
    """root_pid and every process below it, from a {pid: ppid} map (cycles cannot loop)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {root_pid}, [root_pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def sample(proc: ProcFS, own_pid: int) -> Sample:
    """One look at the host: the tasks in state R outside own_pid's process tree."""
    stats: dict[int, TaskStat] = {}
    malformed = 0
    for pid in proc.pids():
        text = proc.stat(pid)
        if text is None:
            continue
        st = parse_stat(text)
        if st is None or st.pid != pid:
            malformed += 1
            continue
        stats[pid] = st
    mine = own_tree({pid: st.ppid for pid, st in stats.items()}, own_pid)
    runnable: list[tuple[int, str]] = []
    kernel: list[tuple[int, str]] = []
    for pid, st in sorted(stats.items()):
        if pid in mine:
            continue
        if st.kernel_thread:
            if st.state == "R":
                kernel.append((pid, st.comm))
            continue
        tids = proc.tasks(pid)
        if not tids:  # no task/ directory readable: the process's main thread stands for it
            if st.state == "R":
                runnable.append((pid, st.comm))
            continue
        for tid in tids:
            text = proc.task_stat(pid, tid)
            if text is None:
                continue
            task = parse_stat(text)
            if task is None or task.pid != tid:
                malformed += 1
            elif task.state == "R":
                runnable.append((tid, task.comm))
    return Sample(runnable=runnable, malformed=malformed, kernel=kernel)


def parse_loadavg(text: str | None) -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages of /proc/loadavg; None when it does not parse."""
    parts = (text or "").split()
    try:
        values = tuple(float(p) for p in parts[:3])
    except ValueError:
        return None
    if len(values) != 3 or not all(0 <= v < 1e6 for v in values):
        return None
    return values  # type: ignore[return-value]


@dataclasses.dataclass
class HostLoad:
    samples: list[int]                       # runnable tasks besides this run, per sample
    cpu_count: int
    loadavg: tuple[float, float, float] | None
    named: list[tuple[int, str]]             # some runnable tasks of the busiest sample (tid, safe comm)
    malformed: int = 0
    kernel_samples: list[int] = dataclasses.field(default_factory=list)  # runnable kernel threads, not judged
    kernel_named: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    @property
    def runnable_others(self) -> int:
        """The median sample, rounded down."""
        return int(statistics.median_low(self.samples)) if self.samples else 0


def measure(proc: ProcFS | None = None, own_pid: int | None = None, samples: int = SAMPLES,
            interval_s: float = INTERVAL_S, sleep: Callable[[float], None] = time.sleep) -> HostLoad:
    proc = proc or reader()
    own_pid = os.getpid() if own_pid is None else own_pid
    counts: list[int] = []
    kernel_counts: list[int] = []
    busiest: Sample | None = None
    kernel_busiest: Sample | None = None
    malformed = 0
    for i in range(samples):
        if i:
            sleep(interval_s)
        s = sample(proc, own_pid)
        counts.append(len(s.runnable))
        kernel_counts.append(len(s.kernel))
        malformed += s.malformed
        if busiest is None or len(s.runnable) > len(busiest.runnable):
            busiest = s
        if kernel_busiest is None or len(s.kernel) > len(kernel_busiest.kernel):
            kernel_busiest = s
    named = [(tid, safe_comm(comm)) for tid, comm in (busiest.runnable if busiest else [])[:MAX_NAMED]]
    kernel_named = [(tid, safe_comm(comm)) for tid, comm in (kernel_busiest.kernel if kernel_busiest else [])[:MAX_NAMED]]
    return HostLoad(samples=counts, cpu_count=proc.cpu_count(), loadavg=parse_loadavg(proc.loadavg()),
                    named=named, malformed=malformed, kernel_samples=kernel_counts, kernel_named=kernel_named)


def limit(cpu_count: int, max_runnable_per_cpu: float) -> int:
    """How many runnable tasks besides the run the host may have: floor(CPUs x the option)."""
    return int(max(0.0, max_runnable_per_cpu) * max(cpu_count, 0) + 1e-9)


def busy_reason(runnable_others: int, cpu_count: int, max_runnable_per_cpu: float,
                loadavg: tuple[float, float, float] | None, named: list[tuple[int, str]] = ()) -> str:
    """Why the host is too busy to time the lane ("" when it is not)."""
    allowed = limit(cpu_count, max_runnable_per_cpu)
    if runnable_others <= allowed:
        return ""
    load = "unreadable" if loadavg is None else f"{loadavg[0]:.2f}"
    who = f" (e.g. {', '.join(f'pid {t} {c}' for t, c in named)})" if named else ""
    return (f"host busy: {runnable_others} runnable processes/threads besides this run on {cpu_count} CPUs{who} "
            f"(limit {allowed} = --host_max_runnable_per_cpu={max_runnable_per_cpu:g} x {cpu_count} CPUs; median of "
            f"the samples), load average {load}; ggml's spinning threads collapse speed on an oversubscribed host; "
            "rerun on an idle host")
