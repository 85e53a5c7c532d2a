"""Graph-dispatch smoke: run the model with full offload for every KV cache type and require the
backend's own log lines (the lane spec's log_evidence) as proof that it ran the graph.

Measured at 0c1e570: a quantized V cache needs flash attention (with -fa off, context creation
fails: "failed to create llama_context"), so quantized V types run with -fa on; F16/F32/BF16 with
-fa auto. The model loader's buffer lines are INFO at verbosity 4, hence -lv 4.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

from proto import runner_report_pb2 as rpb
from tools.runner import exits, log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

UNQUANTIZED_KV = ("f32", "f16", "bf16")
_EVAL = re.compile(r"common_perf_print:\s+eval time =\s*([0-9.]+) ms /\s*(\d+) runs")
_PROMPT_EVAL = re.compile(r"common_perf_print: prompt eval time =\s*([0-9.]+) ms /\s*(\d+) tokens")
_KV_TYPES = re.compile(r"llama_kv_cache: size = .*K \((\w+)\):.*V \((\w+)\):")


def missing_log_evidence(patterns: tuple[str, ...] | list[str], log_text: str) -> list[str]:
    """The patterns (Python regexes, searched line by line) that no log line matches."""
    return [p for p in patterns if not re.search(p, log_text, flags=re.MULTILINE)]


def parse_eval(log_text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    m = _PROMPT_EVAL.search(log_text)
    if m:
        out["prompt_tokens"], out["prompt_ms"] = int(m.group(2)), float(m.group(1))
    m = _EVAL.search(log_text)
    if m:
        out["eval_runs"], out["eval_ms"] = int(m.group(2)), float(m.group(1))
    return out


# Re-runs of one KV type whose clean exit lost the perf lines (see run_graph_smoke); bounded.
TRUNCATION_RETRIES = 1


def parse_kv_types(log_text: str) -> tuple[str, str] | None:
    m = _KV_TYPES.search(log_text)
    return (m.group(1), m.group(2)) if m else None


def flash_attn_for(kv_type: str) -> str:
    return "auto" if kv_type in UNQUANTIZED_KV else "on"


def smoke_command(ctx: RunContext, kv_type: str) -> list[str]:
    cfg = ctx.config
    return [str(ctx.bin("llama-completion")), "-m", str(cfg.model), "-p", "Once upon a time",
            "-n", str(cfg.n_predict), "--temp", "0", "-s", str(cfg.seed), "--ignore-eos", "-no-cnv",
            "-t", str(cfg.threads), "-ctk", kv_type, "-ctv", kv_type, "-fa", flash_attn_for(kv_type),
            "-lv", "4", *ctx.ngl]


STEP = "graph_smoke"


def _smoke_runs(logs_dir: pathlib.Path) -> tuple[list[log_blocks.Command], dict[str | None, log_blocks.Command]]:
    """(every smoke command, the last one per KV type: a re-run supersedes a truncated run)."""
    cmds = [c for c in log_blocks.commands(log_blocks.read(pathlib.Path(logs_dir) / f"{STEP}.log"))
            if log_blocks.flag_value(c.argv, "-ctk") is not None]
    return cmds, {log_blocks.flag_value(c.argv, "-ctk"): c for c in cmds}


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    """Tokens decoded and tg tokens/s per KV type, from llama-completion's own perf lines."""
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    cmds, last = _smoke_runs(logs_dir)
    truncated = len(cmds) - len(last)
    if truncated:
        counts["truncated_runs"] = truncated
    cmds = list(last.values())
    for cmd in cmds:
        kv = log_blocks.flag_value(cmd.argv, "-ctk")
        ev = parse_eval(cmd.output)
        decoded = int(ev.get("eval_runs", 0))
        counts[f"tokens_decoded_{kv}"] = decoded
        if "eval_ms" in ev and ev["eval_ms"] > 0:
            metrics[f"tg_tokens_per_s_{kv}"] = 1000.0 * decoded / ev["eval_ms"]
    counts["kv_types"] = len(cmds)
    return counts, metrics


def problems(logs_dir: pathlib.Path, lane: object = None) -> list[str]:
    """Why the raw files fail this check (empty = PASS), judged as run_graph_smoke judges each run:
    the last run of every configured KV type, against the lane spec's log_evidence in the step config
    (runs made before the config held them: the `## kv cache type` lines and `lane`, the spec's entry)."""
    config = log_blocks.step_config(pathlib.Path(logs_dir), STEP)
    runner = log_blocks.runner_lines(log_blocks.read(pathlib.Path(logs_dir) / f"{STEP}.log"))
    try:
        kv_types = ([k for k in config["kv_types"].split(",") if k] if "kv_types" in config
                    else re.findall(r"^## kv cache type (\S+)$", runner, re.MULTILINE))
        evidence = (json.loads(config["log_evidence"]) if "log_evidence" in config
                    else list(getattr(lane, "log_evidence")))
    except (AttributeError, TypeError, ValueError) as err:
        return [f"{STEP}.config.json lacks a readable kv_types/log_evidence and no lane spec entry gives them "
                f"({err}): the verdict cannot be re-derived"]
    out = [] if evidence else ["the lane spec gives no log_evidence"]
    if not kv_types:
        out.append("no KV cache type configured")
    _, last = _smoke_runs(logs_dir)
    for kv in kv_types:
        cmd = last.get(kv)
        if cmd is None:
            out.append(f"{kv}: no smoke run in the log")
            continue
        if cmd.exit_code != 0:
            out.append(f"{kv}: llama-completion exited {exits.describe(cmd.exit_code)}")
            continue
        missing = missing_log_evidence(evidence, cmd.output)
        if missing:
            out.append(f"{kv}: backend log lacks {missing}")
        if int(parse_eval(cmd.output).get("eval_runs", 0)) <= 0:
            out.append(f"{kv}: no tokens generated")
        kv_seen = parse_kv_types(cmd.output)
        if kv_seen != (kv, kv):
            out.append(f"{kv}: KV cache reported as {kv_seen}, not K ({kv}) V ({kv})")
    out += [f"{kv}: a smoke run for a KV type not configured" for kv in last if kv not in kv_types]
    return out


def run_graph_smoke(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    problems, figures = [], []
    # What problems() judges the log against, in the runner-owned step config.
    step.config("kv_types", ",".join(ctx.config.kv_types))
    step.config("log_evidence", json.dumps(list(ctx.lane.log_evidence)))
    if not ctx.lane.log_evidence:
        problems.append(f"the lane spec gives no log_evidence for {ctx.lane.lane_id}")
    for kv in ctx.config.kv_types:
        step.log(f"## kv cache type {kv}")
        res = step.run(smoke_command(ctx, kv), ctx.config.timeout_s)
        for _ in range(TRUNCATION_RETRIES):
            if res.exit_code != 0 or "eval_runs" in parse_eval(res.output):
                break
            # llama.cpp's logger is asynchronous and leaks its thread at exit (common/log.cpp,
            # common_log_main), so under load a clean exit can lose the final lines, the perf
            # summary among them. Say so, keep that output, and run once more; recompute judges
            # the last run of each KV type and counts the truncated ones.
            step.log(f"# lanes: exit 0 without llama-completion's perf lines (output truncated); running {kv} again")
            res = step.run(smoke_command(ctx, kv), ctx.config.timeout_s)
        decoded = int(parse_eval(res.output).get("eval_runs", 0))
        if res.exit_code != 0:
            problems.append(f"{kv}: llama-completion exited {exits.describe(res.exit_code)}")
            continue
        missing = missing_log_evidence(ctx.lane.log_evidence, res.output)
        if missing:
            problems.append(f"{kv}: backend log lacks {missing}")
        if decoded <= 0:
            problems.append(f"{kv}: no tokens generated")
        kv_seen = parse_kv_types(res.output)
        if kv_seen != (kv, kv):
            problems.append(f"{kv}: KV cache reported as {kv_seen}, not K ({kv}) V ({kv})")
        figures.append(f"{kv}:{decoded}")
    counts, metrics = recompute(ctx.logs_dir)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    if counts["kv_types"] != len(ctx.config.kv_types):
        problems.append(f"{counts['kv_types']} smoke runs in the log for {len(ctx.config.kv_types)} KV types")
    if problems:
        return CR.FAIL, "; ".join(problems)
    return CR.PASS, f"log evidence found; tokens decoded per KV type {', '.join(figures)}"


DEFAULT_KV_TYPES = ("f16", "q8_0", "q4_0")


@dataclasses.dataclass(frozen=True)
class Options:
    kv_types: tuple[str, ...] = option(DEFAULT_KV_TYPES, "KV cache types (applied to K and V) for graph_smoke.")


CHECK = Check(name=STEP, run=run_graph_smoke, recompute=recompute, problems=problems,
              figure_prefixes=("tokens_decoded_",), options=Options)
