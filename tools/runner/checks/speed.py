"""Useful speed: llama-bench on the lane (and, for accelerators, on the CPU lane of the same host in
the same run), the backend llama-bench says it ran, and for accelerators the fraction of the
memory-bandwidth roofline that token generation reaches on a bandwidth-bound model.

Floors:
- CPU lane: absolute tokens/s floors from the policy (speed.tg_tokens_per_s, speed.pp_tokens_per_s).
- Accelerator lanes: relative to the CPU lane measured here, now. Absolute floors cannot catch a
  fallback: on the H200 host the CPU lane itself does pp512 81,624 and tg128 4,417 tok/s on the tiny
  model, above the old CUDA floors (10,000 / 1,000).
  * pp: lane pp >= min_speedup_roofline_pp (default 2.0) x CPU lane pp on the roofline model, where
    prompt processing is compute bound. On the tiny model it is not: once the CPU lane loaded its
    native variant with llamafile's kernels (106k tok/s pp512 on the H200 host), CUDA measured x2.08
    and Vulkan x1.96 there, against x3.2 before; a ratio that close to a fallback's ~x1 tells
    nothing. The tiny-model ratios stay in the record (speedup_pp, speedup_tg), without a floor.
  * tg: lane tg >= min_speedup_roofline_tg (default 4.0) x CPU lane tg on the roofline model.
    On the tiny model tg is launch-latency bound on both sides (measured x0.98), so no ratio there
    tells a GPU from a CPU; on a 4 GB model tg is memory-bandwidth bound: measured x34 (HBM
    4,249 GB/s vs ~90 GB/s effective on the host CPU). 4.0 leaves ~8x margin for hosts with more
    CPU bandwidth, and still fails a lane whose weights sit in host memory (~x1) or half of them
    (< x2).
- Every bench must name the lane's backend in its JSON (`backends`; accelerators also a `gpu_info`
  device and n_gpu_layers > 0), and an accelerator lane's bench log must show full offload.

Roofline (accelerators): bytes = the weights resident in device memory, summed from the backend's own
`load_tensors: CUDA0 model buffer size = X MiB` lines of the roofline bench (llama-bench -v); the
token-embedding table stays in host memory (CPU_Mapped) and is excluded: one row of it is read per
token. Bandwidth = tools/runner/cuda/membw.cu, compiled and run inside this step (its output is
digested); --hbm_bandwidth_gbs replaces it only as a bring-up override (non-recordable).

Raw files (all in step.extra_logs): speed.<bench>.json (llama-bench stdout), speed.<bench>.log
(its stderr), speed.membw.json / speed.membw.log. recompute() derives every figure from them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from proto import runner_report_pb2 as rpb
from tools.runner import backends, exits, log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

# ggml backend registry names, as llama-bench prints them in "backends".
# Device buffer names in load_tensors lines (CUDA0, ...); anything else (CPU, CPU_Mapped, CUDA_Host,
# CPU_REPACK) is host memory.
_BUFFER_LINE = re.compile(r"^.*load_tensors:\s+(\S+) model buffer size =\s*([0-9.]+) MiB\s*$", re.MULTILINE)
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
MEMBW_SOURCE = pathlib.Path(__file__).resolve().parents[1] / "cuda" / "membw.cu"
CPU_MEMBW_SOURCE = pathlib.Path(__file__).resolve().parents[1] / "cpu_membw.py"

# Bench labels -> raw files speed.<label>.json / speed.<label>.log.
LANE, CPU_LANE, ROOFLINE_LANE, ROOFLINE_CPU_LANE = "lane", "cpu_lane", "roofline_lane", "roofline_cpu_lane"
PEER_LANE, ROOFLINE_PEER_LANE = "peer_lane", "roofline_peer_lane"
UPSTREAM = "upstream"


def parse_bench_tests(text: str) -> list[dict]:
    """The tests of `llama-bench -o json` (a JSON array of objects), from its stdout."""
    for m in re.finditer(r"^\[", text, flags=re.MULTILINE):
        try:
            value, _ = json.JSONDecoder().raw_decode(text[m.start():])
        except ValueError:
            continue
        if isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
            return value
    raise ValueError("no JSON array of tests in llama-bench output")


def bench_figures(tests: list[dict]) -> dict[str, float]:
    """pp/tg tokens per second (+ stddev, sizes) and the model's file bytes."""
    out: dict[str, float] = {}
    for t in tests:
        n_prompt, n_gen = int(t.get("n_prompt", 0)), int(t.get("n_gen", 0))
        kind = "pp" if n_prompt > 0 and n_gen == 0 else "tg" if n_gen > 0 and n_prompt == 0 else None
        if kind is None:
            continue
        out[f"{kind}_tokens_per_s"] = float(t["avg_ts"])
        out[f"{kind}_stddev"] = float(t.get("stddev_ts", 0.0))
        out[f"{kind}_size"] = n_prompt or n_gen
        out[f"{kind}_repetitions"] = len(t.get("samples_ts", []))
        out["model_bytes"] = float(t.get("model_size", 0))
    if "pp_tokens_per_s" not in out and "tg_tokens_per_s" not in out:
        raise ValueError("llama-bench JSON has neither a prompt nor a generation test")
    return out


def parse_llama_bench_json(text: str) -> dict[str, float]:
    """pp/tg tokens per second and model bytes from `llama-bench -o json` output."""
    return bench_figures(parse_bench_tests(text))


def backend_problems(tests: list[dict], backend: str, offload: bool) -> list[str]:
    """What in the JSON contradicts the bench having run on `backend` (a fallback, a wrong build)."""
    want = backends.get(backend).bench_backend
    problems = []
    for t in tests:
        named = [b.strip() for b in str(t.get("backends", "")).split(",") if b.strip()]
        what = f"test n_prompt={t.get('n_prompt')} n_gen={t.get('n_gen')}"
        if backend == "cpu":
            if named != ["CPU"]:
                problems.append(f"{what}: backends {t.get('backends')!r}, not the CPU lane's 'CPU'")
            if int(t.get("n_gpu_layers", 0)) > 0 and offload:
                problems.append(f"{what}: n_gpu_layers {t.get('n_gpu_layers')} on the CPU lane")
        else:
            if want not in named:
                problems.append(f"{what}: backends {t.get('backends')!r} does not name {want}")
            if not str(t.get("gpu_info", "")).strip():
                problems.append(f"{what}: gpu_info is empty: llama-bench saw no {want} device")
            if int(t.get("n_gpu_layers", 0)) <= 0:
                problems.append(f"{what}: n_gpu_layers {t.get('n_gpu_layers')}: nothing offloaded")
    return problems


def device_weight_bytes(log_text: str, backend: str) -> tuple[int, int, list[str]]:
    """(device bytes, host bytes, the buffer-size lines used) from load_tensors lines.

    MiB values are printed with 2 decimals: each line is exact to +-5 KiB. Only the first model
    load is summed (llama-bench keeps the model loaded across tests with the same parameters).
    """
    pattern = re.compile((backends.get(backend).device_buffer or r"(?!)") + r"$")
    buffers = model_buffers(log_text)
    device = sum(nbytes for name, nbytes, _ in buffers if pattern.match(name))
    return device, sum(nbytes for _, nbytes, _ in buffers) - device, [line for _, _, line in buffers]


def model_buffers(log_text: str) -> list[tuple[str, int, str]]:
    """(buffer name, bytes, line) of each load_tensors buffer line of the first model load."""
    buffers: list[tuple[str, int, str]] = []
    for m in _BUFFER_LINE.finditer(log_text):
        if any(m.group(1) == name for name, _, _ in buffers):  # a second load of the same model
            break
        buffers.append((m.group(1), round(float(m.group(2)) * 1024 * 1024), m.group(0).strip()))
    return buffers


def parse_offloaded(log_text: str) -> tuple[int, int] | None:
    """(layers offloaded, layers) of the first model load, None when the log has no such line."""
    m = _OFFLOADED.search(log_text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_membw(text: str) -> float:
    """GB/s from a bandwidth probe's JSON: bytes_moved / the upper median sample (membw.cu), or /
    the fastest sample when the probe says `"statistic": "fastest"` (cpu_membw.py: on a shared
    host other processes only ever slow a sample down, so the fastest is the capacity)."""
    runs = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not runs or not all(isinstance(r, dict) for r in runs):
        raise ValueError("membw: no probe output, or a line that is not a JSON object")
    data = runs[0]
    # Several runs of one probe (before and after a bench) pool their samples.
    same = ("bytes_moved", "statistic", "threads", "device")
    if any(tuple(r.get(k) for k in same) != tuple(data.get(k) for k in same) for r in runs):
        raise ValueError("membw: probe runs that moved different byte counts, used different statistics, threads or devices")
    samples = [float(s) for r in runs for s in r["samples_ms"]]
    if not samples or min(samples) <= 0:
        raise ValueError("membw: no positive timing samples")
    statistic = data.get("statistic", "median_high")
    if statistic not in ("median_high", "fastest"):
        raise ValueError(f"membw: unknown statistic {statistic!r}")
    ms = min(samples) if statistic == "fastest" else statistics.median_high(samples)
    return float(data["bytes_moved"]) / (ms / 1e3) / 1e9


def bench_sizes(ctx: RunContext) -> tuple[int, int, int]:
    cfg = ctx.config
    pp, tg, reps = (512, 128, 3) if ctx.lane.is_accelerator else (64, 32, 2)
    return cfg.bench_pp or pp, cfg.bench_tg or tg, cfg.bench_reps or reps


def bench_command(ctx: RunContext, lane_dir, offload: bool, model=None, sizes=None) -> list[str]:
    pp, tg, reps = sizes or bench_sizes(ctx)
    # -v: the loader's log (backend, offload, buffer sizes) goes to stderr, the JSON alone to stdout.
    argv = [str(ctx.bin("llama-bench", lane_dir)), "-m", str(model or ctx.config.model), "-p", str(pp), "-n", str(tg),
            "-r", str(reps), "-t", str(ctx.config.threads), "-o", "json", "-v"]
    return argv + (["-ngl", "99"] if offload else ["-ngl", "0"])


def _run_to_files(ctx: RunContext, step: Step, argv: list[str], stdout: pathlib.Path, stderr: pathlib.Path,
                  timeout_s: float) -> int:
    """Runs argv (tracked) with stdout and stderr in raw files of their own, kept as extra logs."""
    argv = [str(a) for a in argv]
    names = f"stdout: {stdout.name}" + (f", stderr: {stderr.name}" if stderr != stdout else "")
    step.log(f"$ {shlex.join(argv)}  ({names})")
    start = time.monotonic()
    # A file this step already wrote (membw.log: compile, then run) is appended to, never replaced.
    out = open(stdout, "ab" if stdout in step.extra_logs else "wb")
    err = out if stderr == stdout else open(stderr, "ab" if stderr in step.extra_logs else "wb")
    try:
        proc = ctx.tracker.popen(argv, stdout=out, stderr=subprocess.STDOUT if err is out else err)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            ctx.tracker.stop(proc)
            code = 124
    finally:
        out.close()
        if err is not out:
            err.close()
    for p in (stdout, stderr):
        if p not in step.extra_logs:
            step.extra_logs.append(p)
    step.log(f"# exit {code} after {time.monotonic() - start:.2f}s")
    return code


def _bench(ctx: RunContext, step: Step, label: str, argv: list[str]) -> int:
    return _run_to_files(ctx, step, argv, ctx.logs_dir / f"speed.{label}.json", ctx.logs_dir / f"speed.{label}.log",
                         ctx.config.timeout_s)


def _nvcc() -> str | None:
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
                 "/usr/local/cuda/bin/nvcc"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def measure_bandwidth(ctx: RunContext, step: Step) -> str | None:
    """Compiles and runs membw.cu (CUDA lanes); returns a problem or None. Output: speed.membw.*."""
    log, out = ctx.logs_dir / "speed.membw.log", ctx.logs_dir / "speed.membw.json"
    probe = backends.get(ctx.lane.backend).bandwidth_probe
    if probe == "cpu_membw":  # host memory, one copy thread per llama-bench thread
        code = _run_to_files(ctx, step, [sys.executable, CPU_MEMBW_SOURCE, str(ctx.config.threads)], out, log,
                             ctx.config.timeout_s)
        return f"cpu_membw exited {exits.describe(code)} (see {log.name})" if code != 0 else None
    # The probe measures the physical device's memory through CUDA: CUDA lanes, and Vulkan lanes
    # whose device is an NVIDIA GPU (the same HBM, whichever API reads it).
    cuda_device = backends.get(ctx.lane.backend).device_probe == "cuda"
    if not (probe == "cuda_membw" and (cuda_device or ctx.device.vendor == "NVIDIA")):
        return f"no bandwidth probe for backend {ctx.lane.backend} on {ctx.device.vendor or 'this'} devices"
    nvcc = _nvcc()
    if nvcc is None:
        return "nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): cannot compile the bandwidth probe"
    arch = "sm_" + ctx.device.compute_capability.replace(".", "") if cuda_device else "native"
    binary = ctx.scratch_dir / "membw"
    code = _run_to_files(ctx, step, [nvcc, "-O2", f"-arch={arch}", "-o", binary, MEMBW_SOURCE], log, log, 600)
    if code != 0:
        return f"nvcc exited {exits.describe(code)} compiling membw.cu (see {log.name})"
    code = _run_to_files(ctx, step, [binary, str(ctx.config.gpu_index)], out, log, ctx.config.timeout_s)
    return f"membw exited {exits.describe(code)} (see {log.name})" if code != 0 else None


def _load(logs_dir: pathlib.Path, label: str) -> tuple[list[dict] | None, str]:
    path = logs_dir / f"speed.{label}.json"
    if not path.is_file():
        return None, ""
    try:
        return parse_bench_tests(log_blocks.read(path)), log_blocks.read(logs_dir / f"speed.{label}.log")
    except ValueError:
        return [], log_blocks.read(logs_dir / f"speed.{label}.log")


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str], str]:
    """(counts, metrics, problems, summary) from speed.log's config lines and the raw bench files."""
    cfg = log_blocks.step_config(logs_dir, "speed")
    backend = cfg.get("backend", "cpu")
    accel = backend != "cpu"
    counts: dict[str, int] = {}
    m: dict[str, float] = {}
    problems: list[str] = []

    def fnum(key: str) -> float:
        return float(cfg.get(key, "0") or 0)

    lane_tests, lane_log = _load(logs_dir, LANE)
    if not lane_tests:
        problems.append("no llama-bench JSON for the lane" if lane_tests is None else "lane llama-bench JSON unreadable")
        return counts, m, problems, ""
    lane = bench_figures(lane_tests)
    problems += [f"lane bench: {p}" for p in backend_problems(lane_tests, backend, accel)]
    for k in ("pp_tokens_per_s", "pp_stddev", "tg_tokens_per_s", "tg_stddev"):
        if k in lane:
            m[k] = lane[k]
    counts.update({"n_prompt": int(lane.get("pp_size", 0)), "n_gen": int(lane.get("tg_size", 0)),
                   "repetitions": int(lane.get("tg_repetitions", lane.get("pp_repetitions", 0))),
                   "model_bytes": int(lane.get("model_bytes", 0))})
    summary = f"pp{counts['n_prompt']} {m.get('pp_tokens_per_s', 0):.1f} tok/s, tg{counts['n_gen']} {m.get('tg_tokens_per_s', 0):.1f} tok/s"

    if not accel:
        m["floor_tg_tokens_per_s"], m["floor_pp_tokens_per_s"] = fnum("floor_tg_tokens_per_s"), fnum("floor_pp_tokens_per_s")
        for kind in ("tg", "pp"):
            value, floor = m.get(f"{kind}_tokens_per_s"), m[f"floor_{kind}_tokens_per_s"]
            if value is None or not value >= floor:  # `not >=` also fails NaN
                problems.append(f"{kind} {value if value is not None else 'absent'} tok/s below floor {floor:g}")
        summary = _cpu_roofline(logs_dir, cfg, m, counts, problems, summary)
    else:
        offl = parse_offloaded(lane_log)
        if offl is None or offl[0] != offl[1] or offl[1] <= 0:
            problems.append(f"lane bench log shows no full offload (offloaded {offl or 'line absent'})")
        else:
            counts["layers_offloaded"], counts["layers"] = offl
        m["floor_roofline_speedup_pp"] = fnum("min_speedup_roofline_pp")
        m["floor_roofline_speedup_tg"] = fnum("min_speedup_roofline_tg")
        cpu_tests, _ = _load(logs_dir, CPU_LANE)
        if not cpu_tests:
            problems.append("no llama-bench JSON for the CPU lane on this host")
        else:
            problems += [f"CPU lane bench: {p}" for p in backend_problems(cpu_tests, "cpu", False)]
            cpu = bench_figures(cpu_tests)
            for k in ("pp_tokens_per_s", "tg_tokens_per_s"):
                if k in cpu:
                    m[f"cpu_lane_{k}"] = cpu[k]
                    if k in lane and cpu[k] > 0:
                        m[f"speedup_{k[:2]}"] = lane[k] / cpu[k]
        summary += f", x{m.get('speedup_pp', 0):.2f} pp / x{m.get('speedup_tg', 0):.2f} tg vs CPU lane (tiny model)"
        summary = _roofline(logs_dir, cfg, backend, m, counts, problems, summary)
        summary = _peer(logs_dir, cfg, m, problems, summary)
    summary = _upstream(logs_dir, backend, accel, lane, m, problems, summary)
    for k, v in m.items():
        if not math.isfinite(v):
            problems.append(f"{k} is {v}")
    return counts, m, problems, summary


def _roofline(logs_dir, cfg, backend, m, counts, problems, summary) -> str:
    big_tests, big_log = _load(logs_dir, ROOFLINE_LANE)
    if not big_tests:
        problems.append("no roofline bench (accelerator lanes need --roofline_model, a memory-bandwidth-bound GGUF)")
        return summary
    problems += [f"roofline bench: {p}" for p in backend_problems(big_tests, backend, True)]
    big = bench_figures(big_tests)
    m["roofline_tg_tokens_per_s"] = big.get("tg_tokens_per_s", 0.0)
    m["roofline_pp_tokens_per_s"] = big.get("pp_tokens_per_s", 0.0)
    counts["roofline_model_file_bytes"] = int(big.get("model_bytes", 0))
    device, host, lines = device_weight_bytes(big_log, backend)
    counts["roofline_device_weight_bytes"], counts["roofline_host_weight_bytes"] = device, host
    offl = parse_offloaded(big_log)
    if device <= 0 or offl is None or offl[0] != offl[1]:
        problems.append(f"roofline bench log: no device model buffer or no full offload (offloaded {offl}, lines {lines})")
    cpu_tests, _ = _load(logs_dir, ROOFLINE_CPU_LANE)
    if cpu_tests:
        problems += [f"roofline CPU lane bench: {p}" for p in backend_problems(cpu_tests, "cpu", False)]
        cpu_big = bench_figures(cpu_tests)
        for kind in ("pp", "tg"):
            cpu_value = cpu_big.get(f"{kind}_tokens_per_s", 0.0)
            m[f"roofline_cpu_lane_{kind}_tokens_per_s"] = cpu_value
            if cpu_value > 0:
                m[f"roofline_speedup_{kind}"] = m[f"roofline_{kind}_tokens_per_s"] / cpu_value
    sp = m.get("roofline_speedup_pp")
    if sp is None or not sp >= m["floor_roofline_speedup_pp"]:  # `not >=` also fails NaN
        problems.append(f"roofline pp x{sp if sp is not None else 'absent'} vs the CPU lane, below the relative floor "
                        f"x{m['floor_roofline_speedup_pp']:g}")
    rs = m.get("roofline_speedup_tg")
    if rs is None or not rs >= m["floor_roofline_speedup_tg"]:
        problems.append(f"roofline tg x{rs if rs is not None else 'absent'} vs the CPU lane, below the relative floor "
                        f"x{m['floor_roofline_speedup_tg']:g}")
    override = fnum_cfg(cfg, "hbm_bandwidth_gbs_override")
    bw = override if override > 0 else _membw_gbs(logs_dir, problems, "device memory")
    if bw is None:
        return summary
    m["hbm_bandwidth_gbs"] = bw
    m["tg_roofline_fraction"] = m["roofline_tg_tokens_per_s"] * device / (bw * 1e9)
    if not m["tg_roofline_fraction"] <= 1.0:
        problems.append(f"tg reaches {m['tg_roofline_fraction']:.2f} of the roofline: bytes or bandwidth are wrong")
    summary += (f"; roofline: {device} B in device memory ({host} B host-resident excluded) x "
                f"{m['roofline_tg_tokens_per_s']:.0f} tok/s = {100 * m['tg_roofline_fraction']:.1f}% of "
                f"{bw:.0f} GB/s{' (override)' if override > 0 else ' (measured)'}, x{m.get('roofline_speedup_pp', 0):.1f} pp / "
                f"x{m.get('roofline_speedup_tg', 0):.1f} tg vs CPU lane")
    return summary


def _membw_gbs(logs_dir: pathlib.Path, problems: list[str], what: str) -> float | None:
    """GB/s from speed.membw.json, or None with the reason added to problems."""
    membw = logs_dir / "speed.membw.json"
    if not membw.is_file():
        problems.append(f"{what} bandwidth not measured (no speed.membw.json)")
        return None
    try:
        return parse_membw(log_blocks.read(membw))
    except (ValueError, KeyError, TypeError) as err:
        problems.append(f"speed.membw.json unreadable: {err}")
        return None


def tensor_sizes(model: pathlib.Path) -> dict[str, int]:
    """Each tensor's bytes in the GGUF (one read of its header for every figure below)."""
    import gguf  # heavy import, only for the roofline model

    return {t.name: int(t.n_bytes) for t in gguf.GGUFReader(model, "r").tensors}


def rows_only_bytes(model: pathlib.Path | dict[str, int]) -> int:
    """Bytes of the token embedding when the model has a separate output matrix: token generation
    reads one row of it per token, not all of it (with tied embeddings the output matmul reads it)."""
    sizes = model if isinstance(model, dict) else tensor_sizes(model)
    return sizes.get("token_embd.weight", 0) if "output.weight" in sizes else 0


# The CPU backend's buffer over the memory-mapped model file. Its size is the span of the file that
# its tensors cover, so it also spans tensors that were copied out of it into an extra buffer.
MAPPED_BUFFER = "CPU_Mapped"
# An extra buffer (CPU_REPACK, AMX, ...) may hold a repacked copy at most this much larger than the
# model's tensors (block interleaving and AMX compensation terms); more means bytes counted twice.
MAX_EXTRA_BUFFER_GROWTH = 1.02
# Buffer sizes are printed in MiB with 2 decimals (+-5 KiB each).
BUFFER_SLACK = 1e-4


def cpu_weight_bytes_read(buffers: list[tuple[str, int, str]], model_tensor_bytes: int) -> tuple[int, list[str], str]:
    """(bytes of weights read per token before the row-gathered exclusion, problems, how counted).

    Each weight byte is counted once. With only the mapping (the zen4 path) that is the mapped buffer.
    With extra buffers (repacked or AMX copies of tensors, made from the mapping at load time) the
    backend reads the copies and only the tensors left in the mapping: the model's tensor bytes
    (logged from the GGUF) minus what was copied, plus the copies as allocated. The mapped buffer's
    size says nothing here: it spans the copied tensors too (the AMX host's log showed 517.07 MiB
    mapped beside 517.00 MiB of AMX copies of the same weights).
    """
    sizes = {name: nbytes for name, nbytes, _ in buffers}
    mapped = sizes.pop(MAPPED_BUFFER, 0)
    copies = sum(sizes.values())
    if model_tensor_bytes <= 0:  # a run that logged no tensor bytes: only the mapping can be counted
        if copies:
            return 0, [f"extra model buffers {sorted(sizes)} beside the mapping but no roofline_tensor_bytes "
                       "logged: cannot tell which bytes are read once"], ""
        return mapped, [], f"{mapped} B mapped"
    # The buffers must hold the model: a log that understates them would understate the roofline.
    if mapped + copies < model_tensor_bytes * (1 - BUFFER_SLACK):
        return 0, [f"model buffers of {mapped + copies} B cannot hold the model's {model_tensor_bytes} B of tensors"], ""
    if not copies:
        return model_tensor_bytes, [], f"{model_tensor_bytes} B of tensors, all in the {mapped} B mapping"
    if copies > model_tensor_bytes * MAX_EXTRA_BUFFER_GROWTH:
        return 0, [f"extra model buffers hold {copies} B, more than the model's {model_tensor_bytes} B of tensors: "
                   "a tensor counted twice"], ""
    # The copies replace the mapped bytes they were made from; a repacked copy is as large as its
    # source to within MAX_EXTRA_BUFFER_GROWTH, so the tensors left in the mapping are the rest.
    left_in_mapping = max(0, model_tensor_bytes - copies)
    extra = ", ".join(f"{name} {nbytes} B" for name, nbytes in sorted(sizes.items()))
    return copies + left_in_mapping, [], (f"{extra} copied out of the mapping + {left_in_mapping} B of tensors left "
                                          f"in it ({mapped} B mapped span not counted)")


def _cpu_roofline(logs_dir, cfg, m, counts, problems, summary) -> str:
    """CPU lane with --roofline_model: tg on it x the weight bytes it reads per token (each weight
    byte once, wherever the backend put it, minus the row-gathered token embedding), as a fraction
    of the host's measured read bandwidth (informational: no floor)."""
    big_tests, big_log = _load(logs_dir, ROOFLINE_LANE)
    if big_tests is None:
        return summary
    if not big_tests:
        problems.append("roofline bench JSON unreadable")
        return summary
    problems += [f"roofline bench: {p}" for p in backend_problems(big_tests, "cpu", False)]
    m["roofline_tg_tokens_per_s"] = bench_figures(big_tests).get("tg_tokens_per_s", 0.0)
    buffers = model_buffers(big_log)
    rows_only = int(fnum_cfg(cfg, "roofline_rows_only_bytes"))
    read, read_problems, how = cpu_weight_bytes_read(buffers, int(fnum_cfg(cfg, "roofline_tensor_bytes")))
    problems += [f"roofline bench log: {p}" for p in read_problems]
    weights = read - rows_only
    counts["roofline_host_weight_bytes"], counts["roofline_rows_only_bytes"] = weights, rows_only
    if weights <= 0:
        if not read_problems:
            problems.append("roofline bench log: no model buffer lines")
        return summary
    bw = _membw_gbs(logs_dir, problems, "host memory")
    if bw is None:
        return summary
    m["host_bandwidth_gbs"] = bw
    m["tg_roofline_fraction"] = m["roofline_tg_tokens_per_s"] * weights / (bw * 1e9)
    if not m["tg_roofline_fraction"] <= 1.0:
        problems.append(f"tg reaches {m['tg_roofline_fraction']:.2f} of the roofline: bytes or bandwidth are wrong")
    return summary + (f"; roofline: {weights} B ({how}; {rows_only} B of row-gathered token embedding excluded) x "
                      f"{m['roofline_tg_tokens_per_s']:.2f} tok/s = {100 * m['tg_roofline_fraction']:.1f}% of "
                      f"{bw:.1f} GB/s host memory read (measured)")


def _upstream(logs_dir, backend, accel, lane, m, problems, summary) -> str:
    """Lane vs an upstream-default build of the same tree, same host, same bench sizes (one run
    each; tools/bench alternates runs for a finer figure). Informational unless a policy floors it."""
    tests, _ = _load(logs_dir, UPSTREAM)
    if tests is None:
        return summary
    if not tests:
        problems.append("upstream build's llama-bench JSON unreadable")
        return summary
    problems += [f"upstream bench: {p}" for p in backend_problems(tests, backend, accel)]
    ref = bench_figures(tests)
    parts = []
    for kind in ("pp", "tg"):
        key = f"{kind}_tokens_per_s"
        if key in ref and key in lane and ref[key] > 0:
            m[f"upstream_{key}"] = ref[key]
            m[f"upstream_ratio_{kind}"] = lane[key] / ref[key]
            parts.append(f"{kind} x{m[f'upstream_ratio_{kind}']:.2f}")
    return summary + (f"; vs upstream defaults on this host: {', '.join(parts)}" if parts else "")


def _peer(logs_dir, cfg, m, problems, summary) -> str:
    """Side by side with another accelerator lane on this host (same model, same bench sizes)."""
    peer_backend = cfg.get("peer_backend", "")
    if not peer_backend:
        return summary
    parts = []
    for label, prefix, key_pairs in ((PEER_LANE, "peer_lane_", (("pp_tokens_per_s", "pp"), ("tg_tokens_per_s", "tg"))),
                                     (ROOFLINE_PEER_LANE, "roofline_peer_lane_", (("pp_tokens_per_s", "pp"), ("tg_tokens_per_s", "tg")))):
        tests, _ = _load(logs_dir, label)
        if not tests:
            problems.append(f"no llama-bench JSON for the {peer_backend} peer lane ({label})")
            continue
        problems.extend(f"{peer_backend} peer lane bench: {p}" for p in backend_problems(tests, peer_backend, True))
        fig = bench_figures(tests)
        for key, short in key_pairs:
            if key in fig:
                m[prefix + key] = fig[key]
                own = m.get(key if label == PEER_LANE else "roofline_" + key)
                if own is not None and fig[key] > 0:
                    m[f"{prefix}ratio_{short}"] = own / fig[key]
                    parts.append(f"{short}{' (roofline model)' if label != PEER_LANE else ''} x{own / fig[key]:.2f}")
    if parts:
        summary += f"; vs the {peer_backend} lane on this host: " + ", ".join(parts)
    return summary


def fnum_cfg(cfg: dict[str, str], key: str) -> float:
    try:
        return float(cfg.get(key, "0") or 0)
    except ValueError:
        return 0.0


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    counts, metrics, _, _ = evaluate(logs_dir)
    return counts, metrics


def run_speed(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg, accel = ctx.config, ctx.lane.is_accelerator
    for stale in ctx.logs_dir.glob("speed.*.*"):  # a reused --out_dir: only this run's raw files count
        if stale not in (step.log_path, step.exit_path):
            stale.unlink()
    step.config("backend", f"{ctx.lane.backend}")
    if accel:
        step.config("min_speedup_roofline_pp", f"{cfg.min_speedup_roofline_pp!r}")
        step.config("min_speedup_roofline_tg", f"{cfg.min_speedup_roofline_tg!r}")
        for name in ("min_speedup_roofline_pp", "min_speedup_roofline_tg"):
            if getattr(cfg, name) < getattr(Options, name):
                ctx.non_recordable.append(f"--{name}={getattr(cfg, name):g} is below the default "
                                          f"{getattr(Options, name):g} (bring-up only)")
    else:
        step.config("floor_tg_tokens_per_s", f"{cfg.speed_floor_tg!r}")
        step.config("floor_pp_tokens_per_s", f"{cfg.speed_floor_pp!r}")
    failures = []
    if _bench(ctx, step, LANE, bench_command(ctx, cfg.lane_dir, accel)) != 0:
        failures.append("llama-bench on the lane failed")
    if cfg.upstream_dir is not None and _bench(ctx, step, UPSTREAM, bench_command(ctx, cfg.upstream_dir, accel)) != 0:
        failures.append("llama-bench on the upstream-default build failed")
    if not accel and cfg.roofline_model is not None:
        sizes = tensor_sizes(cfg.roofline_model)
        step.config("roofline_rows_only_bytes", f"{rows_only_bytes(sizes)}")
        step.config("roofline_tensor_bytes", f"{sum(sizes.values())}")
        # The probe runs just before and just after the bench: a shared host's bandwidth moves within
        # seconds (measured on a zen4 VM: 26 to 42 GB/s), and its capacity is the fastest sample of
        # the window the bench ran in, not of a moment after it.
        problem = measure_bandwidth(ctx, step)
        if _bench(ctx, step, ROOFLINE_LANE, bench_command(ctx, cfg.lane_dir, False, cfg.roofline_model, (0, 32, 2))) != 0:
            failures.append("roofline llama-bench on the lane failed")
        problem = problem or measure_bandwidth(ctx, step)
        if problem:
            failures.append(problem)
    if accel:
        if _bench(ctx, step, CPU_LANE, bench_command(ctx, cfg.cpu_lane_dir, False)) != 0:
            failures.append("llama-bench on the CPU lane failed")
        if cfg.roofline_model is not None:
            pp = bench_sizes(ctx)[0]
            if _bench(ctx, step, ROOFLINE_LANE, bench_command(ctx, cfg.lane_dir, True, cfg.roofline_model, (pp, 128, 3))) != 0:
                failures.append("roofline llama-bench on the lane failed")
            # The same big model on the CPU lane of this host: the pp speed-up where pp is compute bound,
            # the tg speed-up where tg is bandwidth bound.
            if _bench(ctx, step, ROOFLINE_CPU_LANE, bench_command(ctx, cfg.cpu_lane_dir, False, cfg.roofline_model, (pp, 32, 1))) != 0:
                failures.append("roofline llama-bench on the CPU lane failed")
            if cfg.hbm_bandwidth_gbs > 0:
                step.config("hbm_bandwidth_gbs_override", f"{cfg.hbm_bandwidth_gbs!r}")
                ctx.non_recordable.append(f"--hbm_bandwidth_gbs={cfg.hbm_bandwidth_gbs:g}: bandwidth given, not measured "
                                          "by the runner (bring-up override)")
            else:
                problem = measure_bandwidth(ctx, step)
                if problem:
                    failures.append(problem)
        if cfg.peer_lane_dir is not None:
            step.config("peer_backend", f"{cfg.peer_backend}")
            if _bench(ctx, step, PEER_LANE, bench_command(ctx, cfg.peer_lane_dir, True)) != 0:
                failures.append(f"llama-bench on the {cfg.peer_backend} peer lane failed")
            if cfg.roofline_model is not None and _bench(
                    ctx, step, ROOFLINE_PEER_LANE,
                    bench_command(ctx, cfg.peer_lane_dir, True, cfg.roofline_model, (bench_sizes(ctx)[0], 128, 3))) != 0:
                failures.append(f"roofline llama-bench on the {cfg.peer_backend} peer lane failed")
    counts, metrics, problems, summary = evaluate(ctx.logs_dir)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    problems = failures + problems
    if problems:
        return CR.FAIL, "; ".join(problems) + (f" ({summary})" if summary else "")
    return CR.PASS, summary


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    return evaluate(pathlib.Path(logs_dir))[2]


@dataclasses.dataclass(frozen=True)
class Options:
    speed_floor_tg: float = option(0.0, "Token-generation floor, tokens/s.")
    speed_floor_pp: float = option(0.0, "Prompt-processing floor, tokens/s.")
    # llama-bench sizes; 0 = per-backend default (CPU: -p 64 -n 32 -r 2; accelerators: -p 512 -n 128 -r 3).
    bench_pp: int = option(0, "llama-bench -p (0: 64 CPU, 512 accelerators).")
    bench_tg: int = option(0, "llama-bench -n (0: 32 CPU, 128 accelerators).")
    bench_reps: int = option(0, "llama-bench -r (0: 2 CPU, 3 accelerators).")
    # A model large enough to be memory-bandwidth bound: tg on it vs the measured bandwidth.
    roofline_model: pathlib.Path | None = option(
        None, "GGUF large enough to be memory-bandwidth bound; speed reports tg's fraction of --hbm_bandwidth_gbs on it.",
        path=True)
    hbm_bandwidth_gbs: float = option(0.0, "Bring-up override (non-recordable) of the device memory bandwidth, GB/s, "
                                      "that the speed step otherwise measures itself (tools/runner/cuda/membw.cu).")
    # Accelerator lanes vs the CPU lane on the same host in the same run (why these values: above).
    min_speedup_roofline_pp: float = option(2.0, "Accelerator lanes: min pp speed-up over the CPU lane on --roofline_model "
                                            "on this host (policy speed.roofline_speedup_pp raises it; lower = non-recordable).")
    min_speedup_roofline_tg: float = option(4.0, "Accelerator lanes: min tg speed-up over the CPU lane on --roofline_model "
                                            "(policy speed.roofline_speedup_tg raises it; lower = non-recordable).")
    # Another accelerator lane on this host (e.g. CUDA beside Vulkan): benched in the same speed
    # step for a side-by-side figure. Informational: no floor is applied to the ratio.
    peer_lane_dir: pathlib.Path | None = option(None, "Accelerator lanes: another accelerator lane on this host (e.g. the CUDA "
                                                "lane when certifying Vulkan), benched side by side in the speed step "
                                                "(informational).", path=True)
    peer_backend: str = option("", "--peer_lane_dir's backend (cuda, vulkan, ...).")
    # An upstream-default build of the same tree on this host (//lanes:<alias>_upstream): benched in
    # the speed step for the lane/upstream ratio, which a policy speed floor may bound
    # (speed.upstream_ratio_pp / speed.upstream_ratio_tg).
    upstream_dir: pathlib.Path | None = option(None, "An upstream-default build of the same tree on this host "
                                               "(bin/llama-bench; //lanes:<alias>_upstream): the speed step reports the "
                                               "lane/upstream ratio.", path=True)


CHECK = Check(name="speed", run=run_speed, recompute=recompute, problems=problems,
              figures=("pp_tokens_per_s", "tg_tokens_per_s", "speedup_tg", "tg_roofline_fraction"), options=Options)
