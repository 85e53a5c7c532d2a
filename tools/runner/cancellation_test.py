"""cancellation: the server log parser on a real log, the client-side figures, and the check against
a fake llama-server (honest, decoding to the end, and logging cancel while decoding on)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _read(name: str) -> str:
    return (TESTDATA / name).read_text()


def test_server_log_parser_on_real_cancellation_log():
    from tools.runner.llama_server import parse_server_log
    s = parse_server_log(_read("llama_server_cancellation_cpu.log"))
    stream, nxt = s.tasks[0], s.tasks[1]
    assert stream.cancelled is not None and stream.released >= stream.cancelled
    assert stream.prompt_tokens > 0 and 0 < stream.decoded < 3000
    assert nxt.decoded > 0 and s.shutdown_logged


def _cancellation_with_fake_server(tmp_path, mode):
    from tools.runner.checks import cancellation
    from tools.runner.steps import Step
    from tools.runner.testing import fake_lane
    ctx = fake_lane.server_context(tmp_path, mode)
    cfg, logs = ctx.config, ctx.logs_dir
    step = Step("cancellation", logs, ctx.tracker)
    step.config("cancel_bound_s", f"{cfg.cancel_bound_s!r}")
    step.config("stream_n_predict", f"{cancellation.STREAM_PREDICT}")
    step.config("sigint_exit_bound_s", f"{cfg.sigint_exit_bound_s!r}")
    step.config("cancel_recovery_factor", f"{cfg.cancel_recovery_factor!r}")
    step.config("cancel_recovery_floor_s", f"{cfg.cancel_recovery_floor_s!r}")
    try:
        client_problems = cancellation.abort_stream(ctx, step)
        # Stand-in for the llama-completion part (the fake lane has no llama-completion).
        step.log("# SIGINT: exit 130 after 0.010s, 96 bytes generated")
        step.log("# exit 0 after 0.10s")
    finally:
        ctx.tracker.stop_all()
    counts, metrics, problems = cancellation.evaluate(logs)
    assert cancellation.recompute(logs) == (counts, metrics)
    assert cancellation.problems(logs) == problems
    return client_problems, counts, metrics, problems


def test_cancellation_passes_when_the_server_cancels(tmp_path):
    client, counts, metrics, problems = _cancellation_with_fake_server(tmp_path, "cancel")
    assert client == [] and problems == [], problems
    assert counts["stream_cancel_logged"] == 1 and counts["stream_tokens_decoded"] < 3000
    assert counts["server_sigint_exit_code"] == 0 and counts["sigint_exit_code"] == 130
    assert metrics["stream_task_seconds"] <= metrics["cancel_bound_s"] == 5.0
    assert counts["stream_chunks_before_abort"] == 4
    bound = metrics["recovery_bound_s"]
    assert bound == max(4 * metrics["reference_request_seconds"], 0.5)
    assert metrics["fresh_request_seconds"] <= bound and metrics["drop_to_stream_end_seconds"] <= bound
    assert metrics["drop_to_slot_idle_seconds"] <= bound


def test_cancellation_fails_when_the_server_decodes_the_dropped_stream_to_the_end(tmp_path):
    """A server that never cancels, and says so: its own log shows no cancel and all 3000 tokens
    decoded for nobody."""
    client, counts, _, problems = _cancellation_with_fake_server(tmp_path, "decode_to_end")
    assert counts["stream_cancel_logged"] == 0 and counts["stream_tokens_decoded"] == 3000
    text = "; ".join(problems)
    assert "never logged 'cancel task" in text and "decoding did not stop" in text


def test_cancellation_fails_when_the_server_logs_cancel_and_keeps_decoding(tmp_path):
    """The red team's lie: `cancel task` and a slot release with few tokens logged, /slots idle and
    the connection closed at once, but the slot keeps decoding the 3000 tokens. The server's word
    passes; the fresh request, which waits for the slot, does not."""
    client, counts, metrics, problems = _cancellation_with_fake_server(tmp_path, "ignore_cancel")
    assert counts["stream_cancel_logged"] == 1 and counts["stream_tokens_decoded"] < 3000
    assert metrics["drop_to_stream_end_seconds"] <= metrics["recovery_bound_s"]
    assert len(problems) == 1 and "the fresh request after the drop took" in problems[0], problems
    assert "still busy with the dropped stream" in problems[0]


def _client_record(**over):
    record = {"stream": {"events": [], "dropped": 1.0, "after_drop": [1.001], "ended": 1.002, "end": "eof"},
              "slots": [{"t": 1.003, "status": 200, "body": json.dumps([{"id": 0, "is_processing": False}])}],
              "fresh": {"started": 1.004, "finished": 1.014, "tokens_predicted": 8},
              "reference": {"started": 1.02, "finished": 1.03, "tokens_predicted": 8}}
    record.update(over)
    return json.dumps(record)


def test_cancellation_client_side_failures(tmp_path):
    from tools.runner.checks import cancellation
    logs = tmp_path
    (logs / "cancellation.server.log").write_text(_read("llama_server_cancellation_cpu.log"))
    (logs / "cancellation.stream.txt").write_bytes(b"data: {}\n\ndata: {}\n\n")
    (logs / "cancellation.log").write_text(
        "# lanes-config cancel_bound_s=5.0\n# lanes-config stream_n_predict=3000\n# lanes-config sigint_exit_bound_s=10.0\n"
        "# lanes-config cancel_recovery_factor=4.0\n# lanes-config cancel_recovery_floor_s=0.5\n"
        "# llama-server SIGINT: exit 0 after 0.010s\n# SIGINT: exit 130 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    client = logs / cancellation.CLIENT_FILE

    def problems(**over):
        client.write_text(_client_record(**over))
        return "; ".join(cancellation.evaluate(logs)[2])

    assert problems() == ""
    busy = {"t": 1.003, "status": 200, "body": json.dumps([{"id": 0, "is_processing": True}])}
    assert "showed the slot processing in all 1 queries" in problems(slots=[busy])
    late = {"t": 2.0, "status": 200, "body": json.dumps([{"id": 0, "is_processing": False}])}
    assert "first showed the slot idle 1.000s after the drop" in problems(slots=[busy, late])
    assert "GET /slots gave no slot list" in problems(slots=[{"t": 1.0, "status": 501, "body": "no"}])
    slow = {"started": 1.004, "finished": 4.0, "tokens_predicted": 8}
    assert "the fresh request after the drop took 2.996s (> 0.500s" in problems(fresh=slow)
    streaming = {"events": [], "dropped": 1.0, "after_drop": [1.1] * 50, "ended": None, "end": "still streaming 5s"}
    assert "never saw the dropped stream end" in problems(stream=streaming)
    assert "reference request failed" in problems(reference={"started": 0, "finished": 1, "error": "boom"})
    client.unlink()
    assert "no client record" in "; ".join(cancellation.evaluate(logs)[2])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
