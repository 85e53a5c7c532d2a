"""A lane's speed against an upstream-default build of the same pinned tree, on one host, in one run.

llama-bench runs alternately (ABBA: lane, reference, reference, lane, ...) so drift of the host
(thermal, noisy neighbours) falls on both builds alike; each run's `-o json` stdout is kept as a raw
file, and every figure of the report is re-derived from those files by recompute(): the medians per
build and the lane/reference ratio for prompt processing (pp) and token generation (tg).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import platform
import statistics
import subprocess
import time

from proto import bench_report_pb2
from tools.core.digest import sha256_file
from tools.runner import exits
from tools.runner.checks import speed_bench

SCHEMA_VERSION = 1
LANE, REFERENCE = "lane", "reference"
CONFIG_FILE = "bench_config.json"


class BenchError(Exception):
    """A build or model is missing, or llama-bench failed; the message names the file or log."""


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    lane_id: str
    lane_dir: pathlib.Path
    reference_dir: pathlib.Path
    models: dict[str, pathlib.Path]  # label -> GGUF
    out_dir: pathlib.Path
    rounds: int = 3
    pp: int = 128
    tg: int = 32
    reps: int = 2
    threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    n_gpu_layers: int = 0


def schedule(rounds: int) -> list[tuple[int, str]]:
    """(round, build) in ABBA order: lane first in even rounds, the reference first in odd ones."""
    out = []
    for r in range(rounds):
        pair = (LANE, REFERENCE) if r % 2 == 0 else (REFERENCE, LANE)
        out += [(r, b) for b in pair]
    return out


def bench_argv(build_dir: pathlib.Path, model: pathlib.Path, cfg: BenchConfig) -> list[str]:
    return [str(build_dir / "bin" / "llama-bench"), "-m", str(model), "-p", str(cfg.pp), "-n", str(cfg.tg),
            "-r", str(cfg.reps), "-t", str(cfg.threads), "-ngl", str(cfg.n_gpu_layers), "-o", "json"]


def raw_name(model: str, build: str, rnd: int) -> str:
    return f"{model}.{build}.{rnd}.json"


def run(cfg: BenchConfig) -> bench_report_pb2.BenchReport:
    for label, d in ((LANE, cfg.lane_dir), (REFERENCE, cfg.reference_dir)):
        if not (d / "bin" / "llama-bench").is_file():
            raise BenchError(f"{d}/bin/llama-bench: missing ({label} build); build it first "
                             f"(bazel build //lanes:<lane> //lanes:<lane>_upstream)")
    if cfg.rounds < 2:
        raise BenchError("--rounds must be at least 2 (one ABBA pair), so each build runs first once")
    logs = cfg.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / CONFIG_FILE).write_text(json.dumps({
        "lane_id": cfg.lane_id, "rounds": cfg.rounds, "models": sorted(cfg.models), "threads": cfg.threads,
        "host_cpu": _host_cpu(),
    }, indent=2, sort_keys=True) + "\n")
    for label, model in sorted(cfg.models.items()):
        for rnd, build in schedule(cfg.rounds):
            build_dir = cfg.lane_dir if build == LANE else cfg.reference_dir
            argv = bench_argv(build_dir, model, cfg)
            started = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, check=False)
            (logs / raw_name(label, build, rnd)).write_bytes(proc.stdout)
            (logs / raw_name(label, build, rnd).replace(".json", ".log")).write_bytes(
                f"$ {' '.join(argv)}\n".encode() + proc.stderr + f"# exit {proc.returncode} after "
                f"{time.monotonic() - started:.2f}s\n".encode())
            if proc.returncode != 0:
                raise BenchError(f"llama-bench ({build}, {label}, round {rnd}) exited {exits.describe(proc.returncode)}: see "
                                 f"{logs / raw_name(label, build, rnd).replace('.json', '.log')}")
            print(f"[bench] {label} {build} round {rnd}: {_summary(logs / raw_name(label, build, rnd))}", flush=True)
    report = recompute(cfg.out_dir)
    evidence = cfg.lane_dir.parent / f"{cfg.lane_dir.name}.evidence.pb"
    if evidence.is_file():
        report.lane_build_evidence_digest = "sha256:" + sha256_file(evidence)
    return report


def _summary(raw: pathlib.Path) -> str:
    f = speed_bench.parse_llama_bench_json(raw.read_text())
    return f"pp {f.get('pp_tokens_per_s', 0):.1f} tok/s, tg {f.get('tg_tokens_per_s', 0):.1f} tok/s"


def _host_cpu() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def recompute(out_dir: pathlib.Path) -> bench_report_pb2.BenchReport:
    """The report from logs/ alone: bench_config.json and every raw llama-bench JSON it implies.
    A missing or unreadable raw file is an error, never a smaller comparison."""
    logs = pathlib.Path(out_dir) / "logs"
    try:
        cfg = json.loads((logs / CONFIG_FILE).read_text())
    except (OSError, ValueError) as err:
        raise BenchError(f"{logs / CONFIG_FILE}: unreadable ({err}); rerun the benchmark") from err
    report = bench_report_pb2.BenchReport(schema_version=SCHEMA_VERSION, lane_id=cfg["lane_id"],
                                          host_cpu=cfg["host_cpu"], threads=cfg["threads"], rounds=cfg["rounds"])
    for model in cfg["models"]:
        per_build: dict[str, list[dict[str, float]]] = {LANE: [], REFERENCE: []}
        for rnd, build in schedule(cfg["rounds"]):
            raw = logs / raw_name(model, build, rnd)
            try:
                figures = speed_bench.parse_llama_bench_json(raw.read_text())
            except (OSError, ValueError) as err:
                raise BenchError(f"{raw}: not a llama-bench JSON result ({err})") from err
            if "pp_tokens_per_s" not in figures or "tg_tokens_per_s" not in figures:
                raise BenchError(f"{raw}: needs both a prompt (pp) and a generation (tg) test")
            per_build[build].append(figures)
            report.samples.add(model=model, build=build, round=rnd, pp_tokens_per_s=figures["pp_tokens_per_s"],
                               tg_tokens_per_s=figures["tg_tokens_per_s"], raw_file=raw.name, raw_sha256=sha256_file(raw))
        lane, ref = per_build[LANE], per_build[REFERENCE]
        sizes = {(int(f["pp_size"]), int(f["tg_size"]), int(f["model_bytes"])) for f in lane + ref}
        if len(sizes) != 1:
            raise BenchError(f"{logs}: model {model} was benched with different sizes or files: {sorted(sizes)}")
        (pp_size, tg_size, model_bytes), = sizes
        c = report.comparisons.add(model=model, model_bytes=model_bytes, pp_size=pp_size, tg_size=tg_size)
        c.lane_pp_median = statistics.median(f["pp_tokens_per_s"] for f in lane)
        c.reference_pp_median = statistics.median(f["pp_tokens_per_s"] for f in ref)
        c.lane_tg_median = statistics.median(f["tg_tokens_per_s"] for f in lane)
        c.reference_tg_median = statistics.median(f["tg_tokens_per_s"] for f in ref)
        c.pp_ratio = c.lane_pp_median / c.reference_pp_median
        c.tg_ratio = c.lane_tg_median / c.reference_tg_median
    return report


def table(report: bench_report_pb2.BenchReport) -> str:
    lines = [f"{report.lane_id} vs upstream defaults on {report.host_cpu}, {report.threads} threads, "
             f"{report.rounds} rounds (ABBA), medians in tok/s",
             f"{'model':8s} {'MB':>7s} {'test':6s} {'lane':>10s} {'upstream':>10s} {'ratio':>6s}"]
    for c in report.comparisons:
        for test, lane, ref, ratio in ((f"pp{c.pp_size}", c.lane_pp_median, c.reference_pp_median, c.pp_ratio),
                                       (f"tg{c.tg_size}", c.lane_tg_median, c.reference_tg_median, c.tg_ratio)):
            lines.append(f"{c.model:8s} {c.model_bytes / 1e6:7.1f} {test:6s} {lane:10.2f} {ref:10.2f} {ratio:6.3f}")
    return "\n".join(lines)
