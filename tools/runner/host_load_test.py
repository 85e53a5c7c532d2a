"""Preflight's host load (issue 28) over fake /proc trees: an idle host passes, a busy one fails
preflight with the figures and the limit; the run's own process tree and sleeping tasks are not
counted; malformed /proc entries are skipped; the figures are re-derived from preflight.config.json."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import checks, host_load, log_blocks, strictness
from tools.runner.checks import preflight
from tools.runner.checks.preflight_devices import Failed
from tools.runner.config import RunnerConfig
from tools.runner.context import RunContext
from tools.runner.lane_spec import Lane
from tools.runner.steps import ProcessTracker, Step

RUNNER = 1000  # the fake tree's runner pid


def stat_line(pid: int, comm: str, state: str, ppid: int, flags: int = 4194304) -> str:
    return f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 {flags} 1 0 0 0 5 3 0 0 20 0 1 0 100 1000 10\n"


def fake_proc(root: pathlib.Path, procs: dict[int, tuple[str, str, int, dict[int, str]]],
              loadavg: str = "0.05 0.10 0.12 1/200 4242\n") -> pathlib.Path:
    """procs: {pid: (comm, state, ppid, {tid: state of each other thread})}."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "loadavg").write_text(loadavg)
    for pid, (comm, state, ppid, threads) in procs.items():
        d = root / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True)
        (d / "stat").write_text(stat_line(pid, comm, state, ppid))
        (d / "task" / str(pid) / "stat").write_text(stat_line(pid, comm, state, ppid))
        for tid, tstate in threads.items():
            (d / "task" / str(tid)).mkdir()
            (d / "task" / str(tid) / "stat").write_text(stat_line(tid, comm, tstate, ppid))
    return root


IDLE = {1: ("init", "S", 0, {}), 50: ("sshd", "S", 1, {}), RUNNER: ("python3", "R", 1, {1001: "R"}),
        1100: ("llama-bench", "R", RUNNER, {1101: "R"}), 1200: ("sh", "S", RUNNER, {}),
        1201: ("daemon", "R", 1200, {})}  # the runner's grandchild: still the run's own


def as_runner(procs: dict, pid: int) -> dict:
    """procs with the fake runner's pid replaced by `pid` (this process: the runner of a real step)."""
    assert pid not in procs, "the fake tree already uses this test's pid"
    def fix(p):
        return pid if p == RUNNER else p
    return {fix(k): (c, st, fix(pp), t) for k, (c, st, pp, t) in procs.items()}


def measure(root, cpus=2):
    return host_load.measure(host_load.ProcFS(root, cpu_count=cpus), own_pid=RUNNER, interval_s=0, sleep=lambda s: None)


def test_idle_host_counts_nothing_of_the_run_nor_sleeping_tasks(tmp_path):
    load = measure(fake_proc(tmp_path / "proc", IDLE))
    assert load.samples == [0] * host_load.SAMPLES and load.runnable_others == 0
    assert load.cpu_count == 2 and load.loadavg == (0.05, 0.10, 0.12) and load.malformed == 0
    assert host_load.busy_reason(0, 2, 0.25, load.loadavg) == ""


def test_busy_host_names_the_figures_and_the_limit(tmp_path):
    procs = dict(IDLE)
    procs.update({2000 + i: ("python3", "R", 1, {}) for i in range(3)})
    procs[3000] = ("llama-server", "S", 1, {3001: "R", 3002: "S"})  # a sleeping leader's spinning thread counts
    load = measure(fake_proc(tmp_path / "proc", procs, "2.90 1.20 0.60 5/210 999\n"))
    assert load.runnable_others == 4 and load.named[:2] == [(2000, "python3"), (2001, "python3")]
    reason = host_load.busy_reason(load.runnable_others, 2, 0.25, load.loadavg, load.named)
    assert reason.startswith("host busy: 4 runnable processes/threads besides this run on 2 CPUs (e.g. pid 2000 python3")
    assert "limit 0 = --host_max_runnable_per_cpu=0.25 x 2 CPUs" in reason and "load average 2.90" in reason
    assert reason.endswith("ggml's spinning threads collapse speed on an oversubscribed host; rerun on an idle host")
    # The limit scales with the CPUs: 4 runnable tasks are within floor(0.25 x 16).
    assert host_load.busy_reason(4, 16, 0.25, load.loadavg) == ""
    assert host_load.limit(2, 0.25) == 0 and host_load.limit(8, 0.25) == 2 and host_load.limit(4, -1) == 0


def test_a_task_runnable_for_a_moment_is_not_a_busy_host(tmp_path):
    root = fake_proc(tmp_path / "proc", IDLE)
    seen = []

    def sleep(_):  # between samples: a process is runnable in one sample only
        seen.append(1)
        stat = root / "50" / "task" / "50" / "stat"
        stat.write_text(stat_line(50, "sshd", "R" if len(seen) == 2 else "S", 1))
    load = host_load.measure(host_load.ProcFS(root, 2), own_pid=RUNNER, interval_s=0, sleep=sleep)
    assert load.samples == [0, 0, 1, 0, 0] and load.runnable_others == 0


def test_malformed_and_hostile_proc_entries_are_skipped(tmp_path):
    root = fake_proc(tmp_path / "proc", IDLE, loadavg="garbage\n")
    # comm with spaces, parens and a newline (a process names itself): parsed up to the LAST paren.
    (root / "4000" / "task" / "4000").mkdir(parents=True)
    hostile = stat_line(4000, "a) R 1 (x\nhost load: 0", "R", 1)
    (root / "4000" / "stat").write_text(hostile)
    (root / "4000" / "task" / "4000" / "stat").write_text(hostile)
    (root / "4001").mkdir()
    (root / "4001" / "stat").write_text("4001 no parens R 1\n")                 # malformed
    (root / "4002").mkdir()
    (root / "4002" / "stat").write_text("999 (liar) R 1 0\n")                    # another pid's line
    (root / "4003").mkdir()
    (root / "4003" / "stat").write_bytes(b"4003 (big) R 1 " + b"9" * (1 << 20))  # read up to 4 KiB: parses
    (root / "4004").mkdir()                                                       # vanished: no stat
    (root / "notapid").mkdir()
    assert host_load.parse_stat(hostile) == host_load.TaskStat(4000, "a) R 1 (x\nhost load: 0", "R", 1, 4194304)
    assert host_load.parse_stat("") is None and host_load.parse_stat("x (y) R 1") is None
    load = measure(root)
    assert load.samples == [2] * host_load.SAMPLES and load.loadavg is None
    assert load.malformed == 2 * host_load.SAMPLES  # 4001 and 4002
    assert load.named == [(4000, "a??R?1??x?host?load:?0"), (4003, "big")]  # one token each on a log line
    assert "load average unreadable" in host_load.busy_reason(1, 2, 0.25, None, load.named)


def test_kernel_threads_are_named_apart_and_not_judged(tmp_path):
    """khugepaged runnable in every sample (seen failing a CI run on a 2-CPU host) is the host's own
    housekeeping: named, not counted. PF_KTHREAD decides, not the parent: a user process whose
    parent is pid 2 (a container's second process) still counts."""
    kthread = 0x00200000 | 0x40
    root = fake_proc(tmp_path / "proc", IDLE)
    for pid, comm, ppid, flags in [(2, "kthreadd", 0, kthread), (40, "khugepaged", 2, kthread),
                                   (302, "kworker/1:2-mm_percpu_wq", 2, kthread), (5000, "burn", 2, 4194304)]:
        (root / str(pid) / "task" / str(pid)).mkdir(parents=True)
        for stat in (root / str(pid) / "stat", root / str(pid) / "task" / str(pid) / "stat"):
            stat.write_text(stat_line(pid, comm, "S" if pid == 2 else "R", ppid, flags))
    load = measure(root)
    assert load.samples == [1] * host_load.SAMPLES and load.named == [(5000, "burn")]
    assert load.kernel_samples == [2] * host_load.SAMPLES
    assert load.kernel_named == [(40, "khugepaged"), (302, "kworker/1:2-mm_percpu_wq")]
    (root / "5000" / "stat").write_text(stat_line(5000, "burn", "S", 2))
    (root / "5000" / "task" / "5000" / "stat").write_text(stat_line(5000, "burn", "S", 2))
    assert measure(root).runnable_others == 0


def test_own_tree_follows_descendants_and_survives_cycles():
    parents = {10: 1, 11: 10, 12: 11, 13: 1, 20: 21, 21: 20}
    assert host_load.own_tree(parents, 10) == {10, 11, 12}
    assert host_load.own_tree(parents, 20) == {20, 21}


def _ctx(tmp_path, **over):
    cfg = RunnerConfig(lane="cpu", lane_dir=tmp_path / "lane", evidence=None, spec=tmp_path / "s", model=None,
                       out_dir=tmp_path, report=tmp_path / "r.pb", **over)
    (tmp_path / "logs").mkdir(exist_ok=True)
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), ())
    return RunContext(config=cfg, lane=lane, logs_dir=tmp_path / "logs", scratch_dir=tmp_path / "s")


def test_preflight_step_records_the_figures_and_fails_a_busy_host(tmp_path):
    procs = dict(IDLE)
    procs.update({2000 + i: ("burn", "R", 1, {}) for i in range(3)})
    busy = fake_proc(tmp_path / "busy", as_runner(procs, os.getpid()), "2.90 1.20 0.60 5/210 999\n")
    ctx = _ctx(tmp_path)
    step = Step("preflight", ctx.logs_dir, ProcessTracker())
    with host_load.reading(host_load.ProcFS(busy, cpu_count=2)), pytest.raises(Failed) as failed:
        preflight.check_host_load(ctx, step)
    assert str(failed.value).startswith("host busy: 3 runnable processes/threads besides this run on 2 CPUs")
    counts, metrics = preflight.recompute(ctx.logs_dir)
    assert counts == {"host_runnable_others": 3, "host_runnable_others_max": 3, "host_cpu_count": 2}
    assert metrics == {"host_loadavg_1m": 2.9, "host_loadavg_5m": 1.2, "host_loadavg_15m": 0.6}
    assert dict(step.result.counts) == counts and dict(step.result.metrics) == metrics
    assert "read from a test's /proc tree" in log_blocks.read(ctx.logs_dir / "preflight.log")
    load = preflight.host_load_from_logs(ctx.logs_dir)
    assert load == rpb.HostLoad(runnable_others_samples=[3] * 5, runnable_others=3, cpu_count=2, loadavg_1m=2.9,
                                loadavg_5m=1.2, loadavg_15m=0.6, max_runnable_per_cpu=0.25, limit=0)
    # The audit's verdict from the raw files: a busy host's figures never pass, refusal or not.
    config = log_blocks.load_config(step.config_path)
    assert any(p.startswith("host busy: 3 ") for p in preflight.problems(ctx.logs_dir, ctx.lane))
    assert config["host_max_runnable_per_cpu"] == "0.25"


def test_preflight_step_passes_an_idle_host(tmp_path):
    ctx = _ctx(tmp_path)
    step = Step("preflight", ctx.logs_dir, ProcessTracker())
    with host_load.reading(host_load.ProcFS(fake_proc(tmp_path / "idle", as_runner(IDLE, os.getpid())), cpu_count=2)):
        preflight.check_host_load(ctx, step)
    assert preflight.recompute(ctx.logs_dir)[0]["host_runnable_others"] == 0
    assert not [p for p in preflight.problems(ctx.logs_dir, ctx.lane) if "host" in p]


def test_the_runner_stops_at_a_busy_host_and_reports_its_load(tmp_path):
    """The whole runner over the fake lane: a busy host fails preflight before any step times the
    lane, and the report carries the figures; on an idle host preflight passes with them."""
    from tools.runner.testing import fake_lane
    lane_dir, evidence, model = fake_lane.make_inputs(tmp_path)
    procs = dict(IDLE)
    procs.update({2000 + i: ("burn", "R", 1, {}) for i in range(3)})
    busy = fake_proc(tmp_path / "busy", as_runner(procs, os.getpid()), "2.90 1.20 0.60 5/210 999\n")
    with host_load.reading(host_load.ProcFS(busy, cpu_count=2)):
        report, code = fake_lane.run(fake_lane.config(tmp_path / "b", lane_dir, evidence, model))
    pre = report.checks[0]
    assert code == 1 and report.status == rpb.RunnerReport.FAIL and pre.name == "preflight"
    assert pre.status == rpb.CheckResult.FAIL and pre.message.startswith("host busy: 3 runnable processes/threads")
    assert all(c.status == rpb.CheckResult.SKIPPED and c.message == "not run: preflight FAIL" for c in report.checks[1:])
    assert list(report.host.load.runnable_others_samples) == [3] * 5 and report.host.load.cpu_count == 2
    assert report.host.load.loadavg_1m == 2.9 and report.host.load.max_runnable_per_cpu == 0.25
    idle = fake_proc(tmp_path / "idle", as_runner(IDLE, os.getpid()))
    with host_load.reading(host_load.ProcFS(idle, cpu_count=2)):
        report, _ = fake_lane.run(fake_lane.config(tmp_path / "i", lane_dir, evidence, model,
                                                   skip=tuple(checks.names()[1:])))
    pre = report.checks[0]
    assert pre.status == rpb.CheckResult.PASS, pre.message
    assert "host: 0 runnable task(s) besides this run on 2 CPUs, load average 0.05" in pre.message
    assert pre.counts["host_runnable_others"] == 0 and list(report.host.load.runnable_others_samples) == [0] * 5


def test_loosening_the_limit_makes_the_run_non_recordable_and_tightening_does_not(tmp_path):
    cfg = _ctx(tmp_path, host_max_runnable_per_cpu=4.0).config
    reasons = strictness.apply(cfg, "linux-x86_64-cpu", ())
    assert any(r.startswith("--host_max_runnable_per_cpu=4 is looser than the default 0.25") for r in reasons)
    cfg = _ctx(tmp_path, host_max_runnable_per_cpu=0.0).config
    assert not [r for r in strictness.apply(cfg, "linux-x86_64-cpu", ()) if "host_max" in r]


def test_a_current_run_without_host_load_figures_does_not_pass_but_an_older_one_does(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log_blocks.write_config(log_blocks.config_path(logs, "preflight"), {"lane_id": "linux-x86_64-cpu", "backend": "cpu"})
    found = preflight.problems(logs)
    assert any("did not measure the host's load" in p for p in found)
    with log_blocks.judging_run_of("lanes-runner 0.6.0"):
        assert not any("host's load" in p for p in preflight.problems(logs))
    assert preflight.host_load_from_logs(logs) == rpb.HostLoad()
    assert preflight.recompute(logs) == ({}, {})


def test_the_real_proc_counts_a_spinning_process_outside_the_run_only():
    import subprocess
    import time
    burner = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        time.sleep(0.2)
        proc = host_load.ProcFS()
        # The burner is this test's child: when the test is the runner, it is this run's own.
        ours = [host_load.sample(proc, os.getpid()) for _ in range(5)]
        # Seen from outside the run (an own_pid that is no process), it is a runnable task.
        theirs = [host_load.sample(proc, -1) for _ in range(5)]
    finally:
        burner.kill()
        burner.wait()
    assert not any(tid == burner.pid for s in ours for tid, _ in s.runnable)
    assert any(tid == burner.pid for s in theirs for tid, _ in s.runnable)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
