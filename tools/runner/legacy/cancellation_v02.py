"""The cancellation check as runner 0.2.x made and judged it, kept to audit the runs it made (evidence/runs).

Runs of runner 0.3.0 and later are judged by tools/runner/checks/cancellation.py. What follows is that
runner's module unchanged but for its registry entry.

Cancellation, proven by the server's own log, not by the client's impression.

(a) A client drops a streaming request (n_predict STREAM_PREDICT, ignore_eos) after a few chunks.
    The server log (cancellation.server.log, digested) must show, for that task: `cancel task,
    id_task = N` (server-queue.cpp, logged when the HTTP layer sees the client gone), its slot
    released with far fewer tokens decoded than requested (a server that ignores the drop decodes
    all STREAM_PREDICT), and launch-to-release within cancel_bound_s on the server's clock (an
    upper bound on the time from drop to release). The next request must be served and released
    within the same bound after that release (one slot: an uncancelled task would still hold it).
(b) llama-server stopped with SIGINT must exit 0 (tools/server/server.cpp: the handler ends the task
    loop and main returns 0) and log "cleaning up before exit".
(c) SIGINT to llama-completion mid-generation: it must exit 130 (tools/completion/completion.cpp:
    `_exit(130)` in the SIGINT handler when not interactive) within sigint_exit_bound_s, and a new
    run must succeed.
Every figure is recomputed by recompute() from cancellation.log (its configuration file and the
exit statuses the runner observed), cancellation.server.log, cancellation.stream.txt (the raw SSE
bytes the client read) and cancellation.sigint.log.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import signal
import subprocess
import time

from proto import runner_report_pb2 as rpb
from tools.runner import exits, log_blocks
from tools.runner.checks.base import option
from tools.runner.context import RunContext
from tools.runner.llama_server import SERVER_SIGINT_EXIT, LlamaServer, ServerError, parse_server_log
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "cancellation"
SERVER_LOG = f"{STEP}.server.log"
STREAM_FILE = f"{STEP}.stream.txt"
SIGINT_LOG = f"{STEP}.sigint.log"
LONG_CTX = 4096
STREAM_PREDICT = 3000
LONG_PREDICT = 3000
CHUNKS_BEFORE_ABORT = 4
COMPLETION_SIGINT_EXIT = 130

_SERVER_SIGINT = re.compile(r"^# llama-server SIGINT: exit (?P<code>-?\d+) after (?P<s>[0-9.]+)s", re.MULTILINE)
_SERVER_KILLED = re.compile(r"^# llama-server SIGINT: still running", re.MULTILINE)
_COMPLETION_SIGINT = re.compile(r"^# SIGINT: exit (?P<code>-?\d+) after (?P<s>[0-9.]+)s", re.MULTILINE)


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str]]:
    logs_dir = pathlib.Path(logs_dir)
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


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    c, m, _ = evaluate(logs_dir)
    return c, m


def abort_stream(ctx: RunContext, step: Step) -> list[str]:
    """Drops a stream, then sends the next request; stops the server with SIGINT. The verdict is
    evaluate()'s, from the logs; this returns only what the client saw go wrong."""
    problems = []
    with LlamaServer(ctx, step, n_parallel=1, ctx_size=LONG_CTX) as srv:
        with open(ctx.logs_dir / STREAM_FILE, "wb") as transcript:
            step.extra_logs.append(ctx.logs_dir / STREAM_FILE)
            chunks, finished = srv.stream_and_abort("Tell me a long story.", STREAM_PREDICT,
                                                    chunks_before_abort=CHUNKS_BEFORE_ABORT, transcript=transcript)
        step.log(f"stream: read {chunks} chunks, finished before abort: {finished}; connection dropped")
        if finished:
            problems.append("the stream finished before it could be aborted")
        try:
            out = srv.complete("Hello", 8, timeout_s=min(ctx.config.timeout_s, 120))
            step.log(f"next request: {out.get('tokens_predicted')} tokens {out.get('content')!r}")
        except OSError as err:
            problems.append(f"request after the abort failed: {err}")
        if not srv.alive():
            problems.append("llama-server died after the aborted stream")
        srv.sigint_stop(ctx.config.sigint_exit_bound_s)
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
    return CR.PASS, (f"server log: dropped stream cancelled after {c['stream_tokens_decoded']} of {c['stream_n_predict']} "
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
