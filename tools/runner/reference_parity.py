"""Model-level parity: the lane's logits for a fixed prompt against an independent oracle.

CPU lane: llama-logits vs the float64 NumPy reference (tools/model/reference_forward.py).
Accelerator lanes: llama-logits with full offload vs the CPU lane's llama-logits on the same
prompt and model (the CPU lane is itself certified against the NumPy reference).
"""

from __future__ import annotations

import pathlib

import numpy as np

from proto import runner_report_pb2 as rpb
from tools.model import reference_forward
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult


def logits_command(ctx: RunContext, bin_path: pathlib.Path, out: pathlib.Path, offload: bool,
                   flash_attn: str = "auto") -> list[str]:
    argv = [str(bin_path), "-m", str(ctx.config.model), "-p", ctx.config.parity_prompt, "-o", str(out),
            "-t", str(ctx.config.threads), "-fa", flash_attn]
    if flash_attn == "off":
        argv += ["-ctk", "f32", "-ctv", "f32"]  # an F16 cache would round K/V as well
    if offload:
        argv += ["-ngl", "99"]
    return argv


def tolerances(ctx: RunContext) -> tuple[float, float, float]:
    """(max |delta logit|, max mean KL, min decisive top-1) for this lane's oracle."""
    cfg = ctx.config
    if ctx.lane.is_accelerator:
        return cfg.parity_max_abs_delta, cfg.parity_max_mean_kl, cfg.parity_min_top1
    return cfg.reference_max_abs_delta, cfg.reference_max_mean_kl, cfg.parity_min_top1


def judge(metrics: dict[str, float], max_abs_delta: float, max_mean_kl: float, min_top1: float) -> list[str]:
    problems = []
    if metrics["max_abs_delta_logit"] > max_abs_delta:
        problems.append(f"max |delta logit| {metrics['max_abs_delta_logit']:.4g} > {max_abs_delta:g}")
    if metrics["mean_kl"] > max_mean_kl:
        problems.append(f"mean KL {metrics['mean_kl']:.3g} > {max_mean_kl:g}")
    if metrics["top1_agreement_decisive"] < min_top1:
        problems.append(f"top-1 agreement on decisive positions {metrics['top1_agreement_decisive']:.3f} < {min_top1:g}")
    return problems


def _read(step: Step, res, path: pathlib.Path):
    if res.exit_code != 0 or not path.is_file():
        raise RuntimeError(f"{pathlib.Path(res.argv[0]).name} exited {res.exit_code} without logits")
    return reference_forward.read_logits_file(path)


def run_reference_parity(ctx: RunContext, step: Step) -> tuple[int, str]:
    cfg = ctx.config
    got_path = ctx.scratch_dir / "lane.logits"
    # Against the float64 reference: flash attention off and an F32 KV cache, since either would
    # round K/V to F16 and hide real errors under a loose tolerance.
    flash_attn = "auto" if ctx.lane.is_accelerator else "off"
    res = step.run(logits_command(ctx, ctx.bin("llama-logits"), got_path, ctx.lane.is_accelerator, flash_attn), cfg.timeout_s)
    step.result.exit_code = res.exit_code
    try:
        tokens, got = _read(step, res, got_path)
        if ctx.lane.is_accelerator:
            ref_path = ctx.scratch_dir / "cpu_lane.logits"
            ref_res = step.run(logits_command(ctx, ctx.bin("llama-logits", cfg.cpu_lane_dir), ref_path, False), cfg.timeout_s)
            ref_tokens, ref = _read(step, ref_res, ref_path)
            if not np.array_equal(tokens, ref_tokens):
                return CR.FAIL, "the lane and the CPU lane tokenized the prompt differently"
            oracle = "CPU lane llama-logits"
        else:
            step.log(f"reference: NumPy float64 forward of {cfg.model} over {len(tokens)} tokens")
            ref = reference_forward.forward(reference_forward.load_model(cfg.model), tokens)
            oracle = "NumPy float64 reference"
        metrics = reference_forward.compare_logits(ref, got)
    except (RuntimeError, ValueError, KeyError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    step.log(f"comparison vs {oracle}: {metrics}")
    step.result.counts["n_tokens"] = int(metrics["n_tokens"])
    step.result.counts["n_vocab"] = int(got.shape[1])
    step.result.counts["n_decisive"] = int(metrics.get("n_decisive", metrics["n_tokens"]))
    for key in ("max_abs_delta_logit", "top1_agreement", "top1_agreement_decisive", "mean_kl", "max_kl"):
        if key in metrics:
            step.result.metrics[key] = float(metrics[key])
    max_delta, max_kl, min_top1 = tolerances(ctx)
    step.result.metrics["tol_max_abs_delta_logit"] = max_delta
    step.result.metrics["tol_mean_kl"] = max_kl
    step.result.metrics["tol_top1_agreement_decisive"] = min_top1
    problems = judge(metrics, max_delta, max_kl, min_top1)
    if problems:
        return CR.FAIL, f"vs {oracle}: " + "; ".join(problems)
    return CR.PASS, (f"vs {oracle}: max|dlogit| {metrics['max_abs_delta_logit']:.3g}, mean KL {metrics['mean_kl']:.2g}, "
                     f"top-1 {metrics['top1_agreement']:.3f} over {metrics['n_tokens']} tokens")
