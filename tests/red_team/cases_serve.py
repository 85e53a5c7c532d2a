"""Class 7: concurrency and cancellation taking the server's word. Each lie is a fake llama-server
whose own log tells the certifying story; the client's record must refuse it."""

from __future__ import annotations

import pathlib

from tests.red_team.case import RedTeamCase, Refusal


def _ctx(tmp: pathlib.Path, mode: str):
    from tools.runner.testing import fake_lane
    return fake_lane.server_context(tmp, mode)


def serial_server_logging_overlap(tmp: pathlib.Path) -> Refusal:
    """Decodes one request at a time but logs four overlapping slot launches on distinct slots."""
    from proto import runner_report_pb2 as rpb
    from tools.runner.checks import concurrency
    from tools.runner.steps import Step

    ctx = _ctx(tmp, "serial")
    step = Step(concurrency.STEP, ctx.logs_dir, ctx.tracker)
    try:
        status, message = concurrency.run_concurrency(ctx, step)
    finally:
        ctx.tracker.stop_all()
    assert status != rpb.CheckResult.PASS, f"concurrency passed: {message}"
    assert step.result.counts["server_max_busy_slots"] >= 2, "the lie did not even fool the server-log checks"
    assert "no interleaving of streamed chunks" in message, message
    audit = concurrency.problems(ctx.logs_dir)
    assert audit and "no interleaving" in audit[0], f"the raw files pass: {audit}"
    return Refusal("concurrency", message)


def logs_cancel_keeps_decoding(tmp: pathlib.Path) -> Refusal:
    """Logs `cancel task` and a slot release with few tokens, shows the slot idle on /slots, closes the
    stream, and keeps decoding the 3000 tokens for nobody."""
    from tools.runner.checks import cancellation
    from tools.runner.steps import Step

    ctx = _ctx(tmp, "ignore_cancel")
    cfg = ctx.config
    step = Step(cancellation.STEP, ctx.logs_dir, ctx.tracker)
    for key, value in (("cancel_bound_s", cfg.cancel_bound_s), ("stream_n_predict", cancellation.STREAM_PREDICT),
                       ("sigint_exit_bound_s", cfg.sigint_exit_bound_s),
                       ("cancel_recovery_factor", cfg.cancel_recovery_factor),
                       ("cancel_recovery_floor_s", cfg.cancel_recovery_floor_s)):
        step.config(key, repr(value))
    try:
        cancellation.abort_stream(ctx, step)
        # The llama-completion part is not what this lie is about: record it as passing.
        step.log("# SIGINT: exit 130 after 0.010s, 96 bytes generated")
        step.log("# exit 0 after 0.10s")
    finally:
        ctx.tracker.stop_all()
    counts, _, problems = cancellation.evaluate(ctx.logs_dir)
    assert counts.get("stream_cancel_logged") == 1, "the lie did not even log its cancel"
    assert problems, "cancellation passed"
    message = "; ".join(problems)
    assert "the fresh request after the drop took" in message, message
    return Refusal("cancellation", message)


CASES = [
    RedTeamCase(7, "serial server logging overlap", serial_server_logging_overlap),
    RedTeamCase(7, "server that logs cancel and keeps decoding", logs_cancel_keeps_decoding),
]
