"""Per-op oracle (CPU lane): every node of the llama graph against an independent float64 reference.

The lane's own `llama-eval-callback` (llama.cpp examples/eval-callback, common/debug.cpp) runs the
model on a fixed prompt and prints every graph node as it is computed:

    common_debug_cb_eval: <name> = (<type>) <OP>(<src0>{ne}, <src1>{ne}}) = {ne}

followed by the node's values (the first and last 3 indices along each of dims 0-2, "%12.4f") and
`sum = %f` of all its elements (float32 accumulation). With `--lanes-node-dump FILE` (patch 0006) it
also writes every node's whole output as float32 (tools/runner/checks/op_oracle_dump.py). It runs
twice, with flash attention off (KQ MUL_MAT, SOFT_MAX, the transposed-V SET_ROWS, CONT) and on (CPY
of the cache views to F16, FLASH_ATTN_EXT), both with an F32 KV cache and fixed threads. The log
and the two dumps are the step's raw files.

tools/model/reference_forward.forward_nodes recomputes each node in float64 NumPy from the GGUF
(written from the model definition, not from ggml), for the token ids the binary printed. This
module maps each printed node to its reference (by llama.cpp's node names and sources) and aligns
it with the dump node for node (name, op, type, shape); the printed values and sums must be the
dump's (to their print rounding), then every element of the dump is compared with the reference,
aggregated per ggml op. View nodes (VIEW, RESHAPE, PERMUTE, TRANSPOSE) move no data and are not
compared. A compute node with no reference, or an op of the required set with zero evaluated
nodes, fails the check; NaN/Inf anywhere fails. Runs made before the dump existed (runner < 0.4.0)
are judged on the printed corners and sums only, with PRINT_ROUNDING added to each tolerance.

Tolerances (per op; an element passes when |lane - ref| <= atol * rms(ref node) + rtol * |ref|):
  - F32 ops: the lane computes in float32 (unit roundoff u = 2^-24 = 6e-8), with dot products up to
    512 long and errors carried from up to ~30 upstream nodes; float32 error relative to float64 is
    then ~sqrt(K) * u per MUL_MAT and grows along the chain, ~1e-6..1e-5 relative. rtol 1e-4 (about
    10x the largest observed, see README) with atol 1e-4 of the node's rms keeps a margin against summation-order
    noise yet is ~1000x tighter than an error of one F16 rounding, so a wrong op (a dropped scale,
    a wrong rotation, a wrong row) fails.
  - CPY to F16: one F16 ulp (2^-10 relative): lane and reference round slightly different inputs,
    so they may land on adjacent F16 values.
  - FLASH_ATTN_EXT: the CPU kernel also rounds Q to F16 for the K dot products (its K is F16);
    a relative error of 2^-11 in scores of magnitude <~10 moves the softmax weights by ~5e-3
    relative, so rtol 1e-2, atol 1e-3 (test-backend-ops bounds FA's normalized MSE at 5e-4).
  - Older runs' sums (their only view of the unprinted elements): 1e-6 (%f) + twice the rounding of a float32 sequential
    sum of the reference (what debug.cpp computes, simulated) + 6 * sqrt(sum of squared element
    tolerances) (element errors of independent sign). Measured sum errors with flash attention off
    are <= 1e-3, 50x below; a shift of 0.5 in any sum fails (a test shows it).

recompute(logs_dir, model=None) re-derives every count and metric from op_oracle.log and the model
file: the log names the model (its configuration's model=<path> and sha256=<hex>); pass `model` when the
file lives elsewhere (its sha256 must match the logged one).
"""

from __future__ import annotations

import collections
import json
import math
import os
import pathlib

import gguf

from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.model import prompt_tokenizer
from tools.model import reference_forward as rf
from tools.runner import exits, log_blocks
from tools.runner.checks import op_oracle_local
from tools.runner.checks.base import Check
from tools.runner.checks.op_oracle_dump import read_dump, write_dump
from tools.runner.checks.op_oracle_graph import PRINT_ROUNDING, TOLERANCES, VIEW_OPS, NodeResult, evaluate_run
from tools.runner.checks.op_oracle_log import EVAL_BIN, OracleLogError, parse_config, parse_runs

CR = rpb.CheckResult

STEP = "op_oracle"


# ---- the step's figures ----

def _tolerance_config(config: dict[str, str]) -> dict[str, tuple[float, float]]:
    tolerances = {}
    for key, value in config.items():
        if key.startswith("tol."):
            atol, rtol = value.split(",")
            tolerances[key[4:]] = (float(atol), float(rtol))
    return tolerances


# Where an auditor on another machine keeps models: files (os.pathsep-separated) tried by sha256 when
# the path a log names does not exist there (e.g. the embedded model in another Bazel output base).
MODELS_ENV = "LANES_AUDIT_MODELS"


def _model_by_digest(sha256: str) -> pathlib.Path | None:
    for entry in os.environ.get(MODELS_ENV, "").split(os.pathsep):
        candidate = pathlib.Path(entry) if entry else None
        if candidate is not None and candidate.is_file() and sha256_file(candidate) == sha256:
            return candidate
    return None


def step_config(logs_dir: pathlib.Path, text: str) -> dict[str, str]:
    """The step's configuration file; for older runs, the config lines the runner wrote in its log."""
    if log_blocks.config_path(logs_dir, STEP).is_file():
        return log_blocks.step_config(logs_dir, STEP)
    return parse_config(log_blocks.runner_lines(text))


# Runs made from this runner version on dump every node in full; older ones are judged on the
# printed corners and sums they have.
NODE_DUMP_SINCE = (0, 4, 0)
# Runs from this runner version count each compute op of the whole printed graph (op.<OP>.in_graph).
GRAPH_OPS_SINCE = (0, 5, 0)


def dump_name(flash_attn: str) -> str:
    return f"{STEP}.fa_{flash_attn}.nodes"


def evaluate_log(text: str, model_path: pathlib.Path | None = None, config: dict[str, str] | None = None,
                 logs_dir: pathlib.Path | None = None
                 ) -> tuple[dict[str, int], dict[str, float], list[NodeResult], dict[str, str]]:
    """Counts, metrics, per-node results and the configuration of one op_oracle.log (config: the
    step's; default: the config lines the runner wrote in the log, as older runs have them).

    Where the config names a run's node dump (`node_dump.fa_<mode>`, a file in logs_dir), every
    element of every node is compared; otherwise only the printed corners and sums are."""
    config = parse_config(log_blocks.runner_lines(text)) if config is None else config
    path = model_path or (pathlib.Path(config["model"]) if config.get("model") else None)
    if (path is None or not path.is_file()) and config.get("sha256"):
        path = _model_by_digest(config["sha256"]) or path
    if path is None or not path.is_file():
        raise FileNotFoundError(f"model file {path} not found; pass the model the log names "
                                f"(sha256 {config.get('sha256', '?')})")
    if config.get("sha256") and sha256_file(path) != config["sha256"]:
        raise ValueError(f"{path}: sha256 differs from the logged {config['sha256']}")
    tolerances = _tolerance_config(config)
    graph_ops = [o for o in config.get("graph_ops", "").split(",") if o]
    required = [o for o in config.get("required_ops", "").split(",") if o]
    absent_ok = [o for o in config.get("absent_ops", "").split(",") if o]
    runs = parse_runs(text)
    # A re-run (after a truncated clean exit, see run_op_oracle) supersedes the earlier run of its mode.
    last = {r.flash_attn: r for r in runs}
    truncated = len(runs) - len(last)
    runs = list(last.values())
    reader = gguf.GGUFReader(path, "r")
    local = config.get("oracle") == "local"
    counts: dict[str, int] = {"runs": len(runs), "runs_failed": 0}
    if local:
        # Each node from the lane's own inputs (op_oracle_local): quantized or non-llama graphs.
        arch = op_oracle_local.architecture(path, reader)
        keep = {int(x) for x in config.get("local_layers", "").split(",") if x}
        counts["local_layers_as_required"] = int(keep == op_oracle_local.keep_layers_for(_n_layer(reader)))
        tolerances = dict(op_oracle_local.LOCAL_TOLERANCES)
    else:
        gaps = rf.node_gaps(reader)
        if gaps:
            raise rf.UnsupportedModelError(f"{path}: the chained per-op oracle does not implement {'; '.join(gaps)}")
        model = rf.load_model(path)
    results: list[NodeResult] = []
    if truncated:
        counts["truncated_runs"] = truncated
    for run in runs:
        if run.exit_code != 0:
            counts["runs_failed"] += 1
        counts[f"tokens.fa_{run.flash_attn}"] = len(run.tokens)
        if "expected_tokens" in config:  # the run's fresh prompt, tokenized without the lane
            expected = [int(t) for t in config["expected_tokens"].split(",") if t]
            counts[f"tokens.fa_{run.flash_attn}.match_vocabulary"] = int(run.tokens == expected)
        dump_file = config.get(f"node_dump.fa_{run.flash_attn}")
        dumped = None
        if dump_file:
            if logs_dir is None or pathlib.Path(dump_file).name != dump_file:
                raise OracleLogError(f"node dump {dump_file!r}: expected a file name in the step's logs directory")
            dumped = read_dump(pathlib.Path(logs_dir) / dump_file)
        if dumped is not None:  # a key older runs' records do not have
            counts[f"dump.fa_{run.flash_attn}"] = 1
        if run.tokens and run.nodes:
            if local:
                if dumped is None:
                    raise OracleLogError(f"the -fa {run.flash_attn} run has no node dump (the local oracle needs one)")
                results.extend(op_oracle_local.evaluate_run(run, dumped, reader, arch, keep))
            else:
                results.extend(evaluate_run(run, model, tolerances, dumped))
    metrics: dict[str, float] = {}
    # The model's own graph as the lane printed it, every layer: each compute op in it must have
    # nodes evaluated (the local oracle keeps three blocks; an op only elsewhere would go unseen).
    in_graph = collections.Counter(n.op for run in runs for n in run.nodes if n.op not in VIEW_OPS)
    for op, n in (in_graph.items() if not log_blocks.run_predates(GRAPH_OPS_SINCE) else ()):
        counts[f"op.{op}.in_graph"] = n
    counts["nodes"] = len(results)
    for status in ("view", "pass", "fail", "unresolved"):
        counts[f"nodes_{status}"] = sum(r.status == status for r in results)
    ops = list(dict.fromkeys(graph_ops + sorted({r.node.op for r in results if r.status != "view"})
                             + sorted(k[3:-9] for k in counts if k.startswith("op.") and k.endswith(".in_graph"))))
    for op in ops:
        mine = [r for r in results if r.node.op == op and r.status in ("pass", "fail")]
        counts[f"op.{op}.evaluated"] = len(mine)  # all runs, after-FA nodes included
        counts[f"op.{op}.passed"] = sum(r.status == "pass" for r in mine)
        counts[f"op.{op}.failed"] = sum(r.status == "fail" for r in mine)
        counts[f"op.{op}.not_evaluated"] = sum(r.node.op == op and r.status == "unresolved" for r in results)
        counts[f"op.{op}.elements"] = sum(r.elements for r in mine)
        counts[f"op.{op}.required"] = int(op in required)
        # A claim the log can refute: the lane spec says this op does not occur in the graph.
        present = any(r.node.op == op for r in results)
        counts[f"op.{op}.absent_from_graph"] = int(op in absent_ok and not present)
        own = [r for r in mine if not r.after_fa]
        after = [r for r in mine if r.after_fa]
        counts[f"op.{op}.evaluated_after_fa"] = len(after)
        if own:
            metrics[f"op.{op}.max_abs_err"] = max(r.max_abs_err for r in own)
            metrics[f"op.{op}.max_rel_err"] = max(r.max_rel_err for r in own)
            metrics[f"op.{op}.worst_tol_ratio"] = max(r.worst_ratio for r in own)
        if after:
            metrics[f"op.{op}.after_fa.max_abs_err"] = max(r.max_abs_err for r in after)
            metrics[f"op.{op}.after_fa.worst_tol_ratio"] = max(r.worst_ratio for r in after)
        if op in tolerances:
            metrics[f"op.{op}.tol_rms"] = tolerances[op][0]
            metrics[f"op.{op}.tol_rel"] = tolerances[op][1]
    return counts, metrics, results, config


def recompute(logs_dir: pathlib.Path, model: pathlib.Path | None = None) -> tuple[dict[str, int], dict[str, float]]:
    """Counts and metrics of the op_oracle step from logs_dir/op_oracle.log (and the model it names).

    `model` overrides the logged model path (the file must have the logged sha256), e.g. when an
    auditor checks a run on another machine.
    """
    text = (pathlib.Path(logs_dir) / f"{STEP}.log").read_text(encoding="utf-8", errors="replace")
    config = step_config(pathlib.Path(logs_dir), text)
    if config.get("oracle") == "not_applicable":
        return {}, {}
    counts, metrics, _, _ = evaluate_log(text, model, config, pathlib.Path(logs_dir))
    return counts, metrics


def judge(counts: dict[str, int], metrics: dict[str, float], config: dict[str, str]) -> list[str]:
    """Why the figures fail the check (empty = PASS)."""
    problems = []
    fa_modes = [m for m in ("off", "on") if f"tokens.fa_{m}" in counts]
    if counts.get("runs", 0) < 2 or fa_modes != ["off", "on"]:
        problems.append(f"expected a flash-attention off and on run, found {counts.get('runs', 0)} ({fa_modes})")
    if counts.get("runs_failed"):
        problems.append(f"{counts['runs_failed']} {EVAL_BIN} run(s) exited non-zero")
    for mode in fa_modes:
        if counts[f"tokens.fa_{mode}"] == 0:
            problems.append(f"the -fa {mode} run lists no input tokens")
        elif counts.get(f"tokens.fa_{mode}.match_vocabulary") == 0:
            problems.append(f"the -fa {mode} run's input tokens are not this run's prompt as the model's vocabulary "
                            "tokenizes it (a replay of another prompt?)")
    if not log_blocks.run_predates(NODE_DUMP_SINCE):
        for mode in fa_modes:
            if not counts.get(f"dump.fa_{mode}"):
                problems.append(f"the -fa {mode} run has no node dump: only its printed corners could be compared")
    if counts.get("local_layers_as_required") == 0:
        problems.append("the local oracle's kept blocks are not the first, middle and last of the model")
    if counts.get("nodes_unresolved"):
        problems.append(f"{counts['nodes_unresolved']} compute node(s) without a reference")
    for op in [o for o in config.get("required_ops", "").split(",") if o]:
        if counts.get(f"op.{op}.evaluated", 0) == 0 and not counts.get(f"op.{op}.absent_from_graph"):
            problems.append(f"{op}: no node evaluated")
    unseen = sorted(k[3:-9] for k, v in counts.items() if k.startswith("op.") and k.endswith(".in_graph") and v
                    and not counts.get(f"op.{k[3:-9]}.evaluated"))
    if unseen:
        problems.append("in the model's graph but never evaluated: " + ", ".join(
            f"{op} ({counts[f'op.{op}.in_graph']} node(s))" for op in unseen))
    failed = sorted(k[3:-7] for k, v in counts.items() if k.startswith("op.") and k.endswith(".failed") and v)
    if failed:
        problems.append("failed: " + ", ".join(f"{op} ({counts[f'op.{op}.failed']} node(s))" for op in failed))
    if any(math.isinf(v) or math.isnan(v) for v in metrics.values()):
        problems.append("NaN/Inf in the lane's output")
    return problems


def table(counts: dict[str, int], metrics: dict[str, float]) -> str:
    """The per-op table, for the log and the README."""
    ops = sorted(k[3:-10] for k in counts if k.startswith("op.") and k.endswith(".evaluated"))
    lines = [f"threshold per element: {PRINT_ROUNDING:g} (print) + tol_rms * rms(ref node) + tol_rel * |ref|; "
             "after_fa = nodes of the -fa on run downstream of FLASH_ATTN_EXT (held to its tolerance)",
             f"{'op':16} {'req':>3} {'graph':>5} {'nodes':>5} {'fail':>4} {'elements':>8} {'max_abs_err':>11} "
             f"{'max_rel_err':>11} {'tol_rms':>8} {'tol_rel':>8} {'worst/tol':>9} {'after_fa':>8}"]
    for op in ops:
        g = lambda key: metrics.get(f"op.{op}.{key}", float("nan"))  # noqa: E731
        lines.append(f"{op:16} {'yes' if counts.get(f'op.{op}.required') else 'no':>3} "
                     f"{counts.get(f'op.{op}.in_graph', 0):5d} {counts[f'op.{op}.evaluated']:5d} {counts[f'op.{op}.failed']:4d} "
                     f"{counts[f'op.{op}.elements']:8d} {g('max_abs_err'):11.3g} {g('max_rel_err'):11.3g} "
                     f"{g('tol_rms'):8.2g} {g('tol_rel'):8.2g} {g('worst_tol_ratio'):9.3g} "
                     f"{counts.get(f'op.{op}.evaluated_after_fa', 0):8d}")
    return "\n".join(lines)


# ---- the runner step ----

def required_ops(spec_path: pathlib.Path, lane_id: str, graph_ops: tuple[str, ...]) -> list[str]:
    """Ops this check must evaluate: those the lane spec's op_coverage assigns to it (else all)."""
    try:
        lane = json.loads(pathlib.Path(spec_path).read_text())["lanes"][lane_id]
    except (OSError, ValueError, KeyError):
        lane = {}
    coverage = lane.get("op_coverage")
    if coverage is None:
        return list(graph_ops)
    return [op for op, check in coverage.items() if check == STEP]


# Re-runs of one flash-attention mode whose clean exit lost the end of the output; bounded.
TRUNCATION_RETRIES = 1


def output_complete(output: str) -> bool:
    """The graph's last node (result_output) was printed to its `sum =` line."""
    at = output.rfind("result_output = ")
    return at >= 0 and "sum = " in output[at:]


def absent_ops(spec_path: pathlib.Path, lane_id: str) -> list[str]:
    """Required ops the lane spec says the llama graph never runs (verified per run: 0 nodes)."""
    try:
        return list(json.loads(pathlib.Path(spec_path).read_text())["lanes"][lane_id].get("ops_absent_from_graph", []))
    except (OSError, ValueError, KeyError):
        return []


def eval_command(bin_path: pathlib.Path, model: pathlib.Path, prompt: str, threads: int, seed: int,
                 flash_attn: str, node_dump: pathlib.Path, n_ctx: int | None = None) -> list[str]:
    # F32 KV cache: the cache nodes (SET_ROWS) stay F32 and only the graph's own cast to F16
    # (CPY, flash attention on) rounds K/V. No warm-up run (eval-callback disables it).
    argv = [str(bin_path), "-m", str(model), "-p", prompt, "-t", str(threads), "-fa", flash_attn,
            "-ctk", "f32", "-ctv", "f32", "--seed", str(seed), "--lanes-node-dump", str(node_dump)]
    # A real model's training context would size every cache node (dumped whole) in the thousands.
    return argv + ["-c", str(n_ctx)] if n_ctx else argv


# The local oracle's context: the prompt fits many times over; the dumped cache nodes stay small.
LOCAL_N_CTX = 256


def _n_layer(reader: gguf.GGUFReader) -> int:
    arch = str(reader.fields["general.architecture"].contents())
    return int(reader.fields[f"{arch}.block_count"].contents())


def _keep_subset(text: str, logs_dir: pathlib.Path, scratch: pathlib.Path, keep: set[int]) -> None:
    """Writes each run's kept nodes (op_oracle_local.stored_nodes) from its full dump in scratch to a
    gzip dump in logs_dir: a real model's full dumps are hundreds of MB, the kept blocks a few."""
    for run in {r.flash_attn: r for r in parse_runs(text)}.values():
        full_path = scratch / dump_name(run.flash_attn)
        if not full_path.is_file():
            continue  # the run wrote no dump; the evaluation says so
        full = read_dump(full_path)
        kept, _ = op_oracle_local.stored_nodes(run.nodes, keep)
        if len(full) == len(run.nodes):
            write_dump(logs_dir / (dump_name(run.flash_attn) + ".gz"), [full[i] for i in kept])
        full_path.unlink()


def run_op_oracle(ctx, step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg = ctx.config
    if ctx.lane.is_accelerator:
        # Accelerators are checked op by op by fixture parity against the CPU backend and model-level
        # against the CPU lane; this oracle certifies the CPU lane itself.
        step.result.required = False
        step.config("oracle", "not_applicable")
        return CR.SKIPPED, "not required: the float64 per-op oracle certifies the CPU lane (accelerators: fixture parity)"
    graph_ops = tuple(ctx.lane.fixture_ops)
    required = required_ops(cfg.spec, ctx.lane.lane_id, graph_ops)
    if not graph_ops:
        return CR.FAIL, "the lane spec lists no llama-graph ops (fixture_ops) to check"
    step.config("model", f"{cfg.model}")
    step.config("sha256", sha256_file(cfg.model))
    step.config("graph_ops", f"{','.join(graph_ops)}")
    step.config("required_ops", f"{','.join(required)}")
    step.config("absent_ops", f"{','.join(absent_ops(cfg.spec, ctx.lane.lane_id))}")
    try:
        expected = prompt_tokenizer.from_gguf(cfg.model).encode(cfg.parity_prompt)
    except (prompt_tokenizer.TokenizerError, ValueError) as err:
        return CR.FAIL, f"cannot tokenize the prompt independently of the lane: {err}"
    step.config("expected_tokens", ",".join(str(t) for t in expected))
    reader = gguf.GGUFReader(cfg.model, "r")
    local = bool(rf.node_gaps(reader))
    keep: set[int] = set()
    if local:
        try:
            op_oracle_local.architecture(cfg.model, reader)
        except ValueError as err:
            return CR.FAIL, f"{type(err).__name__}: {err}"
        keep = op_oracle_local.keep_layers_for(_n_layer(reader))
        step.config("oracle", "local")
        step.config("local_layers", ",".join(str(i) for i in sorted(keep)))
    for op, (atol, rtol) in sorted((op_oracle_local.LOCAL_TOLERANCES if local else TOLERANCES).items()):
        step.config(f"tol.{op}", f"{atol!r},{rtol!r}")
    threads = min(cfg.threads, 4)  # fixed, small: the tiny model needs no more
    codes: list[int] = []
    crashes: list[str] = []
    for fa in ("off", "on"):
        step.config(f"node_dump.fa_{fa}", dump_name(fa) + (".gz" if local else ""))
    for fa in ("off", "on"):
        if local:
            dump = ctx.scratch_dir / dump_name(fa)
            step.extra_logs.append(step.log_path.parent / (dump_name(fa) + ".gz"))
        else:
            dump = step.log_path.parent / dump_name(fa)
            step.extra_logs.append(dump)
        argv = eval_command(ctx.bin(EVAL_BIN), cfg.model, cfg.parity_prompt, threads, cfg.seed, fa, dump,
                            LOCAL_N_CTX if local else None)
        res = step.run(argv, cfg.timeout_s)
        for _ in range(TRUNCATION_RETRIES):
            if res.exit_code != 0 or output_complete(res.output):
                break
            # llama.cpp's logger is asynchronous and leaks its thread at exit (common/log.cpp,
            # common_log_main): under load a clean exit can lose the last printed nodes. Keep that
            # output, say so, and run once more; the figures come from the last run of each mode.
            step.log(f"# lanes: exit 0 but the output stops before result_output's sum (truncated); running -fa {fa} again")
            res = step.run(argv, cfg.timeout_s)
        codes.append(res.exit_code)
        if exits.crashed(res.exit_code):
            crashes.append(f"{EVAL_BIN} -fa {fa} exited {exits.describe(res.exit_code)}")
    step.result.exit_code = max(codes, key=abs)
    text = step.log_path.read_text(encoding="utf-8", errors="replace")
    if local:
        try:
            _keep_subset(text, step.log_path.parent, ctx.scratch_dir, keep)
        except (OracleLogError, ValueError, OSError) as err:
            return CR.FAIL, f"{type(err).__name__}: {err}"
    if crashes:
        # The oracle has nothing to compare once the lane died: say so instead of what the
        # comparison of a cut-off output would report; the figures of what it printed still stand,
        # so that the audit re-derives the same ones.
        try:
            counts, metrics, _, _ = evaluate_log(text, cfg.model, step_config(step.log_path.parent, text),
                                                 step.log_path.parent)
            step.result.counts.update({k: int(v) for k, v in counts.items()})
            step.result.metrics.update({k: float(v) for k, v in metrics.items()})
        except (OracleLogError, ValueError, FileNotFoundError):
            pass
        return CR.FAIL, "the lane crashed: " + "; ".join(crashes)
    try:
        counts, metrics, results, config = evaluate_log(text, cfg.model, step_config(step.log_path.parent, text),
                                                        step.log_path.parent)
    except (OracleLogError, ValueError, FileNotFoundError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    for r in results:
        if r.status in ("fail", "unresolved"):
            step.log(f"# {r.status}: line {r.node.line} {r.node.name} {r.node.op}: {r.why}")
    step.log("# per-op comparison vs the float64 reference:\n" + "\n".join("# " + l for l in table(counts, metrics).splitlines()))
    for k, v in counts.items():
        step.result.counts[k] = int(v)
    for k, v in metrics.items():
        step.result.metrics[k] = float(v)
    problems = judge(counts, metrics, config)
    if problems:
        return CR.FAIL, "; ".join(problems)
    evaluated = [k[3:-10] for k, v in counts.items() if k.startswith("op.") and k.endswith(".evaluated") and v]
    absent = [k[3:-len(".absent_from_graph")] for k, v in counts.items() if k.endswith(".absent_from_graph") and v]
    return CR.PASS, (f"{counts['nodes_pass']} nodes over {len(evaluated)} ops match the float64 reference "
                     f"(required: {', '.join(required)})"
                     + (f"; not in this model's graph (0 nodes with flash attention off and on): {', '.join(absent)}"
                        if absent else ""))


def problems(logs_dir: pathlib.Path, model: pathlib.Path | None = None) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    text = (pathlib.Path(logs_dir) / f"{STEP}.log").read_text(encoding="utf-8", errors="replace")
    config = step_config(pathlib.Path(logs_dir), text)
    if config.get("oracle") == "not_applicable":
        return []
    crashes = [f"{EVAL_BIN} exited {exits.describe(r.exit_code)}" for r in parse_runs(text)
               if r.exit_code is not None and exits.crashed(r.exit_code)]
    if crashes:
        return ["the lane crashed: " + "; ".join(crashes)]
    counts, metrics, _, config = evaluate_log(text, model, config, pathlib.Path(logs_dir))
    return judge(counts, metrics, config)


# The float64 reference's exp and matrix products run through kernels numpy and OpenBLAS pick per CPU
# (AVX-512 or AVX2), and the metrics are differences of near-equal numbers: the same raw files give
# error metrics up to 3.1e-9 apart (relative) on an AVX-512 and an AVX2 host. 1e-7 keeps 30x margin;
# the verdict is re-derived from the raw files on its own.
METRIC_REL_TOL = 1e-7

CHECK = Check(name="op_oracle", run=run_op_oracle, recompute=recompute, problems=problems,
              metric_rel_tol=METRIC_REL_TOL)
