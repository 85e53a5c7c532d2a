"""The concurrency check as runner 0.2.x made and judged it, kept to audit the runs it made (evidence/runs).

Runs of runner 0.3.0 and later are judged by tools/runner/checks/concurrency.py. What follows is that
runner's evaluation unchanged; the helpers it shares with the current module are imported from it.

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

import json
import pathlib

from tools.runner import log_blocks
from tools.runner.llama_server import max_busy, parse_server_log

STEP = "concurrency"
RESPONSES_FILE = f"{STEP}.responses.json"
SERVER_LOG = f"{STEP}.server.log"


def evaluate(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float], list[str]]:
    """Counts, metrics and problems, from the kept responses, the server log and the config lines."""
    # Shared with the current module, unchanged (imported here: that module imports this one).
    from tools.runner.checks.concurrency import judge_divergence

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
