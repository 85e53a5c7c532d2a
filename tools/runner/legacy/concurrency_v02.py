"""The concurrency check as runner 0.2.x made and judged it, kept to audit the runs it made (evidence/runs).

Runs of runner 0.3.0 and later are judged by tools/runner/checks/concurrency.py. What follows is that
runner's module unchanged but for its registry entry.

Concurrency: N requests at once on a server with N slots give the same outputs as the same
requests one after another (temperature 0, fixed seed).

Batched and single-sequence decoding may use different kernels (on GPUs they do), so their logits
differ by rounding. Greedy outputs are therefore compared token by token; a divergence passes only
where the token the concurrent run took was, in the sequential run, a numerical near-tie with the
top-1 (log-probability within --parity_max_abs_delta x 2). Cross-talk between
slots, or any divergence at a decisive position, fails.

That the requests were decoded at the same time is taken from the server's own log, not from the
client: the slot lines (llama_server.parse_server_log) must show at least two tasks in processing
at overlapping times and the concurrent requests spread over >= N_PARALLEL distinct slots. The
server's JSON responses are kept (concurrency.responses.json) and every figure is recomputed from
them and the server log by recompute().
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import threading

from proto import runner_report_pb2 as rpb
from tools.runner import log_blocks
from tools.runner.context import RunContext
from tools.runner.llama_server import LlamaServer, ServerError, max_busy, parse_server_log
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "concurrency"
RESPONSES_FILE = f"{STEP}.responses.json"
SERVER_LOG = f"{STEP}.server.log"

PROMPTS = ("Once upon a time", "The capital of France is", "def fibonacci(n):", "In 1492, Columbus")
N_PARALLEL = len(PROMPTS)
SLOT_CTX = 256  # the tiny model's training context; real models get the same per-slot size
N_PREDICT = 32


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


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str]]:
    """Counts, metrics and problems, from the kept responses, the server log and the config lines."""
    logs_dir = pathlib.Path(logs_dir)
    conf = {k: float(v) for k, v in log_blocks.step_config(logs_dir, STEP).items()}
    n_parallel, tie_tolerance = int(conf["n_parallel"]), conf["tie_tolerance_nats"]
    data = json.loads((logs_dir / RESPONSES_FILE).read_text())
    prompts, concurrent_out, sequential_out = data["prompts"], data["concurrent"], data["sequential"]
    problems: list[str] = []
    exact, near_ties, margins = 0, 0, []
    for prompt, a, b in zip(prompts, concurrent_out, sequential_out):
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
    if not (len(prompts) == len(concurrent_out) == len(sequential_out) == n_parallel):
        problems.append(f"{len(concurrent_out)} concurrent / {len(sequential_out)} sequential responses for {n_parallel} prompts")
    # Server side: the first n_parallel tasks are the concurrent requests, the rest the sequential run.
    server = parse_server_log((logs_dir / SERVER_LOG).read_text(errors="replace"))
    phase, rest = server.tasks[:n_parallel], server.tasks[n_parallel:]
    busy = max_busy(phase)
    slots = {t.slot for t in phase}
    c: dict[str, int] = {
        "concurrent_sequences": len(concurrent_out),
        "tokens": sum(int(a.get("tokens_predicted", 0)) for a in concurrent_out),
        "exact_matches": exact,
        "near_tie_divergences": near_ties,
        "server_concurrent_tasks": len(phase),
        "server_max_busy_slots": busy,
        "server_distinct_slots": len(slots),
    }
    m: dict[str, float] = {"tie_tolerance_nats": tie_tolerance}
    if margins:
        m["max_margin_at_divergence"] = max(margins)
    if phase and all(t.released is not None for t in phase):
        m["server_concurrent_wall_s"] = max(t.released for t in phase) - min(t.launched for t in phase)
    if rest and all(t.released is not None for t in rest):
        m["server_sequential_wall_s"] = max(t.released for t in rest) - min(t.launched for t in rest)
    if len(phase) < n_parallel or any(t.released is None for t in phase):
        problems.append(f"the server log shows {len(phase)} launched / "
                        f"{sum(t.released is not None for t in phase)} released tasks for {n_parallel} concurrent requests")
    if busy < 2:
        problems.append(f"the server log shows at most {busy} slot(s) processing at once: requests were decoded one at a time")
    if len(slots) < n_parallel:
        problems.append(f"the concurrent requests used {len(slots)} distinct slot(s) on the server, fewer than {n_parallel}")
    return c, m, problems


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    c, m, _ = evaluate(logs_dir)
    return c, m


def run_concurrency(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    n_predict = max(ctx.config.n_predict, N_PREDICT)
    tie_tolerance = 2 * ctx.config.parity_max_abs_delta
    step.config("n_parallel", f"{N_PARALLEL}")
    step.config("tie_tolerance_nats", f"{tie_tolerance!r}")
    barrier = threading.Barrier(N_PARALLEL)

    def together(prompt: str) -> dict:
        barrier.wait(timeout=60)  # all requests leave together
        return srv.complete(prompt, n_predict, n_probs=N_PROBS)

    try:
        with LlamaServer(ctx, step, N_PARALLEL, N_PARALLEL * SLOT_CTX) as srv:
            with concurrent.futures.ThreadPoolExecutor(N_PARALLEL) as pool:
                concurrent_out = list(pool.map(together, PROMPTS))
            sequential_out = [srv.complete(p, n_predict, n_probs=N_PROBS) for p in PROMPTS]
    except (ServerError, OSError, ValueError, threading.BrokenBarrierError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    responses = ctx.logs_dir / RESPONSES_FILE
    responses.write_text(json.dumps({"prompts": list(PROMPTS), "concurrent": concurrent_out,
                                     "sequential": sequential_out}, indent=1, ensure_ascii=False))
    step.extra_logs.append(responses)
    for prompt, a, b in zip(PROMPTS, concurrent_out, sequential_out):
        step.log(f"{prompt!r}: concurrent slot {a.get('id_slot')} {a.get('content')!r} | sequential {b.get('content')!r}")
    c, m, problems = evaluate(ctx.logs_dir)
    step.result.counts.update(c)
    step.result.metrics.update(m)
    if problems:
        return CR.FAIL, "; ".join(problems)
    ties = f", {c['near_tie_divergences']} diverging only at near-ties" if c["near_tie_divergences"] else ""
    return CR.PASS, (f"{c['concurrent_sequences']} concurrent sequences; server log: {c['server_max_busy_slots']} slots "
                     f"processing at once over {c['server_distinct_slots']} distinct slots; {c['exact_matches']} identical "
                     f"to the sequential run{ties} ({c['tokens']} tokens)")


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    return evaluate(logs_dir)[2]
