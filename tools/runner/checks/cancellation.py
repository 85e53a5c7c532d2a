"""Cancellation, shown by the client and by the server's own log; neither alone passes.

(a) A client drops a streaming request (n_predict STREAM_PREDICT, ignore_eos; --context-shift so
    that a server ignoring the drop really decodes them all, past a small model's context) after
    CHUNKS_BEFORE_ABORT token events, by shutting its sending side.
    Client side (cancellation.client.json, on the client's monotonic clock):
    - it sees the stream end (the server ends the body or closes) within the recovery bound;
    - GET /slots (--slots) shows the slot idle within the recovery bound after the drop;
    - a fresh request (FRESH_PREDICT tokens) finishes within the recovery bound,
      max(cancel_recovery_factor x the same request's duration measured after it, as the
      reference, cancel_recovery_floor_s): on the 1-slot server, one still decoding the dropped
      stream for nobody makes it wait.
    Server side (cancellation.server.log, digested): for that task `cancel task, id_task = N`
    (server-queue.cpp, logged when the HTTP layer sees the client gone), its slot released with
    far fewer tokens decoded than requested, launch-to-release within cancel_bound_s on the
    server's clock, and the next request served and released within the same bound.
(b) llama-server stopped with SIGINT must exit 0 (tools/server/server.cpp: the handler ends the task
    loop and main returns 0) and log "cleaning up before exit".
(c) SIGINT to llama-completion mid-generation: it must exit 130 (tools/completion/completion.cpp:
    `_exit(130)` in the SIGINT handler when not interactive) within sigint_exit_bound_s, and a new
    run must succeed.
Every figure and the verdict are recomputed by recompute() / problems() from cancellation.log and
its configuration (the exit statuses the runner observed), cancellation.client.json,
cancellation.server.log, cancellation.stream.txt (the raw SSE bytes read before the drop) and
cancellation.sigint.log.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import signal
import subprocess
import time

from proto import runner_report_pb2 as rpb
from tools.runner import exits, log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.context import RunContext
from tools.runner.legacy import cancellation_v02
from tools.runner.llama_server import SERVER_SIGINT_EXIT, LlamaServer, ServerError, parse_server_log
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "cancellation"
SERVER_LOG = f"{STEP}.server.log"
STREAM_FILE = f"{STEP}.stream.txt"
CLIENT_FILE = f"{STEP}.client.json"
SIGINT_LOG = f"{STEP}.sigint.log"
LONG_CTX = 4096
STREAM_PREDICT = 3000
LONG_PREDICT = 3000
CHUNKS_BEFORE_ABORT = 4
FRESH_PROMPT, FRESH_PREDICT = "Hello", 8
SLOTS_POLL_S = 0.02
COMPLETION_SIGINT_EXIT = 130

_SERVER_SIGINT = re.compile(r"^# llama-server SIGINT: exit (?P<code>-?\d+) after (?P<s>[0-9.]+)s", re.MULTILINE)
_SERVER_KILLED = re.compile(r"^# llama-server SIGINT: still running", re.MULTILINE)
_COMPLETION_SIGINT = re.compile(r"^# SIGINT: exit (?P<code>-?\d+) after (?P<s>[0-9.]+)s", re.MULTILINE)


# The runner that first kept the client's evidence; older runs are judged as they were made.
CLIENT_EVIDENCE_SINCE = (0, 3, 0)


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str]]:
    logs_dir = pathlib.Path(logs_dir)
    if log_blocks.run_predates(CLIENT_EVIDENCE_SINCE):
        return cancellation_v02.evaluate(logs_dir)
    log = (logs_dir / f"{STEP}.log").read_text(errors="replace")
    conf = {k: float(v) for k, v in log_blocks.step_config(logs_dir, STEP).items()}
    bound, n_predict = conf["cancel_bound_s"], int(conf["stream_n_predict"])
    c: dict[str, int] = {"stream_n_predict": n_predict}
    m: dict[str, float] = {"cancel_bound_s": bound, "sigint_exit_bound_s": conf["sigint_exit_bound_s"]}
    problems: list[str] = []

    stream = logs_dir / STREAM_FILE
    chunks = sum(1 for ln in stream.read_bytes().splitlines() if ln.startswith(b"data:")) if stream.is_file() else 0
    c["stream_chunks_before_abort"] = chunks
    if chunks == 0:
        problems.append("the stream produced no chunk before the abort")

    server_log = logs_dir / SERVER_LOG
    server = parse_server_log(server_log.read_text(errors="replace")) if server_log.is_file() else None
    if server is None or not server.tasks:
        problems.append("the server log shows no task for the streamed request")
    else:
        st = server.tasks[0]
        c["stream_cancel_logged"] = int(st.cancelled is not None)
        if st.decoded is not None:
            c["stream_tokens_decoded"] = st.decoded
        if st.cancelled is None:
            problems.append(f"the server never logged 'cancel task, id_task = {st.task}' after the client dropped the stream")
        if st.released is None:
            problems.append(f"the server never released the slot of the dropped task {st.task}")
        else:
            m["stream_task_seconds"] = st.released - st.launched
            if st.cancelled is not None:
                m["cancel_to_release_seconds"] = st.released - st.cancelled
            if not m["stream_task_seconds"] <= bound:
                problems.append(f"the dropped task held its slot {m['stream_task_seconds']:.3f}s (> {bound:g}s bound)")
        if st.decoded is None:
            problems.append("the server log does not show how many tokens the dropped task decoded")
        elif st.decoded >= n_predict:
            problems.append(f"the server decoded {st.decoded} tokens for the dropped stream, all {n_predict} requested: "
                            "decoding did not stop")
        nxt = server.tasks[1] if len(server.tasks) > 1 else None
        if nxt is None or nxt.released is None or st.released is None:
            problems.append("the server log shows no completed request after the dropped stream")
        else:
            m["recovery_seconds"] = nxt.released - st.released
            c["recovery_tokens_decoded"] = nxt.decoded or 0
            if not m["recovery_seconds"] <= bound:
                problems.append(f"the next request finished {m['recovery_seconds']:.3f}s after the release (> {bound:g}s bound)")
            if not nxt.decoded or nxt.decoded <= 0:
                problems.append("the request after the abort decoded nothing")
        c["server_shutdown_logged"] = int(server.shutdown_logged)

    client_figures(logs_dir, conf, c, m, problems)

    sm = _SERVER_SIGINT.search(log)
    if sm:
        c["server_sigint_exit_code"] = int(sm["code"])
        m["server_sigint_exit_seconds"] = float(sm["s"])
        if int(sm["code"]) != SERVER_SIGINT_EXIT:
            problems.append(f"llama-server exited {exits.describe(sm['code'])} after SIGINT (expected {SERVER_SIGINT_EXIT})")
        if server is not None and not server.shutdown_logged:
            problems.append("llama-server did not log 'cleaning up before exit' after SIGINT")
    elif _SERVER_KILLED.search(log):
        problems.append("llama-server ignored SIGINT and had to be killed")
    else:
        problems.append("no record of llama-server's exit after SIGINT")

    cm = _COMPLETION_SIGINT.search(log)
    if cm is None:
        problems.append("no record of llama-completion's exit after SIGINT")
    else:
        c["sigint_exit_code"] = int(cm["code"])
        m["sigint_exit_seconds"] = float(cm["s"])
        if int(cm["code"]) != COMPLETION_SIGINT_EXIT:
            problems.append(f"llama-completion exited {exits.describe(cm['code'])} after SIGINT (expected {COMPLETION_SIGINT_EXIT})")
        if not m["sigint_exit_seconds"] <= m["sigint_exit_bound_s"]:
            problems.append(f"llama-completion took {m['sigint_exit_seconds']:.3f}s to exit after SIGINT")
        after = [int(x["code"]) for x in log_blocks.EXIT_LINE.finditer(log[cm.end():])]
        if not after or after[-1] != 0:
            problems.append(f"the run after SIGINT exited {after[-1] if after else 'never'}")
    return c, m, problems


def _duration(r: dict) -> float | None:
    if not isinstance(r, dict) or r.get("error") or not r.get("tokens_predicted"):
        return None
    return float(r["finished"]) - float(r["started"])


def _slots_idle(poll: dict) -> bool | None:
    """True / False from one GET /slots record; None when it is not a slot list."""
    if poll.get("status") != 200:
        return None
    try:
        slots = json.loads(poll["body"])
    except ValueError:
        return None
    if not isinstance(slots, list) or not slots or not all(isinstance(x, dict) and "is_processing" in x for x in slots):
        return None
    return not any(x["is_processing"] for x in slots)


def client_figures(logs_dir: pathlib.Path, conf: dict[str, float], c: dict[str, int], m: dict[str, float],
                   problems: list[str]) -> None:
    """The client's side of (a), from cancellation.client.json: the stream's end, /slots and the
    fresh request against the recovery bound."""
    path = logs_dir / CLIENT_FILE
    if not path.is_file():
        problems.append(f"no client record ({CLIENT_FILE})")
        return
    if "cancel_recovery_factor" not in conf or "cancel_recovery_floor_s" not in conf:
        problems.append("the step's configuration lacks the recovery bound (cancel_recovery_factor, cancel_recovery_floor_s)")
        return
    client = json.loads(path.read_text())
    stream, fresh, reference = client.get("stream") or {}, client.get("fresh") or {}, client.get("reference") or {}
    factor, floor = conf["cancel_recovery_factor"], conf["cancel_recovery_floor_s"]
    m["cancel_recovery_factor"], m["cancel_recovery_floor_s"] = factor, floor
    ref_s, fresh_s = _duration(reference), _duration(fresh)
    if ref_s is None:
        problems.append(f"the reference request failed: {reference.get('error') or reference}")
        return
    bound = max(factor * ref_s, floor)
    m["reference_request_seconds"], m["recovery_bound_s"] = ref_s, bound
    dropped = stream.get("dropped")
    if dropped is None:
        problems.append(f"the client never dropped the stream ({stream.get('end')})")
        return
    c["client_chunks_after_drop"] = len(stream.get("after_drop") or [])
    if stream.get("ended") is None:
        problems.append(f"the client never saw the dropped stream end: {stream.get('end')}")
    else:
        m["drop_to_stream_end_seconds"] = float(stream["ended"]) - float(dropped)
        if not m["drop_to_stream_end_seconds"] <= bound:
            problems.append(f"the dropped stream ended {m['drop_to_stream_end_seconds']:.3f}s after the drop, "
                            f"{c['client_chunks_after_drop']} chunks later (> {bound:.3f}s recovery bound)")
    polls = client.get("slots") or []
    states = [(float(p["t"]), _slots_idle(p)) for p in polls]
    idle_at = next((t for t, idle in states if idle), None)
    c["slots_polls"] = len(polls)
    if any(idle is None for _, idle in states) or not states:
        bad = next((p for p, (_, idle) in zip(polls, states) if idle is None), None)
        problems.append(f"GET /slots gave no slot list: {str(bad)[:200] if bad else 'never queried'}")
    elif idle_at is None:
        problems.append(f"GET /slots showed the slot processing in all {len(polls)} queries after the drop")
    else:
        m["drop_to_slot_idle_seconds"] = idle_at - float(dropped)
        if not m["drop_to_slot_idle_seconds"] <= bound:
            problems.append(f"GET /slots first showed the slot idle {m['drop_to_slot_idle_seconds']:.3f}s after the drop "
                            f"(> {bound:.3f}s recovery bound)")
    if fresh_s is None:
        problems.append(f"the fresh request after the drop failed: {fresh.get('error') or fresh}")
    else:
        m["fresh_request_seconds"] = fresh_s
        if not fresh_s <= bound:
            problems.append(f"the fresh request after the drop took {fresh_s:.3f}s (> {bound:.3f}s = max({factor:g} x "
                            f"{ref_s:.3f}s reference, {floor:g}s)): the slot was still busy with the dropped stream")


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    c, m, _ = evaluate(logs_dir)
    return c, m


def abort_stream(ctx: RunContext, step: Step) -> list[str]:
    """Drops a stream, polls /slots, sends a fresh request and then the reference; stops the server
    with SIGINT. The verdict is evaluate()'s, from the files; this returns only what went wrong on
    the way."""
    problems = []
    cfg = ctx.config
    record: dict = {"clock": "client time.monotonic() seconds since the server was up"}
    with LlamaServer(ctx, step, n_parallel=1, ctx_size=LONG_CTX, extra_args=("--context-shift",)) as srv:
        origin = time.monotonic()
        with open(ctx.logs_dir / STREAM_FILE, "wb") as transcript:
            step.extra_logs.append(ctx.logs_dir / STREAM_FILE)
            record["stream"] = drop = srv.stream_drop("Tell me a long story.", STREAM_PREDICT, CHUNKS_BEFORE_ABORT, origin,
                                                      after_drop_s=cfg.cancel_bound_s, transcript=transcript)
        step.log(f"stream: {len(drop['events'])} events, dropped at {drop['dropped']}s; {len(drop['after_drop'])} more, "
                 f"then {drop['end']} at {drop['ended']}s")
        if drop["dropped"] is None:
            problems.append(f"the stream could not be dropped: {drop['end']}")
        # /slots until the slot shows idle (recorded; evaluate() holds it to the bound).
        record["slots"] = [srv.slots(origin)]
        deadline = time.monotonic() + cfg.cancel_bound_s
        while _slots_idle(record["slots"][-1]) is False and time.monotonic() < deadline:
            time.sleep(SLOTS_POLL_S)
            record["slots"].append(srv.slots(origin))
        timeout = min(cfg.timeout_s, 120)
        record["fresh"] = srv.timed_complete(FRESH_PROMPT, FRESH_PREDICT, origin, timeout_s=timeout)
        record["reference"] = srv.timed_complete(FRESH_PROMPT, FRESH_PREDICT, origin, timeout_s=timeout)
        for name in ("fresh", "reference"):
            r = record[name]
            step.log(f"{name} request: {r.get('tokens_predicted')} tokens in {r['finished'] - r['started']:.3f}s "
                     f"{r.get('content')!r} {r.get('error') or ''}")
        if not srv.alive():
            problems.append("llama-server died after the aborted stream")
        srv.sigint_stop(cfg.sigint_exit_bound_s)
    client = ctx.logs_dir / CLIENT_FILE
    client.write_text(json.dumps(record, indent=1, ensure_ascii=False))
    step.extra_logs.append(client)
    return problems


def sigint_generation(ctx: RunContext, step: Step) -> list[str]:
    cfg = ctx.config
    base = [str(ctx.bin("llama-completion")), "-m", str(cfg.model), "--temp", "0", "-s", str(cfg.seed),
            "-no-cnv", "--no-display-prompt", "-t", str(cfg.threads), *ctx.ngl]
    argv = base + ["-p", "Tell me a long story.", "-c", str(LONG_CTX), "-n", str(LONG_PREDICT), "--ignore-eos"]
    out_path = ctx.scratch_dir / "sigint.out"
    step.log(f"$ {' '.join(argv)}  (SIGINT once output appears)")
    with open(out_path, "wb") as out, open(ctx.logs_dir / SIGINT_LOG, "wb") as err:
        step.extra_logs.append(ctx.logs_dir / SIGINT_LOG)
        proc = ctx.tracker.popen(argv, stdout=out, stderr=err)
        deadline = time.monotonic() + min(cfg.timeout_s, 300)
        while time.monotonic() < deadline and proc.poll() is None and out_path.stat().st_size < 16:
            time.sleep(0.05)
        if proc.poll() is not None:
            return [f"llama-completion ended (exit {exits.describe(proc.returncode)}) before SIGINT could be sent"]
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
    step.run(base + ["-p", "Hello", "-n", "8"], cfg.timeout_s)
    return []


def run_cancellation(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg = ctx.config
    step.config("cancel_bound_s", f"{cfg.cancel_bound_s!r}")
    step.config("stream_n_predict", f"{STREAM_PREDICT}")
    step.config("sigint_exit_bound_s", f"{cfg.sigint_exit_bound_s!r}")
    step.config("cancel_recovery_factor", f"{cfg.cancel_recovery_factor!r}")
    step.config("cancel_recovery_floor_s", f"{cfg.cancel_recovery_floor_s!r}")
    try:
        problems = abort_stream(ctx, step)
    except (ServerError, OSError, ValueError) as err:
        problems = [f"stream abort: {type(err).__name__}: {err}"]
    problems += sigint_generation(ctx, step)
    c, m, log_problems = evaluate(ctx.logs_dir)
    step.result.counts.update(c)
    step.result.metrics.update(m)
    problems += log_problems
    if problems:
        return CR.FAIL, "; ".join(problems)
    return CR.PASS, (f"client: dropped stream ended in {m['drop_to_stream_end_seconds']:.3f}s, /slots idle in "
                     f"{m['drop_to_slot_idle_seconds']:.3f}s, fresh request {m['fresh_request_seconds']:.3f}s "
                     f"(bound {m['recovery_bound_s']:.3f}s, reference {m['reference_request_seconds']:.3f}s); "
                     f"server log: dropped stream cancelled after {c['stream_tokens_decoded']} of {c['stream_n_predict']} "
                     f"tokens, slot released {m['stream_task_seconds']:.3f}s after launch (bound {m['cancel_bound_s']:g}s), "
                     f"next request done {m['recovery_seconds']:.3f}s later; llama-server SIGINT exit 0; "
                     f"llama-completion SIGINT exit 130 in {m['sigint_exit_seconds']:.2f}s; next run succeeded")


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    return evaluate(logs_dir)[2]


@dataclasses.dataclass(frozen=True)
class Options:
    sigint_exit_bound_s: float = option(10.0)
    # A dropped stream's slot must be released (server log) within this bound, and the next
    # request served within it; written into the step's configuration.
    cancel_bound_s: float = option(5.0)
    # The client's recovery bound: the dropped stream's end, the slot idle on /slots and a fresh
    # request's duration, each within max(factor x the reference request's duration, floor).
    cancel_recovery_factor: float = option(4.0)
    cancel_recovery_floor_s: float = option(0.5)


CHECK = Check(name="cancellation", run=run_cancellation, recompute=recompute, problems=problems,
              figures=("recovery_seconds", "sigint_exit_seconds"), options=Options)
