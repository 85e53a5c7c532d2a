"""Concurrency: N requests at once on a server with N slots give the same outputs as the same
requests one after another (temperature 0, fixed seed).

Batched and single-sequence decoding may use different kernels (on GPUs they do), so their logits
differ by rounding. Greedy outputs are therefore compared token by token; a divergence passes only
where the token the concurrent run took was, in the sequential run, a numerical near-tie with the
top-1 (log-probability within --parity_max_abs_delta x 2 for an F32 model; for a model with
quantized tensors, reference_parity's quantized tie margin, 0.5 nats: batched and single-row
quantized matmuls round the activations differently, and leads of 0.12-0.17 nats were seen to flip on
Gemma 3 270M Q4_K_M). Cross-talk between slots, or any divergence at a decisive position, fails.

That the requests were decoded at the same time is shown twice, and neither word is taken alone:
- by the client: the N requests are streamed (stream=true) and the client records, per connection,
  the arrival time of every SSE event on its monotonic clock (concurrency.client.json). Every pair
  of connections must interleave: each receives a token event strictly between the other's first
  and last. A server that decodes one request after another delivers A's events before B's first,
  whatever its log says.
- by the server's own log: its slot lines (llama_server.parse_server_log) must show at least two
  tasks in processing at overlapping times and the requests spread over >= N_PARALLEL distinct slots.
The streamed outputs (tokens and text joined from the events) are compared with the sequential,
non-streamed run (concurrency.responses.json). Every figure and the verdict are recomputed from
those two files, the server log and the step's configuration by recompute() / problems().
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import threading
import time

from proto import runner_report_pb2 as rpb
from tools.runner import log_blocks
from tools.runner.checks import reference_parity
from tools.runner.checks.base import Check
from tools.runner.context import RunContext
from tools.runner.legacy import concurrency_v02
from tools.runner.llama_server import LlamaServer, ServerError, max_busy, parse_server_log
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "concurrency"
RESPONSES_FILE = f"{STEP}.responses.json"
CLIENT_FILE = f"{STEP}.client.json"
# The runner that first kept the client's evidence; older runs are judged as they were made.
CLIENT_EVIDENCE_SINCE = (0, 3, 0)
SERVER_LOG = f"{STEP}.server.log"

PROMPTS = ("Once upon a time", "The capital of France is", "def fibonacci(n):", "In 1492, Columbus")
N_PARALLEL = len(PROMPTS)
SLOT_CTX = 256  # the tiny model's training context; real models get the same per-slot size
N_PREDICT = 128  # decode steps enough that streams interleave despite a late-served request (2 busy cores)


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


def parse_stream(conn: dict) -> tuple[dict, list[float], list[str]]:
    """(the response the events add up to, the arrival times of the token events, problems) for one
    streamed connection of the client file. Every line is untrusted: a malformed one is a problem."""
    out: dict = {"tokens": [], "completion_probabilities": [], "content": "", "tokens_predicted": 0, "id_slot": None}
    times: list[float] = []
    problems: list[str] = []
    stopped = False
    if conn.get("status") != 200:
        problems.append(f"HTTP status {conn.get('status')}")
    if conn.get("end") != "eof":
        problems.append(f"the stream ended with {conn.get('end')!r}")
    for t, line in conn.get("events", []):
        payload = line[len("data:"):].strip()
        try:
            ev = json.loads(payload)
        except ValueError:
            problems.append(f"unparsable event {payload[:80]!r}")
            continue
        if not isinstance(ev, dict) or "error" in ev:
            problems.append(f"error event {payload[:200]!r}")
            continue
        try:
            tokens = [int(x) for x in ev.get("tokens") or []]
            probs = list(ev.get("completion_probabilities") or [])
            content = str(ev.get("content") or "")
            predicted = int(ev.get("tokens_predicted") or 0)
            if not all(isinstance(p, dict) for p in probs):
                raise TypeError("completion_probabilities entries are not objects")
        except (TypeError, ValueError) as err:
            problems.append(f"malformed event {payload[:80]!r}: {err}")
            continue
        if tokens or content:
            times.append(float(t))
        out["tokens"] += tokens
        out["completion_probabilities"] += probs
        out["content"] += content
        out["tokens_predicted"] = max(out["tokens_predicted"], predicted)
        out["id_slot"] = ev.get("id_slot", out["id_slot"])
        stopped = stopped or bool(ev.get("stop"))
    if not stopped:
        problems.append("no final event (\"stop\": true)")
    return out, times, problems


def streamed_view(response: dict) -> dict:
    """A non-streamed response as a stream shows it: a streamed event per completion_probabilities
    entry (tokens ending inside a UTF-8 sequence have neither), so tokens are taken from those."""
    probs = response.get("completion_probabilities") or []
    return {"tokens": [int(p.get("id", -1)) for p in probs], "completion_probabilities": probs}


def interleave(a: list[float], b: list[float]) -> bool:
    """Each of the two connections received a token event strictly between the other's first and last."""
    if len(a) < 2 or len(b) < 2:
        return False
    return any(b[0] < t < b[-1] for t in a) and any(a[0] < t < a[-1] for t in b)


# Runs from this runner version record the model's quantized types, which set the tie tolerance.
QUANTIZED_TYPES_SINCE = (0, 5, 0)


def allowed_tie_tolerance(quantized_types: tuple[str, ...], parity_max_abs_delta: float) -> float:
    if quantized_types:
        return reference_parity.QUANTIZED_BOUNDS["tie_margin"]
    return 2 * parity_max_abs_delta


def _tie_tolerance_problems(conf: dict[str, str], tie_tolerance: float) -> list[str]:
    if "quantized_types" not in conf:
        return [] if log_blocks.run_predates(QUANTIZED_TYPES_SINCE) else ["the step recorded no quantized_types"]
    types = tuple(t for t in conf["quantized_types"].split(",") if t)
    allowed = allowed_tie_tolerance(types, reference_parity.Options.parity_max_abs_delta)
    if not tie_tolerance <= allowed:
        return [f"tie tolerance {tie_tolerance:g} nats is looser than the {allowed:g} a model with tensor types "
                f"{conf['quantized_types'] or 'F32'} allows"]
    return []


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str]]:
    """Counts, metrics and problems, from the client file, the kept sequential responses, the server
    log and the step's configuration."""
    logs_dir = pathlib.Path(logs_dir)
    if log_blocks.run_predates(CLIENT_EVIDENCE_SINCE):
        return concurrency_v02.evaluate(logs_dir)
    conf = log_blocks.step_config(logs_dir, STEP)
    n_parallel, tie_tolerance = int(float(conf["n_parallel"])), float(conf["tie_tolerance_nats"])
    data = json.loads((logs_dir / RESPONSES_FILE).read_text())
    prompts, sequential_out = data["prompts"], data["sequential"]
    client = json.loads((logs_dir / CLIENT_FILE).read_text())
    problems: list[str] = _tie_tolerance_problems(conf, tie_tolerance)
    if "prompts" in conf and json.loads(conf["prompts"]) != prompts:  # runs that recorded their challenge
        problems.append("the kept responses are for other prompts than the run's challenge")
    concurrent_out, times = [], []
    for i, conn in enumerate(client.get("connections", [])):
        out, ts, bad = parse_stream(conn)
        concurrent_out.append(out)
        times.append(ts)
        problems += [f"connection {i} ({conn.get('prompt')!r}): {p}" for p in bad]
    exact, near_ties, margins = 0, 0, []
    for prompt, a, b in zip(prompts, concurrent_out, sequential_out):
        if a.get("tokens_predicted", 0) <= 0 or not a["tokens"]:
            problems.append(f"{prompt!r}: no tokens streamed")
        problem, margin = judge_divergence(a, streamed_view(b), tie_tolerance)
        if problem:
            problems.append(f"{prompt!r}: {problem}")
        elif margin is None:
            if a["content"] != b.get("content"):
                problems.append(f"{prompt!r}: the streamed text differs from the sequential run's though its tokens match")
            exact += 1
        else:
            near_ties += 1
            margins.append(margin)
    if not (len(prompts) == len(concurrent_out) == len(sequential_out) == n_parallel):
        problems.append(f"{len(concurrent_out)} concurrent / {len(sequential_out)} sequential responses for {n_parallel} prompts")
    # Client side: every pair of streams must interleave on the client's clock.
    pairs = [(i, j) for i in range(len(times)) for j in range(i + 1, len(times))]
    apart = [(i, j) for i, j in pairs if not interleave(times[i], times[j])]
    if len(times) < 2 or apart:
        spans = "; ".join(f"{i}-{j}: {_span(times[i])} vs {_span(times[j])}" for i, j in apart[:6])
        problems.append(f"the client saw no interleaving of streamed chunks for {len(apart)} of {len(pairs)} connection "
                        f"pair(s) ({spans}): the server did not decode those requests at the same time")
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
        "client_connection_pairs": len(pairs),
        "client_interleaved_pairs": len(pairs) - len(apart),
        "server_concurrent_tasks": len(phase),
        "server_max_busy_slots": busy,
        "server_distinct_slots": len(slots),
    }
    m: dict[str, float] = {"tie_tolerance_nats": tie_tolerance}
    if all(times) and times:
        m["wall_seconds_concurrent"] = max(t[-1] for t in times) - min(float(x.get("sent", 0)) for x in client["connections"])
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


def _span(ts: list[float]) -> str:
    return f"{ts[0]:.3f}-{ts[-1]:.3f}s" if ts else "no token event"


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    c, m, _ = evaluate(logs_dir)
    return c, m


def run_concurrency(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    n_predict = max(ctx.config.n_predict, N_PREDICT)
    try:
        quantized = reference_parity.quantized_types(ctx.config.model)
    except (OSError, ValueError) as err:
        return CR.FAIL, f"{ctx.config.model}: {err}"
    tie_tolerance = allowed_tie_tolerance(quantized, ctx.config.parity_max_abs_delta)
    # The run's fresh prompts (runner.run draws them; a replay cannot know them); the fixed ones
    # only where a check is called without a run (unit tests).
    prompts = tuple(ctx.challenge.server_prompts) if ctx.challenge is not None else PROMPTS
    if len(prompts) != N_PARALLEL:
        return CR.FAIL, f"the challenge has {len(prompts)} server prompts; the check sends {N_PARALLEL}"
    step.config("n_parallel", f"{N_PARALLEL}")
    step.config("quantized_types", ",".join(quantized))
    step.config("tie_tolerance_nats", f"{tie_tolerance!r}")
    step.config("prompts", json.dumps(list(prompts)))
    barrier = threading.Barrier(N_PARALLEL)
    origin = time.monotonic()

    def together(prompt: str) -> dict:
        barrier.wait(timeout=60)  # all requests leave together
        return srv.stream(prompt, n_predict, origin, n_probs=N_PROBS, timeout_s=min(ctx.config.timeout_s, 300))

    try:
        with LlamaServer(ctx, step, N_PARALLEL, N_PARALLEL * SLOT_CTX) as srv:
            with concurrent.futures.ThreadPoolExecutor(N_PARALLEL) as pool:
                streams = list(pool.map(together, prompts))
            sequential_out = [srv.complete(p, n_predict, n_probs=N_PROBS) for p in prompts]
    except (ServerError, OSError, ValueError, threading.BrokenBarrierError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    client = ctx.logs_dir / CLIENT_FILE
    client.write_text(json.dumps({"clock": "client time.monotonic() seconds since the requests were prepared",
                                  "n_predict": n_predict, "connections": streams}, indent=1, ensure_ascii=False))
    step.extra_logs.append(client)
    responses = ctx.logs_dir / RESPONSES_FILE
    responses.write_text(json.dumps({"prompts": list(prompts), "sequential": sequential_out}, indent=1, ensure_ascii=False))
    step.extra_logs.append(responses)
    for prompt, conn, b in zip(prompts, streams, sequential_out):
        a, ts, _ = parse_stream(conn)
        step.log(f"{prompt!r}: streamed on slot {a.get('id_slot')}, {len(ts)} token events {_span(ts)} "
                 f"{a.get('content')!r} | sequential {b.get('content')!r}")
    c, m, problems = evaluate(ctx.logs_dir)
    step.result.counts.update(c)
    step.result.metrics.update(m)
    if problems:
        return CR.FAIL, "; ".join(problems)
    ties = f", {c['near_tie_divergences']} diverging only at near-ties" if c["near_tie_divergences"] else ""
    return CR.PASS, (f"{c['concurrent_sequences']} concurrent streams, chunks interleaved on the client's clock for "
                     f"{c['client_interleaved_pairs']} of {c['client_connection_pairs']} pairs; server log: "
                     f"{c['server_max_busy_slots']} slots processing at once over {c['server_distinct_slots']} distinct "
                     f"slots; {c['exact_matches']} identical to the sequential run{ties} ({c['tokens']} tokens)")


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    return evaluate(logs_dir)[2]


CHECK = Check(name="concurrency", run=run_concurrency, recompute=recompute, problems=problems,
              figures=("concurrent_sequences", "tokens", "wall_seconds_concurrent"))
