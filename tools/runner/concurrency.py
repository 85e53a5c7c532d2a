"""Concurrency: N requests at once on a server with N slots give the same outputs as the same
requests one after another (temperature 0, fixed seed).

Batched and single-sequence decoding may use different kernels (on GPUs they do), so their logits
differ by rounding. Greedy outputs are therefore compared token by token; a divergence passes only
where the token the concurrent run took was, in the sequential run, a numerical near-tie with the
top-1 (log-probability within --parity_max_abs_delta x 2). Cross-talk between
slots, or any divergence at a decisive position, fails.
"""

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


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def aligned_probabilities(tokens: list[int], probs: list[dict]) -> list[dict | None]:
    """Per generated token, its entry in completion_probabilities or None.

    The server leaves out entries for tokens that end inside a UTF-8 sequence (byte tokens), so
    the two lists are matched by token id, not by index.
    """
    out: list[dict | None] = []
    j = 0
    for token in tokens:
        if j < len(probs) and int(probs[j].get("id", -1)) == token:
            out.append(probs[j])
            j += 1
        else:
            out.append(None)
    return out


N_PROBS = 8  # candidates returned per token: enough to see a near-tie among several tokens


def judge_divergence(concurrent: dict, sequential: dict, tie_tolerance: float) -> tuple[str | None, float | None]:
    """(problem or None, the concurrent token's log-prob gap to the sequential top-1 at the first
    divergence, or None when the outputs are identical)."""
    a, b = concurrent.get("tokens") or [], sequential.get("tokens") or []
    i = first_divergence(a, b)
    if i is None:
        return None, None
    probs = aligned_probabilities(b, sequential.get("completion_probabilities") or [])
    if i >= len(a) or probs[i] is None or not probs[i].get("top_logprobs"):
        return f"outputs diverge at token {i} and the server gave no probabilities there", None
    top = probs[i]["top_logprobs"]
    by_id = {int(t["id"]): float(t["logprob"]) for t in top}
    if a[i] not in by_id:
        return f"diverges at token {i} to token {a[i]}, not among the sequential run's top {len(top)}", None
    gap = float(top[0]["logprob"]) - by_id[a[i]]
    if gap > tie_tolerance:
        return f"diverges at token {i} where the sequential top-1 led by {gap:.3g} nats (> {tie_tolerance:g}): not a near-tie", gap
    return None, gap


def run_concurrency(ctx: RunContext, step: Step) -> tuple[int, str]:
    n_predict = max(ctx.config.n_predict, N_PREDICT)
    barrier = threading.Barrier(N_PARALLEL)
    intervals: list[tuple[float, float]] = []

    def timed(prompt: str) -> dict:
        barrier.wait(timeout=60)  # all requests leave together
        start = time.monotonic()
        out = srv.complete(prompt, n_predict, n_probs=N_PROBS)
        intervals.append((start, time.monotonic()))
        return out

    try:
        with LlamaServer(ctx, step, N_PARALLEL, N_PARALLEL * SLOT_CTX) as srv:
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(N_PARALLEL) as pool:
                concurrent_out = list(pool.map(timed, PROMPTS))
            wall_concurrent = time.monotonic() - t0
            t0 = time.monotonic()
            sequential_out = [srv.complete(p, n_predict, n_probs=N_PROBS) for p in PROMPTS]
            wall_sequential = time.monotonic() - t0
    except (ServerError, OSError, ValueError, threading.BrokenBarrierError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    problems = []
    tie_tolerance = 2 * ctx.config.parity_max_abs_delta
    exact, near_ties, margins = 0, 0, []
    for prompt, a, b in zip(PROMPTS, concurrent_out, sequential_out):
        step.log(f"{prompt!r}: concurrent slot {a.get('id_slot')} {a.get('content')!r} | sequential {b.get('content')!r}")
        if a.get("tokens_predicted", 0) <= 0:
            problems.append(f"{prompt!r}: no tokens predicted")
        problem, margin = judge_divergence(a, b, tie_tolerance)
        if problem:
            problems.append(f"{prompt!r}: {problem}")
        elif margin is None:
            exact += 1
        else:
            near_ties += 1
            margins.append(margin)
            step.log(f"{prompt!r}: diverges at a near-tie (gap to top-1 {margin:.4g} nats <= {tie_tolerance:g})")
    slots = {a.get("id_slot") for a in concurrent_out}
    c, m = step.result.counts, step.result.metrics
    c["concurrent_sequences"] = len(PROMPTS)
    c["distinct_slots"] = len(slots)
    c["max_in_flight"] = max_overlap(intervals)
    c["tokens"] = sum(int(a.get("tokens_predicted", 0)) for a in concurrent_out)
    c["exact_matches"] = exact
    c["near_tie_divergences"] = near_ties
    m["tie_tolerance_nats"] = tie_tolerance
    if margins:
        m["max_margin_at_divergence"] = max(margins)
    m["wall_seconds_concurrent"] = wall_concurrent
    m["wall_seconds_sequential"] = wall_sequential
    if c["max_in_flight"] < N_PARALLEL:
        problems.append(f"at most {c['max_in_flight']} of {N_PARALLEL} requests were in flight at once: not concurrent")
    if problems:
        return CR.FAIL, "; ".join(problems)
    ties = f", {near_ties} diverging only at near-ties" if near_ties else ""
    return CR.PASS, (f"{len(PROMPTS)} concurrent sequences ({len(slots)} slots): {exact} identical to the sequential run{ties} "
                     f"({c['tokens']} tokens, {wall_concurrent:.2f}s vs {wall_sequential:.2f}s sequential)")
