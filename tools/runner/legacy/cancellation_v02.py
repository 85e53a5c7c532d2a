"""The cancellation check as runner 0.2.x made and judged it, kept to audit the runs it made (evidence/runs).

Runs of runner 0.3.0 and later are judged by tools/runner/checks/cancellation.py. What follows is that
runner's evaluation unchanged (its run functions are gone: it judges, it no longer runs).

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

import pathlib
import re

from tools.runner import exits, log_blocks
from tools.runner.llama_server import SERVER_SIGINT_EXIT, parse_server_log

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
