"""Cancellation: (a) a client drops a streaming request mid-generation: the server stays healthy
and the next request succeeds (one slot, so a generation that was not cancelled would hold it);
(b) SIGINT mid-generation: llama-completion exits within a bound and a new run succeeds."""

from __future__ import annotations

import signal
import subprocess
import time

from proto import runner_report_pb2 as rpb
from tools.runner.context import RunContext
from tools.runner.llama_server import LlamaServer, ServerError
from tools.runner.steps import Step

CR = rpb.CheckResult

LONG_CTX = 4096
LONG_PREDICT = 3000


def abort_stream(ctx: RunContext, step: Step) -> list[str]:
    problems = []
    with LlamaServer(ctx, step, n_parallel=1, ctx_size=LONG_CTX) as srv:
        chunks, finished = srv.stream_and_abort("Tell me a long story.", LONG_PREDICT, chunks_before_abort=4)
        aborted_at = time.monotonic()
        step.log(f"stream: read {chunks} chunks, finished before abort: {finished}; connection dropped")
        if finished:
            problems.append("the stream finished before it could be aborted")
        if chunks == 0:
            problems.append("the stream produced no chunk")
        try:
            out = srv.complete("Hello", 8, timeout_s=min(ctx.config.timeout_s, 120))
            recovery = time.monotonic() - aborted_at
        except OSError as err:
            return problems + [f"request after the abort failed: {err}"]
        healthy = srv.healthy()
        step.log(f"next request: {out.get('tokens_predicted')} tokens {out.get('content')!r}; healthy={healthy}")
        step.result.metrics["recovery_seconds"] = recovery
        step.result.counts["stream_chunks_before_abort"] = chunks
        if not healthy or not srv.alive():
            problems.append("server unhealthy after the aborted stream")
        if out.get("tokens_predicted", 0) <= 0:
            problems.append("the request after the abort generated nothing")
    return problems


def sigint_generation(ctx: RunContext, step: Step) -> list[str]:
    cfg = ctx.config
    base = [str(ctx.bin("llama-completion")), "-m", str(cfg.model), "--temp", "0", "-s", str(cfg.seed),
            "-no-cnv", "--no-display-prompt", "-t", str(cfg.threads), *ctx.ngl]
    argv = base + ["-p", "Tell me a long story.", "-c", str(LONG_CTX), "-n", str(LONG_PREDICT), "--ignore-eos"]
    out_path = ctx.scratch_dir / "sigint.out"
    step.log(f"$ {' '.join(argv)}  (SIGINT once output appears)")
    with open(out_path, "wb") as out, open(ctx.logs_dir / f"{step.name}.sigint.log", "wb") as err:
        step.extra_logs.append(ctx.logs_dir / f"{step.name}.sigint.log")
        proc = ctx.tracker.popen(argv, stdout=out, stderr=err)
        deadline = time.monotonic() + min(cfg.timeout_s, 300)
        while time.monotonic() < deadline and proc.poll() is None and out_path.stat().st_size < 16:
            time.sleep(0.05)
        if proc.poll() is not None:
            return [f"llama-completion ended (exit {proc.returncode}) before SIGINT could be sent"]
        if out_path.stat().st_size < 16:
            ctx.tracker.stop(proc)
            return ["llama-completion produced no output before the deadline"]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=cfg.sigint_exit_bound_s)
        except subprocess.TimeoutExpired:
            ctx.tracker.stop(proc)
            return [f"llama-completion still running {cfg.sigint_exit_bound_s:.0f}s after SIGINT"]
        exit_s = time.monotonic() - t0
    step.log(f"# SIGINT: exit {code} after {exit_s:.3f}s, {out_path.stat().st_size} bytes generated")
    step.result.metrics["sigint_exit_seconds"] = exit_s
    step.result.counts["sigint_exit_code"] = code
    res = step.run(base + ["-p", "Hello", "-n", "8"], cfg.timeout_s)
    if res.exit_code != 0:
        return [f"the run after SIGINT exited {res.exit_code}"]
    return []


def run_cancellation(ctx: RunContext, step: Step) -> tuple[int, str]:
    try:
        problems = abort_stream(ctx, step)
    except (ServerError, OSError, ValueError) as err:
        problems = [f"stream abort: {type(err).__name__}: {err}"]
    problems += sigint_generation(ctx, step)
    if problems:
        return CR.FAIL, "; ".join(problems)
    m = step.result.metrics
    return CR.PASS, (f"server recovered {m['recovery_seconds']:.2f}s after a dropped stream; "
                     f"SIGINT exit in {m['sigint_exit_seconds']:.2f}s; next requests succeeded")
