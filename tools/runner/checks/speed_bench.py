"""llama-bench's raw output as figures: its JSON tests, the backend it ran, the model buffers and
offload of its log, and the bandwidth probe's samples; the speed step's raw files by bench label.
"""

from __future__ import annotations

import json
import pathlib
import re
import statistics

from tools.runner import backends, log_blocks

# ggml backend registry names, as llama-bench prints them in "backends".
# Device buffer names in load_tensors lines (CUDA0, ...); anything else (CPU, CPU_Mapped, CUDA_Host,
# CPU_REPACK) is host memory.
_BUFFER_LINE = re.compile(r"^.*load_tensors:\s+(\S+) model buffer size =\s*([0-9.]+) MiB\s*$", re.MULTILINE)
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")

# Bench labels -> raw files speed.<label>.json / speed.<label>.log.
LANE, CPU_LANE, ROOFLINE_LANE, ROOFLINE_CPU_LANE = "lane", "cpu_lane", "roofline_lane", "roofline_cpu_lane"
PEER_LANE, ROOFLINE_PEER_LANE = "peer_lane", "roofline_peer_lane"
UPSTREAM = "upstream"
# The lane/upstream ratio: this many alternating pairs (lane, upstream, lane, upstream, ...), median.
UPSTREAM_PAIRS = 3


def pair_labels(i: int) -> tuple[str, str]:
    """(lane label, upstream label) of the i-th alternating pair (1-based): the first pair's lane
    bench is the lane's own (speed.lane.json), later ones speed.lane.<i>.json / speed.upstream.<i>.json."""
    return (LANE, UPSTREAM) if i == 1 else (f"{LANE}.{i}", f"{UPSTREAM}.{i}")


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


def load_bench(logs_dir: pathlib.Path, label: str) -> tuple[list[dict] | None, str]:
    path = logs_dir / f"speed.{label}.json"
    if not path.is_file():
        return None, ""
    try:
        return parse_bench_tests(log_blocks.read(path)), log_blocks.read(logs_dir / f"speed.{label}.log")
    except ValueError:
        return [], log_blocks.read(logs_dir / f"speed.{label}.log")


def load_optional_bench(logs_dir: pathlib.Path, label: str, what: str, unreadable: str, backend: str,
                        offload: bool, problems: list[str]) -> tuple[list[dict], str] | None:
    """(tests, log) of a bench step that may not have run; None when it did not, or when its JSON is
    unreadable (`unreadable` in problems). Its backend problems go into problems as "<what>: ..."."""
    tests, log = load_bench(logs_dir, label)
    if tests is None:
        return None
    if not tests:
        problems.append(unreadable)
        return None
    problems += [f"{what}: {p}" for p in backend_problems(tests, backend, offload)]
    return tests, log


def fnum_cfg(cfg: dict[str, str], key: str) -> float:
    try:
        return float(cfg.get(key, "0") or 0)
    except ValueError:
        return 0.0


# ---- what was benched: the run's model file and the pinned build (issue 23, class 9) -----------

# Runner-owned configuration keys (speed.config.json) that bind a bench to what the run gave it.
MODEL_KEYS = {"model": ("model", "model_file_bytes", "model_tensor_bytes"),
              "roofline": ("roofline_model", "roofline_model_file_bytes", "roofline_tensor_bytes")}
BUILD_COMMIT_KEY = "build_commit"
# llama-bench prints the build's short hash (LLAMA_BUILD_COMMIT, 7 hex digits at the pin).
MIN_COMMIT_PREFIX = 7
# An unstamped build (upstream's CMake without a git checkout: the upstream-default reference build).
UNSTAMPED_COMMIT = "unknown"
# Without the GGUF's own tensor sum (runs before it was logged), model_size must at least be most
# of the file: a GGUF's header and alignment padding are a small fraction of its bytes.
MIN_TENSOR_FRACTION = 0.5


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def binding_problems(tests: list[dict], cfg: dict[str, str], which: str, *, unstamped_ok: bool = False) -> list[str]:
    """Why the bench's JSON is not of the run's model (which: "model" or "roofline") and the pinned
    build: model_filename is the path the runner gave llama-bench, model_size the GGUF's tensor
    bytes, build_commit a prefix of the pinned upstream commit. Empty where the configuration
    predates these keys (older runs); bench_agreement() still holds those to one model."""
    path_key, file_key, tensor_key = MODEL_KEYS[which]
    if path_key not in cfg:
        return []
    path = cfg[path_key]
    file_bytes, tensor_bytes = _int(cfg.get(file_key, "")), _int(cfg.get(tensor_key, ""))
    pinned = cfg.get(BUILD_COMMIT_KEY, "").strip().lower()
    out = []
    if not pinned:
        out.append("no pinned upstream commit in the build evidence: the benched build cannot be bound")
    for t in tests:
        what = f"test n_prompt={t.get('n_prompt')} n_gen={t.get('n_gen')}"
        if str(t.get("model_filename", "")) != path:
            out.append(f"{what}: model_filename {t.get('model_filename')!r} is not the run's model {path!r}")
        size = _int(t.get("model_size", ""))
        if tensor_bytes is not None and tensor_bytes > 0:
            if size != tensor_bytes:
                out.append(f"{what}: model_size {t.get('model_size')!r} is not the {tensor_bytes} B of tensors in {path}")
        elif file_bytes is None or size is None or not MIN_TENSOR_FRACTION * file_bytes < size <= file_bytes:
            out.append(f"{what}: model_size {t.get('model_size')!r} does not fit the {file_bytes} B model file {path}")
        commit = str(t.get("build_commit", "")).strip().lower()
        if unstamped_ok and commit == UNSTAMPED_COMMIT:
            continue
        if pinned and (len(commit) < MIN_COMMIT_PREFIX or not pinned.startswith(commit)):
            out.append(f"{what}: build_commit {t.get('build_commit')!r} is not the pinned upstream commit {pinned[:12]}")
    return out


def bench_agreement(benches: dict[str, list[dict]]) -> list[str]:
    """Benches compared with each other (the lane and its CPU lane, upstream or peer) ran one model:
    the same model_filename and model_size in every test."""
    seen: dict[tuple[str, str], list[str]] = {}
    for label, tests in benches.items():
        for t in tests:
            seen.setdefault((str(t.get("model_filename", "")), str(t.get("model_size", ""))), []).append(label)
    if len(seen) <= 1:
        return []
    models = "; ".join(f"{sorted(set(labels))}: {name!r} ({size} B)" for (name, size), labels in sorted(seen.items()))
    return [f"the compared benches ran different models: {models}"]
