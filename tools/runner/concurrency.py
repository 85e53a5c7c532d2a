"""Concurrency: N requests at once on a server with N slots give the same outputs as the same
requests one after another (temperature 0, fixed seed)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

from proto import runner_report_pb2 as rpb
from tools.runner.context import RunContext
from tools.runner.llama_server import LlamaServer, ServerError
from tools.runner.steps import Step

CR = rpb.CheckResult

PROMPTS = ("Once upon a time", "The capital of France is", "def fibonacci(n):", "In 1492, Columbus")
N_PARALLEL = len(PROMPTS)
SLOT_CTX = 256  # the tiny model's training context; real models get the same per-slot size
N_PREDICT = 32


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals in flight at one instant (checked at each interval's start)."""
    return max((sum(1 for s, e in intervals if s <= t < e) for t, _ in intervals), default=0)


def run_concurrency(ctx: RunContext, step: Step) -> tuple[int, str]:
    n_predict = max(ctx.config.n_predict, N_PREDICT)
    barrier = threading.Barrier(N_PARALLEL)
    intervals: list[tuple[float, float]] = []

    def timed(prompt: str) -> dict:
        barrier.wait(timeout=60)  # all requests leave together
        start = time.monotonic()
        out = srv.complete(prompt, n_predict)
        intervals.append((start, time.monotonic()))
        return out

    try:
        with LlamaServer(ctx, step, N_PARALLEL, N_PARALLEL * SLOT_CTX) as srv:
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(N_PARALLEL) as pool:
                concurrent_out = list(pool.map(timed, PROMPTS))
            wall_concurrent = time.monotonic() - t0
            t0 = time.monotonic()
            sequential_out = [srv.complete(p, n_predict) for p in PROMPTS]
            wall_sequential = time.monotonic() - t0
    except (ServerError, OSError, ValueError, threading.BrokenBarrierError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    problems = []
    for prompt, a, b in zip(PROMPTS, concurrent_out, sequential_out):
        step.log(f"{prompt!r}: concurrent slot {a.get('id_slot')} {a.get('content')!r} | sequential {b.get('content')!r}")
        if a.get("content") != b.get("content") or a.get("tokens") != b.get("tokens"):
            problems.append(f"{prompt!r}: concurrent output differs from sequential")
        if a.get("tokens_predicted", 0) <= 0:
            problems.append(f"{prompt!r}: no tokens predicted")
    slots = {a.get("id_slot") for a in concurrent_out}
    c, m = step.result.counts, step.result.metrics
    c["concurrent_sequences"] = len(PROMPTS)
    c["distinct_slots"] = len(slots)
    c["max_in_flight"] = max_overlap(intervals)
    c["tokens"] = sum(int(a.get("tokens_predicted", 0)) for a in concurrent_out)
    m["wall_seconds_concurrent"] = wall_concurrent
    m["wall_seconds_sequential"] = wall_sequential
    if c["max_in_flight"] < N_PARALLEL:
        problems.append(f"at most {c['max_in_flight']} of {N_PARALLEL} requests were in flight at once: not concurrent")
    if problems:
        return CR.FAIL, "; ".join(problems)
    return CR.PASS, (f"{len(PROMPTS)} concurrent sequences ({len(slots)} slots) match the sequential run "
                     f"({c['tokens']} tokens, {wall_concurrent:.2f}s vs {wall_sequential:.2f}s sequential)")
