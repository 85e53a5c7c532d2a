"""Useful speed: llama-bench on the lane (and, for accelerators, on the CPU lane of the same host in
the same run), the backend llama-bench says it ran, and for accelerators the fraction of the
memory-bandwidth roofline that token generation reaches on a bandwidth-bound model.

Floors:
- CPU lane: tokens/s floors from the policy (speed.tg_tokens_per_s, speed.pp_tokens_per_s) where it
  has them for the served model (a floor may be scoped to one model's sha256: absolute tokens/s
  hold only for the model they were tuned on), and tg on the served model >= 0.05 of that model's
  own memory roofline (min_tg_model_roofline_fraction: its weight bytes read per token at the
  host's measured bandwidth).
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
token. Bandwidth = tools/runner/probes/cuda/membw.cu, compiled and run inside this step (its output is
digested); --hbm_bandwidth_gbs replaces it only as a bring-up override (non-recordable).

Raw files (all in step.extra_logs): speed.<bench>.json (llama-bench stdout), speed.<bench>.log
(its stderr), speed.membw.json / speed.membw.log. recompute() derives every figure from them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.runner import backends, exits, log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.checks.speed_bench import (
    BUILD_COMMIT_KEY,
    CPU_LANE,
    LANE,
    MODEL_KEYS,
    PEER_LANE,
    ROOFLINE_CPU_LANE,
    ROOFLINE_LANE,
    ROOFLINE_PEER_LANE,
    UPSTREAM,
    UPSTREAM_PAIRS,
    backend_problems,
    bench_agreement,
    bench_figures,
    binding_problems,
    fnum_cfg,
    load_bench,
    load_optional_bench,
    pair_labels,
    parse_offloaded,
)
from tools.runner.checks.speed_roofline import accelerator_roofline, cpu_roofline, rows_only_bytes, tensor_sizes
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

MEMBW_SOURCE = pathlib.Path(__file__).resolve().parents[1] / "probes" / "cuda" / "membw.cu"
CPU_MEMBW_SOURCE = pathlib.Path(__file__).resolve().parents[1] / "probes" / "cpu_membw.py"


def bench_sizes(ctx: RunContext) -> tuple[int, int, int]:
    cfg = ctx.config
    pp, tg, reps = (512, 128, 3) if ctx.lane.is_accelerator else (64, 32, 2)
    return cfg.bench_pp or pp, cfg.bench_tg or tg, cfg.bench_reps or reps


def bench_command(ctx: RunContext, lane_dir, offload: bool, model=None, sizes=None) -> list[str]:
    pp, tg, reps = sizes or bench_sizes(ctx)
    # -v: the loader's log (backend, offload, buffer sizes) goes to stderr, the JSON alone to stdout.
    argv = [str(ctx.bin("llama-bench", lane_dir)), "-m", str(model or ctx.config.model), "-p", str(pp), "-n", str(tg),
            "-r", str(reps), "-t", str(ctx.config.threads), "-o", "json", "-v"]
    return argv + (["-ngl", "99", *ctx.split_args(bench=True)] if offload else ["-ngl", "0"])


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

    lane_tests, lane_log = load_bench(logs_dir, LANE)
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
        summary = cpu_roofline(logs_dir, cfg, m, counts, problems, summary)
        summary = _model_roofline(cfg, m, counts, problems, summary)
    else:
        offl = parse_offloaded(lane_log)
        if offl is None or offl[0] != offl[1] or offl[1] <= 0:
            problems.append(f"lane bench log shows no full offload (offloaded {offl or 'line absent'})")
        else:
            counts["layers_offloaded"], counts["layers"] = offl
        m["floor_roofline_speedup_pp"] = fnum("min_speedup_roofline_pp")
        m["floor_roofline_speedup_tg"] = fnum("min_speedup_roofline_tg")
        cpu_tests, _ = load_bench(logs_dir, CPU_LANE)
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
        summary = accelerator_roofline(logs_dir, cfg, backend, m, counts, problems, summary)
        summary = _peer(logs_dir, cfg, m, problems, summary)
    summary = _upstream(logs_dir, cfg, backend, accel, m, problems, summary)
    problems += _binding(logs_dir, cfg)
    for k, v in m.items():
        if not math.isfinite(v):
            problems.append(f"{k} is {v}")
    return counts, m, problems, summary


def _model_roofline(cfg, m, counts, problems, summary) -> str:
    """CPU lane: token generation on the served model against that model's own roofline (the weight
    bytes it reads per token at the host's measured bandwidth): a floor that scales with the model,
    where absolute tokens/s floors hold only for the model they were tuned on. No upper bound: a
    model that fits in the caches runs above the memory roofline."""
    if "min_tg_model_roofline_fraction" not in cfg:
        return summary  # runs before the model-relative floor
    tensor_bytes = int(float(cfg.get("model_tensor_bytes", "0") or 0))
    per_token = tensor_bytes - int(float(cfg.get("model_rows_only_bytes", "0") or 0))
    floor = float(cfg["min_tg_model_roofline_fraction"])
    m["floor_tg_model_roofline_fraction"] = floor
    bw, tg = m.get("host_bandwidth_gbs"), m.get("tg_tokens_per_s")
    if "roofline_model" not in cfg:
        # No --roofline_model: no bandwidth measured, no figure (the record has no
        # tg_model_roofline_fraction; a policy floor on it then refuses the record).
        return summary + "; served model's roofline not computed (no --roofline_model, no bandwidth measured)"
    if per_token <= 0 or not bw or tg is None:
        problems.append("the served model's roofline cannot be computed (model bytes, bandwidth or tg missing)")
        return summary
    counts["model_bytes_per_token"] = per_token
    m["tg_model_roofline_fraction"] = tg * per_token / (bw * 1e9)
    if not m["tg_model_roofline_fraction"] >= floor:
        problems.append(f"tg on the served model reaches {m['tg_model_roofline_fraction']:.3f} of its roofline "
                        f"({per_token} B per token at {bw:.1f} GB/s), below the floor {floor:g}")
    return summary + f"; served model: {per_token} B x {tg:.1f} tok/s = {100 * m['tg_model_roofline_fraction']:.1f}% of its roofline"


def _upstream(logs_dir, cfg, backend, accel, m, problems, summary) -> str:
    """Lane vs an upstream-default build of the same tree, same host, same bench sizes, in
    alternating runs (lane, upstream, lane, upstream, ...): the ratio is the median of the pairs'
    ratios, so one outlier run (a shared host's noisy moment) cannot make it. Informational unless a
    policy floors it."""
    loaded = load_optional_bench(logs_dir, UPSTREAM, "upstream bench", "upstream build's llama-bench JSON unreadable",
                                 backend, accel, problems)
    if loaded is None:
        return summary
    pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    for i in range(1, 1000):
        lane_label, up_label = pair_labels(i)
        lane_tests, _ = load_bench(logs_dir, lane_label)
        up_tests, _ = load_bench(logs_dir, up_label)
        if lane_tests is None or up_tests is None:
            break
        if not lane_tests or not up_tests:
            problems.append(f"pair {i} of the lane/upstream benches: JSON unreadable")
            return summary
        if i > 1:
            problems += [f"lane bench {i}: {p}" for p in backend_problems(lane_tests, backend, accel)]
            problems += [f"upstream bench {i}: {p}" for p in backend_problems(up_tests, backend, accel)]
        pairs.append((bench_figures(lane_tests), bench_figures(up_tests)))
    want = max(UPSTREAM_PAIRS, int(fnum_cfg(cfg, "upstream_pairs")))
    counts_ok = len(pairs) >= want
    if not counts_ok:
        problems.append(f"the lane/upstream ratio needs {want} alternating pairs of benches (lane, upstream, ...); "
                        f"found {len(pairs)}")
    parts = []
    m["upstream_pairs"] = float(len(pairs))
    for kind in ("pp", "tg"):
        key = f"{kind}_tokens_per_s"
        ratios = [lane[key] / ref[key] for lane, ref in pairs if key in lane and key in ref and ref[key] > 0]
        if len(ratios) != len(pairs) or not ratios:
            continue
        m[f"upstream_{key}"] = statistics.median(ref[key] for _, ref in pairs)
        m[f"upstream_ratio_{kind}"] = statistics.median(ratios)
        m[f"upstream_ratio_{kind}_min"], m[f"upstream_ratio_{kind}_max"] = min(ratios), max(ratios)
        parts.append(f"{kind} x{m[f'upstream_ratio_{kind}']:.2f}")
    return summary + (f"; vs upstream defaults on this host (median of {len(pairs)} alternating pairs): "
                      f"{', '.join(parts)}" if parts else "")


def _binding(logs_dir: pathlib.Path, cfg: dict[str, str]) -> list[str]:
    """Every bench ran the run's model (or the roofline model) on the pinned build, and the benches
    that are compared with each other ran the same model."""
    out: list[str] = []
    groups: dict[str, dict[str, list[dict]]] = {"model": {}, "roofline": {}}
    labels = [(LANE, "model"), (CPU_LANE, "model"), (PEER_LANE, "model"),
              (ROOFLINE_LANE, "roofline"), (ROOFLINE_CPU_LANE, "roofline"), (ROOFLINE_PEER_LANE, "roofline")]
    for i in range(1, 1000):
        lane_label, up_label = pair_labels(i)
        if not (logs_dir / f"speed.{up_label}.json").is_file():
            break
        labels += [(lane_label, "model")] * (i > 1) + [(up_label, "model")]
    for label, which in labels:
        tests, _ = load_bench(logs_dir, label)
        if not tests:
            continue
        groups[which][label] = tests
        out += [f"{label} bench: {p}" for p in binding_problems(tests, cfg, which, unstamped_ok=label.startswith(UPSTREAM))]
    for benches in groups.values():
        out += bench_agreement(benches)
    return out


def _peer(logs_dir, cfg, m, problems, summary) -> str:
    """Side by side with another accelerator lane on this host (same model, same bench sizes)."""
    peer_backend = cfg.get("peer_backend", "")
    if not peer_backend:
        return summary
    parts = []
    for label, prefix, key_pairs in ((PEER_LANE, "peer_lane_", (("pp_tokens_per_s", "pp"), ("tg_tokens_per_s", "tg"))),
                                     (ROOFLINE_PEER_LANE, "roofline_peer_lane_", (("pp_tokens_per_s", "pp"), ("tg_tokens_per_s", "tg")))):
        tests, _ = load_bench(logs_dir, label)
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


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    counts, metrics, _, _ = evaluate(logs_dir)
    return counts, metrics


def bind_inputs(ctx: RunContext, step: Step) -> list[str]:
    """Writes what every bench must have run into the step's configuration: the model path the
    runner passes (llama-bench's model_filename), its sha256, file and tensor bytes (model_size),
    the same for the roofline model, and the pinned upstream commit of the build evidence
    (build_commit). Returns failures (no evidence: the build cannot be bound)."""
    cfg = ctx.config
    failures = []
    for (path_key, file_key, tensor_key), model in ((MODEL_KEYS["model"], cfg.model),
                                                    (MODEL_KEYS["roofline"], cfg.roofline_model)):
        if model is None:
            continue
        step.config(path_key, f"{model}")
        try:
            sizes = tensor_sizes(model)
        except (OSError, ValueError, KeyError, IndexError) as err:  # not a GGUF gguf-py can read
            failures.append(f"{model}: cannot read its tensors ({type(err).__name__}: {err}): the bench cannot be bound")
            continue
        step.config(file_key, f"{pathlib.Path(model).stat().st_size}")
        step.config(tensor_key, f"{sum(sizes.values())}")
        if path_key == "model":
            step.config("model_sha256", sha256_file(model))
            step.config("model_rows_only_bytes", f"{rows_only_bytes(sizes)}")
        else:
            step.config("roofline_rows_only_bytes", f"{rows_only_bytes(sizes)}")
    commit = ctx.evidence.upstream.commit if ctx.evidence is not None else ""
    step.config(BUILD_COMMIT_KEY, commit)
    if not commit:
        failures.append("no build evidence with the pinned upstream commit: the benched build cannot be bound")
    return failures


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
        step.config("min_tg_model_roofline_fraction", f"{cfg.min_tg_model_roofline_fraction!r}")
    failures = bind_inputs(ctx, step)
    if _bench(ctx, step, LANE, bench_command(ctx, cfg.lane_dir, accel)) != 0:
        failures.append("llama-bench on the lane failed")
    if cfg.upstream_dir is not None:
        step.config("upstream_pairs", f"{UPSTREAM_PAIRS}")
        for i in range(1, UPSTREAM_PAIRS + 1):
            lane_label, up_label = pair_labels(i)
            if i > 1 and _bench(ctx, step, lane_label, bench_command(ctx, cfg.lane_dir, accel)) != 0:
                failures.append(f"llama-bench on the lane failed (pair {i})")
            if _bench(ctx, step, up_label, bench_command(ctx, cfg.upstream_dir, accel)) != 0:
                failures.append(f"llama-bench on the upstream-default build failed (pair {i})")
    if not accel and cfg.roofline_model is not None:
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
                                      "that the speed step otherwise measures itself (tools/runner/probes/cuda/membw.cu).")
    # Accelerator lanes vs the CPU lane on the same host in the same run (why these values: above).
    # Measured on the served models on this host kind (docs/runner.md): 0.25 to 0.5 for models past the
    # caches; a lane at a fifth of that is broken, not slow.
    min_tg_model_roofline_fraction: float = option(0.05, "CPU lane: min tg on the served model as a fraction of its "
                                                   "memory roofline (bytes read per token at the measured bandwidth).")
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
