"""Preflight: fail closed, per backend. The host must have the hardware, driver and runtime the lane
needs; the artifact, evidence and model must be present. Nothing else runs when this fails.

UNAVAILABLE = this host cannot run the lane (no GPU, no driver, wrong OS/arch);
FAIL = the lane or its inputs are broken (missing binary, corrupt model, unreadable evidence).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import statistics
import time

from google.protobuf import text_format

from proto import runner_report_pb2 as rpb
from tools.evidence import build_evidence
from tools.runner import backends, gpu_set, host_load, lane_files, log_blocks, model_file, run_lock
from tools.runner.checks.base import Check, option
from tools.runner.checks.preflight_devices import (
    BACKEND_CHECKS,
    Failed,
    Unavailable,
    check_cpu,
    detect_cpu_variant,
    gpu_memory_used_mib,
    parse_mib,
    parse_nvidia_smi_query,
    parse_vulkaninfo_summary,
)
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult
# Runs made by an older runner did not measure the host's load: not judged on its absence.
HOST_LOAD_SINCE = (0, 7, 0)


def _take_device_lock(lane_id: str, path: pathlib.Path) -> int:
    """The device's flock (run_lock.try_flock), or Failed naming the live run that holds it. A
    holder whose runner is dead is a watchdog reaping it: waited for, briefly."""
    deadline = time.monotonic() + 15
    while (fd := run_lock.try_flock(path)) is None:
        holder = run_lock.read_lock(path) or {}
        if run_lock.runner_alive(holder) or time.monotonic() > deadline:
            who = (f"runner pid {holder.get('runner_pid')} of lane {holder.get('lane_id', '?')}, staging "
                   f"{', '.join(holder.get('staging_dirs', []))}" if run_lock.runner_alive(holder)
                   else "a process that has not written its lock yet")
            stop = (run_lock.cleanup_command(holder) if run_lock.runner_alive(holder)
                    else f"`fuser -v {run_lock.flock_path(path)}` shows the holder")
            raise Failed(f"another run is using device {path.name.removesuffix('.lock.json')} for {lane_id}: {who} "
                         f"(lock {path}); wait for it, or stop it: {stop}")
        time.sleep(0.1)
    return fd


def check_leftovers(ctx: RunContext, step: Step) -> None:
    """Issue 15: a previous run on this device (any lane) that was killed. This run takes the
    device's flock first (a live holder is a FAIL naming the command that stops it); a lock file
    left under a free flock belongs to a dead run: its processes that provably belong to it (pid +
    start time + argv[0], or its LANES_RUN_ID) are killed and its staging dirs removed, and this is
    logged. Then this run writes its lock, before it starts any process."""
    cfg, lane = ctx.config, ctx.lane
    path = run_lock.lock_path(lane.backend, cfg.gpu_index)
    fd = _take_device_lock(lane.lane_id, path)
    try:
        _reap_previous(ctx, step, path)
        lock = run_lock.RunLock(path, ctx.tracker.run_id, lane.lane_id, lane.backend, cfg.gpu_index,
                                [str(ctx.scratch_dir)], str(cfg.out_dir), flock_fd=fd)
        try:
            lock.write()
        except OSError as err:
            raise Failed(f"cannot write the run lock {path}: {err.strerror or err}; set {run_lock.LOCK_DIR_ENV} "
                         "to a writable directory") from err
    except BaseException:
        run_lock.release_flock(path, fd)
        raise
    ctx.tracker.lock = lock
    lock.start_watchdog()
    step.log(f"run lock {path} (run id {ctx.tracker.run_id}, watchdog {'on' if lock._watch_w is not None else 'off'})")
    # A multi-GPU run holds every GPU it splits over: a run on any of them waits or is refused.
    for index in range(cfg.gpu_index + 1, cfg.gpu_index + getattr(cfg, "gpus", 1)):
        other = run_lock.lock_path(lane.backend, index)
        fd = _take_device_lock(lane.lane_id, other)
        ctx.tracker.device_flocks.append((other, fd))
        _reap_previous(ctx, step, other)
        step.log(f"device lock {run_lock.flock_path(other)} (GPU {index} of the split)")


def _reap_previous(ctx: RunContext, step: Step, path: pathlib.Path) -> None:
    """With the device's flock held: what a dead run left (its lock file, processes, staging)."""
    cfg, lane = ctx.config, ctx.lane
    previous = run_lock.read_lock(path)
    if previous is not None:
        # The flock is ours, so its runner let go; alive means a runner that predates the flock.
        if previous and run_lock.runner_alive(previous) and previous.get("runner_pid") != os.getpid():
            raise Failed(f"another run is using device {path.name.removesuffix('.lock.json')}: runner pid "
                         f"{previous.get('runner_pid')} of lane {previous.get('lane_id', '?')} (lock {path}, staging "
                         f"{', '.join(previous.get('staging_dirs', []))}); wait for it, or stop it: "
                         + run_lock.cleanup_command(previous))
        # GPU lanes: what the dead run still holds, measured before and (by check_cuda) after the kill.
        if lane.backend == "cuda" and run_lock.run_processes(previous) and shutil.which("nvidia-smi"):
            try:
                held = gpu_memory_used_mib(step, cfg.gpu_index)
                step.result.metrics["leftover_memory_used_before_reap_mib"] = held
                step.log(f"leftover: GPU {cfg.gpu_index} memory used {held:.0f} MiB before killing the dead run's processes")
            except (Unavailable, ValueError, IndexError, KeyError):
                pass
        killed, lines = run_lock.reap_dead_run(previous, path)
        step.result.counts["leftover_processes_killed"] = len(killed)
        step.log(f"leftover: previous run {previous.get('run_id', '?')} (runner pid {previous.get('runner_pid', '?')}) "
                 f"is dead; lock {path} taken over")
        for line in lines:
            step.log(f"leftover: {line}")
        # Reaping is reported (log, counts, the PASS message), not disqualifying: check_cuda measures
        # the memory baseline after it.
        if killed and lane.backend == "cuda":
            time.sleep(1.0)  # the driver frees a killed context's memory asynchronously
    for line in run_lock.sweep_stale_staging() + run_lock.sweep_lock_temps(path.parent):
        step.log(f"leftover: {line}")


def check_host_load(ctx: RunContext, step: Step) -> None:
    """Issue 28: a busy host fails preflight, before any step times the lane (host_load.py says what
    is counted). The samples, CPU count, /proc/loadavg and the limit go into preflight.config.json
    (the runner's, digested), whence recompute() and problems() re-derive the figures and verdict."""
    cfg = ctx.config
    load = host_load.measure()
    allowed = host_load.limit(load.cpu_count, cfg.host_max_runnable_per_cpu)
    step.config("host_runnable_samples", ",".join(str(n) for n in load.samples))
    step.config("host_cpu_count", load.cpu_count)
    step.config("host_loadavg", "" if load.loadavg is None else " ".join(f"{v:.2f}" for v in load.loadavg))
    step.config("host_max_runnable_per_cpu", f"{cfg.host_max_runnable_per_cpu:g}")
    step.config("host_kernel_runnable_samples", ",".join(str(n) for n in load.kernel_samples))
    if host_load.injected():  # a test's fake /proc: said in the log, never mistaken for this host's
        step.log(f"host load: read from a test's /proc tree ({host_load.reader().root}), not this host's")
    named = ", ".join(f"pid {t} {c}" for t, c in load.named) or "none"
    step.log(f"host load: runnable tasks besides this run per sample {load.samples} (median {load.runnable_others}, "
             f"limit {allowed} on {load.cpu_count} CPUs); load average "
             f"{' '.join(f'{v:.2f}' for v in load.loadavg) if load.loadavg else 'unreadable'}; runnable: {named}"
             + (f"; {load.malformed} malformed /proc stat entries skipped" if load.malformed else ""))
    kernel = ", ".join(f"pid {t} {c}" for t, c in load.kernel_named) or "none"
    step.log(f"host load: runnable kernel threads per sample {load.kernel_samples}, not counted (the host's own "
             f"housekeeping): {kernel}")
    _host_load_figures(step.result.counts, step.result.metrics, load.samples, load.cpu_count, load.loadavg)
    busy = host_load.busy_reason(load.runnable_others, load.cpu_count, cfg.host_max_runnable_per_cpu,
                                 load.loadavg, load.named)
    if busy:
        raise Failed(busy)


def _host_load_figures(counts, metrics, samples: list[int], cpu_count: int,
                       loadavg: tuple[float, float, float] | None) -> None:
    counts["host_runnable_others"] = int(statistics.median_low(samples)) if samples else 0
    counts["host_runnable_others_max"] = max(samples, default=0)
    counts["host_cpu_count"] = cpu_count
    if loadavg is not None:
        for name, value in zip(("1m", "5m", "15m"), loadavg):
            metrics[f"host_loadavg_{name}"] = round(value, 2)


def host_load_from_config(config: dict[str, str]) -> tuple[list[int], int, tuple[float, float, float] | None, float] | None:
    """(samples, CPU count, load average, host_max_runnable_per_cpu) preflight recorded; None when it
    measured none (an older run, or preflight stopped before). ValueError when they do not parse."""
    if "host_runnable_samples" not in config:
        return None
    samples = [int(v) for v in config["host_runnable_samples"].split(",") if v]
    if not samples or any(v < 0 for v in samples):
        raise ValueError(f"host_runnable_samples {config['host_runnable_samples']!r} is not a list of counts")
    loadavg = host_load.parse_loadavg(config.get("host_loadavg", "")) if config.get("host_loadavg") else None
    return samples, int(config["host_cpu_count"]), loadavg, float(config["host_max_runnable_per_cpu"])


def host_load_from_logs(logs_dir: pathlib.Path) -> rpb.HostLoad:
    """The report's host.load, from preflight.config.json (empty when preflight measured none)."""
    try:
        found = host_load_from_config(log_blocks.step_config(pathlib.Path(logs_dir), "preflight"))
    except (ValueError, KeyError):
        found = None
    if found is None:
        return rpb.HostLoad()
    samples, cpus, loadavg, per_cpu = found
    out = rpb.HostLoad(runnable_others_samples=samples, runnable_others=int(statistics.median_low(samples)),
                       cpu_count=cpus, max_runnable_per_cpu=per_cpu, limit=host_load.limit(cpus, per_cpu))
    if loadavg is not None:
        out.loadavg_1m, out.loadavg_5m, out.loadavg_15m = (round(v, 2) for v in loadavg)
    return out


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    """GPU count and memory from nvidia-smi's own output in preflight.log; leftover-run figures
    (issue 15) from the `leftover:` lines and the nvidia-smi query that precedes them."""
    text = log_blocks.read(logs_dir / "preflight.log")
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    config = log_blocks.step_config(logs_dir, "preflight")
    gpu_index = int(config.get("gpu_index", "0"))
    queries = [c for c in log_blocks.commands(text) if c.argv == backends.NVIDIA_QUERY and c.exit_code == 0]
    reap_measured = re.search(r"^leftover: GPU \d+ memory used", text, re.MULTILINE)
    if reap_measured and queries:
        metrics["leftover_memory_used_before_reap_mib"] = parse_mib(parse_nvidia_smi_query(queries[0].output)[gpu_index]["memory_used"])
    if re.search(r"^leftover: previous run ", text, re.MULTILINE):
        counts["leftover_processes_killed"] = len(re.findall(r"^leftover: killed pid \d+ ", text, re.MULTILINE))
    probes = [c for c in log_blocks.commands(text) if c.argv[-1:] and c.argv[-1].endswith("vulkan_probe.py") and c.exit_code == 0]
    if probes and "vulkan_device_index" in config:  # check_vulkan got as far as its figures
        metrics["vulkan_device_count"] = len(parse_vulkaninfo_summary(probes[-1].output))
    if "runtime libraries resolved for" in text and queries:  # check_cuda got as far as its figures
        rows = parse_nvidia_smi_query(queries[-1].output)
        metrics["gpu_count"] = len(rows)
        metrics["memory_total_mib"] = parse_mib(rows[gpu_index]["memory_total"])
    load = host_load_from_config(config)
    if load is not None:
        _host_load_figures(counts, metrics, *load[:3])
    return counts, metrics


def device_class_from_logs(logs_dir: pathlib.Path) -> rpb.DeviceClass | None:
    """The device class preflight settled on: its last `device class:` line (the runner's own, not a
    probe's output); None when it logged none or the line does not parse."""
    lines = [l for l in log_blocks.runner_lines(log_blocks.read(pathlib.Path(logs_dir) / "preflight.log")).splitlines()
             if l.startswith("device class: ")]
    if not lines:
        return None
    try:
        return text_format.Parse(lines[-1].removeprefix("device class: "), rpb.DeviceClass())
    except text_format.ParseError:
        return None


def gpu_set_problems(logs_dir: pathlib.Path, dc: rpb.DeviceClass) -> list[str]:
    """A multi-GPU class must be what nvidia-smi printed in this log: its query rows and its
    `topo -m` matrix, re-parsed (fail closed), for the GPUs the step config names."""
    if gpu_set.count(dc) < 2:
        return []
    text = log_blocks.read(pathlib.Path(logs_dir) / "preflight.log")
    config = log_blocks.step_config(pathlib.Path(logs_dir), "preflight")
    queries = [c for c in log_blocks.commands(text) if c.argv == backends.NVIDIA_QUERY and c.exit_code == 0]
    topos = [c for c in log_blocks.commands(text) if c.argv == gpu_set.NVIDIA_TOPO and c.exit_code == 0]
    if not queries or not topos:
        return ["the device class names a GPU set, but preflight.log holds no nvidia-smi query or topo -m output"]
    first, count = int(config.get("gpu_index", "0")), int(config.get("gpus", "0"))
    try:
        rows = parse_nvidia_smi_query(queries[-1].output)
        again = gpu_set.make_gpu_set(rows, list(range(first, first + count)), gpu_set.parse_topology(topos[-1].output))
    except (gpu_set.TopologyError, IndexError, KeyError) as err:
        return [f"the GPU set cannot be re-derived from preflight.log: {err}"]
    if again != dc.gpu_set:
        return [f"the device class's GPU set ({gpu_set.label(dc)}) is not what nvidia-smi printed in preflight.log "
                f"({again.count}x, interconnect {again.interconnect or '?'})"]
    return []


def model_from_logs(logs_dir: pathlib.Path) -> tuple[str, int] | None:
    """(sha256, size) of the model preflight inspected, from its `model:` line."""
    text = log_blocks.runner_lines(log_blocks.read(pathlib.Path(logs_dir) / "preflight.log"))
    found = re.findall(r"^model: .* size=(\d+) sha256=([0-9a-f]{64})$", text, re.MULTILINE)
    return (found[-1][1], int(found[-1][0])) if found else None


def problems(logs_dir: pathlib.Path, lane: object = None) -> list[str]:
    """Why the raw files fail preflight (empty = PASS): a refusal it recorded, or a PASS path it did
    not complete (device class, evidence of this lane, the model inspected). Runs made before the
    step config held lane_id/backend: `lane` (the spec's entry) and the run's build_evidence.pb."""
    config = log_blocks.step_config(pathlib.Path(logs_dir), "preflight")
    lane_id = config.get("lane_id") or getattr(lane, "lane_id", "")
    backend = config.get("backend") or getattr(lane, "backend", "")
    if not lane_id or not backend:
        return ["preflight.config.json lacks lane_id/backend and no lane spec entry gives them: the verdict cannot be re-derived"]
    if config.get("refused"):
        return [config["refused"]]
    out = []
    try:
        load = host_load_from_config(config)
    except (ValueError, KeyError) as err:
        return [f"preflight.config.json's host load figures do not parse: {err}"]
    if load is None and not log_blocks.run_predates(HOST_LOAD_SINCE):
        out.append("preflight did not measure the host's load (no host_runnable_samples in preflight.config.json)")
    elif load is not None:
        samples, cpus, loadavg, per_cpu = load
        busy = host_load.busy_reason(int(statistics.median_low(samples)), cpus, per_cpu, loadavg)
        if busy:
            out.append(busy)
    dc = device_class_from_logs(logs_dir)
    if dc is None:
        out.append("preflight logged no readable device class")
    elif dc.backend != backend:
        out.append(f"device class backend {dc.backend!r} is not the lane's {backend!r}")
    else:
        out += gpu_set_problems(logs_dir, dc)
    evidence_lane = config.get("evidence_lane_id")
    if evidence_lane is None:
        from tools.runner.checks import artifact_integrity  # the run's bound build evidence
        ev = artifact_integrity.evidence_beside(logs_dir)
        evidence_lane = ev.lane_id if ev is not None else ""
    if evidence_lane != lane_id:
        out.append(f"build evidence is for lane {evidence_lane or '(none read)'}, not {lane_id}")
    model = model_from_logs(logs_dir)
    if model is None or model[0] != config.get("model_sha256", model[0]):
        out.append("preflight did not inspect the model (no `model:` line matching the step config)")
    return out


def check_binaries(lane_dir, targets) -> list[str]:
    problems = []
    for t in targets:
        p = lane_dir / "bin" / t
        if not p.is_file():
            problems.append(f"missing artifact bin/{t} in {lane_dir}")
        elif not os.access(p, os.X_OK):
            problems.append(f"artifact bin/{t} in {lane_dir} is not executable")
    return problems


def host_device_class(ctx: RunContext, step: Step) -> rpb.DeviceClass:
    """This host's device class for the lane, as preflight reads it: the CPU baseline, then for an
    accelerator lane the backend's device, driver and runtime (Unavailable when absent). A CPU lane's
    ggml variant (compute_capability) is read later, from the lane's own binaries (detect_cpu_variant)."""
    dc = check_cpu(ctx, step)
    gpus = getattr(ctx.config, "gpus", 1)
    if gpus != 1 and ctx.lane.backend != "cuda":
        raise Failed(f"--gpus={gpus}: multi-GPU device classes are read for CUDA lanes only (nvidia-smi topo -m); "
                     f"lane {ctx.lane.lane_id} is {ctx.lane.backend}")
    if ctx.lane.is_accelerator:
        isa = list(dc.isa_features)
        dc = BACKEND_CHECKS[backends.get(ctx.lane.backend).device_probe](ctx, step)
        dc.isa_features.extend(isa)
    return dc


def run_preflight(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg, lane = ctx.config, ctx.lane
    step.config("lane_id", lane.lane_id)  # what problems() judges the log against
    step.config("backend", lane.backend)
    try:
        # Leftovers of a killed run first: nothing of this run may start before the lock is ours.
        check_leftovers(ctx, step)
        # The host first (UNAVAILABLE = cannot run here at all): the CPU baseline every x86_64 lane
        # is built for, then the backend's device, driver and runtime.
        ctx.device.CopyFrom(host_device_class(ctx, step))
        dc = ctx.device
        step.log(f"device class: {dc}".replace("\n", " "))
        # Then the host's load, before any lane process runs (host_load.py): a busy host would time
        # the lane wrong, so nothing is timed on it.
        check_host_load(ctx, step)
        # Then the inputs (FAIL = the lane or its inputs are broken).
        problems = check_binaries(cfg.lane_dir, lane.targets)
        if lane.is_accelerator:
            if cfg.cpu_lane_dir is None:
                problems.append("accelerator lanes need --cpu_lane_dir (the CPU lane, for model-level parity and speed-up)")
            else:
                problems += check_binaries(cfg.cpu_lane_dir, ("llama-logits", "llama-bench"))
                if not problems:
                    try:
                        ctx.reference_evidence, ctx.reference_evidence_digest = lane_files.verify_reference_lane(
                            cfg.cpu_lane_dir, cfg.cpu_lane_evidence, lane.arch)
                    except lane_files.ReferenceLaneError as err:
                        problems.append(str(err))
                    else:
                        step.config("reference_lane_evidence_digest", ctx.reference_evidence_digest)
        if problems:
            raise Failed("; ".join(problems))
        if lane.cpu_variants:
            ctx.device.compute_capability = detect_cpu_variant(ctx, step)
            step.log(f"device class: {ctx.device}".replace("\n", " "))
        if cfg.evidence is None:
            raise Failed("no --evidence given: the run must be bound to the lane's build evidence")
        try:
            ctx.evidence = build_evidence.read_evidence(cfg.evidence)
        except build_evidence.EvidenceError as err:
            raise Failed(str(err)) from err
        if ctx.evidence.lane_id != lane.lane_id:
            raise Failed(f"evidence {cfg.evidence} is for lane {ctx.evidence.lane_id}, not {lane.lane_id}")
        try:
            ctx.model_info = model_file.inspect_model(cfg.model)
        except model_file.ModelError as err:
            raise Failed(str(err)) from err
        info = ctx.model_info
        step.log(f"model: {info.path} name={info.name} arch={info.architecture} tensors={info.n_tensors} "
                 f"size={info.size} sha256={info.sha256}")
        if info.oracle_gaps and not lane.is_accelerator:
            # The CPU lane's op_oracle and reference_parity compare with independent oracles only:
            # refused here, before any lane process runs, rather than failed by construction later.
            raise Failed(f"model {info.path}: the CPU lane's independent oracles cannot check it: "
                         f"{'; '.join(info.oracle_gaps)}; so it cannot be certified on the CPU lane")
        if info.oracle_gaps:
            step.log(f"model: no float64 reference for it ({'; '.join(info.oracle_gaps)}): "
                     "the certified CPU lane is the only reference")
        step.config("evidence_lane_id", ctx.evidence.lane_id)
        step.config("model_sha256", info.sha256)
    except Unavailable as err:
        step.config("refused", f"UNAVAILABLE: {err}")
        return CR.UNAVAILABLE, str(err)
    except Failed as err:
        step.config("refused", f"FAIL: {err}")
        return CR.FAIL, str(err)
    reaped = step.result.counts.get("leftover_processes_killed")
    load = step.result.counts
    note = (f"; host: {load['host_runnable_others']} runnable task(s) besides this run on {load['host_cpu_count']} CPUs, "
            f"load average {step.result.metrics.get('host_loadavg_1m', float('nan')):.2f}")
    note += f"; cleaned up a killed earlier run ({reaped} leftover process(es) killed, see preflight.log)" if reaped else ""
    split = (f"; split over {gpu_set.label(ctx.device)}, split mode {cfg.split_mode or 'layer'}"
             if gpu_set.count(ctx.device) >= 2 else "")
    return CR.PASS, f"{ctx.device.backend} {ctx.device.device_name} ({ctx.device.compute_capability}){split}{note}"


@dataclasses.dataclass(frozen=True)
class Options:
    allow_software_icd: bool = option(False, "Vulkan: accept llvmpipe/lavapipe/SwiftShader (diagnostic, non-recordable).")
    host_max_runnable_per_cpu: float = option(
        0.25, "Preflight fails a busy host: more runnable tasks besides this run (median of samples over ~1 s) "
        "than floor(this x CPUs). Larger is looser (bring-up only: non-recordable).")


CHECK = Check(name="preflight", run=run_preflight, recompute=recompute, problems=problems, options=Options)
