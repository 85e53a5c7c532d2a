"""Useful speed: llama-bench JSON (prompt processing and token generation), floors from policy, the
speed-up over the CPU lane on the same host, and optionally the fraction of the memory-bandwidth
roofline token generation reaches (each generated token reads every weight once)."""

from __future__ import annotations

import json
import re

from proto import runner_report_pb2 as rpb
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult


def parse_llama_bench_json(text: str) -> dict[str, float]:
    """pp/tg tokens per second and model bytes from `llama-bench -o json` (a JSON array of tests)."""
    # stdout and stderr share the step's capture: take the first line-initial JSON array of objects.
    tests = None
    for m in re.finditer(r"^\[", text, flags=re.MULTILINE):
        try:
            value, _ = json.JSONDecoder().raw_decode(text[m.start():])
        except ValueError:
            continue
        if isinstance(value, list) and all(isinstance(t, dict) for t in value):
            tests = value
            break
    if tests is None:
        raise ValueError("no JSON array of tests in llama-bench output")
    out: dict[str, float] = {}
    for t in tests:
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            out["pp_tokens_per_s"] = float(t["avg_ts"])
            out["pp_stddev"] = float(t.get("stddev_ts", 0.0))
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            out["tg_tokens_per_s"] = float(t["avg_ts"])
            out["tg_stddev"] = float(t.get("stddev_ts", 0.0))
        out["model_bytes"] = float(t.get("model_size", 0))
    if "pp_tokens_per_s" not in out and "tg_tokens_per_s" not in out:
        raise ValueError("llama-bench JSON has neither a prompt nor a generation test")
    return out


def bench_sizes(ctx: RunContext) -> tuple[int, int, int]:
    cfg = ctx.config
    pp, tg, reps = (512, 128, 3) if ctx.lane.is_accelerator else (64, 32, 2)
    return cfg.bench_pp or pp, cfg.bench_tg or tg, cfg.bench_reps or reps


def bench_command(ctx: RunContext, lane_dir, offload: bool, model=None, sizes=None) -> list[str]:
    pp, tg, reps = sizes or bench_sizes(ctx)
    argv = [str(ctx.bin("llama-bench", lane_dir)), "-m", str(model or ctx.config.model), "-p", str(pp), "-n", str(tg),
            "-r", str(reps), "-t", str(ctx.config.threads), "-o", "json"]
    return argv + (["-ngl", "99"] if offload else ["-ngl", "0"])


def _bench(step: Step, argv: list[str], timeout_s: float) -> dict[str, float]:
    res = step.run(argv, timeout_s)
    if res.exit_code != 0:
        raise RuntimeError(f"llama-bench exited {res.exit_code}")
    return parse_llama_bench_json(res.output)


def run_speed(ctx: RunContext, step: Step) -> tuple[int, str]:
    cfg = ctx.config
    m = step.result.metrics
    try:
        lane = _bench(step, bench_command(ctx, cfg.lane_dir, ctx.lane.is_accelerator), cfg.timeout_s)
        m.update({k: v for k, v in lane.items() if k != "model_bytes"})
        ctx.model_bytes = int(lane.get("model_bytes", 0))
        if ctx.lane.is_accelerator:
            cpu = _bench(step, bench_command(ctx, cfg.cpu_lane_dir, False), cfg.timeout_s)
            for k in ("pp_tokens_per_s", "tg_tokens_per_s"):
                if k in cpu:
                    m[f"cpu_lane_{k}"] = cpu[k]
                    if cpu[k] > 0 and k in lane:
                        m[f"speedup_{k[:2]}"] = lane[k] / cpu[k]
    except (RuntimeError, ValueError, KeyError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    pp, tg, reps = bench_sizes(ctx)
    step.result.counts.update({"n_prompt": pp, "n_gen": tg, "repetitions": reps, "model_bytes": ctx.model_bytes})
    m["floor_tg_tokens_per_s"] = cfg.speed_floor_tg
    m["floor_pp_tokens_per_s"] = cfg.speed_floor_pp
    if cfg.roofline_model and cfg.hbm_bandwidth_gbs > 0:
        # Each generated token reads every weight once: bytes/token ~ model bytes.
        try:
            big = _bench(step, bench_command(ctx, cfg.lane_dir, ctx.lane.is_accelerator, cfg.roofline_model, (0, 128, 3)), cfg.timeout_s)
        except (RuntimeError, ValueError, KeyError) as err:
            return CR.FAIL, f"roofline model bench: {type(err).__name__}: {err}"
        m["roofline_model_bytes"] = big.get("model_bytes", 0.0)
        m["roofline_tg_tokens_per_s"] = big.get("tg_tokens_per_s", 0.0)
        if ctx.lane.is_accelerator:
            # The same big model on the CPU lane of this host: the speed-up where it matters.
            try:
                cpu_big = _bench(step, bench_command(ctx, cfg.cpu_lane_dir, False, cfg.roofline_model, (0, 32, 1)), cfg.timeout_s)
            except (RuntimeError, ValueError, KeyError) as err:
                return CR.FAIL, f"roofline model bench on the CPU lane: {type(err).__name__}: {err}"
            m["roofline_cpu_lane_tg_tokens_per_s"] = cpu_big.get("tg_tokens_per_s", 0.0)
            if m["roofline_cpu_lane_tg_tokens_per_s"] > 0:
                m["roofline_speedup_tg"] = m["roofline_tg_tokens_per_s"] / m["roofline_cpu_lane_tg_tokens_per_s"]
        m["hbm_bandwidth_gbs"] = cfg.hbm_bandwidth_gbs
        m["tg_roofline_fraction"] = m["roofline_tg_tokens_per_s"] * m["roofline_model_bytes"] / (cfg.hbm_bandwidth_gbs * 1e9)
    problems = []
    if m.get("tg_tokens_per_s", 0.0) < cfg.speed_floor_tg or "tg_tokens_per_s" not in m:
        problems.append(f"tg {m.get('tg_tokens_per_s', 0):.1f} tok/s below floor {cfg.speed_floor_tg:g}")
    if m.get("pp_tokens_per_s", 0.0) < cfg.speed_floor_pp or "pp_tokens_per_s" not in m:
        problems.append(f"pp {m.get('pp_tokens_per_s', 0):.1f} tok/s below floor {cfg.speed_floor_pp:g}")
    summary = f"pp{pp} {m.get('pp_tokens_per_s', 0):.1f} tok/s, tg{tg} {m.get('tg_tokens_per_s', 0):.1f} tok/s"
    if "speedup_tg" in m:
        summary += f", x{m['speedup_tg']:.1f} tg / x{m.get('speedup_pp', 0):.1f} pp vs CPU lane"
    if "tg_roofline_fraction" in m:
        summary += (f"; {m['roofline_model_bytes'] / 1e9:.2f} GB model: tg {m['roofline_tg_tokens_per_s']:.0f} tok/s = "
                    f"{100 * m['tg_roofline_fraction']:.1f}% of {m['hbm_bandwidth_gbs']:.0f} GB/s")
        if "roofline_speedup_tg" in m:
            summary += f", x{m['roofline_speedup_tg']:.0f} vs CPU lane"
    if problems:
        return CR.FAIL, "; ".join(problems) + f" ({summary})"
    return CR.PASS, summary
