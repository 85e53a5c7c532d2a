"""cancellation: the server log parser on a real log, and the check against a fake llama-server."""

from __future__ import annotations

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
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    from tools.runner.steps import Step
    from tools.runner.testing import fake_lane
    lane_dir = fake_lane.make_lane(tmp_path / "lane")
    fake_lane.install_fake_server(lane_dir, mode)
    cfg = RunnerConfig(lane="cpu", lane_dir=lane_dir, evidence=None, spec=fake_lane.SPEC, model=tmp_path / "m.gguf",
                       out_dir=tmp_path, report=tmp_path / "r.pb", timeout_s=30)
    logs = tmp_path / "logs"
    logs.mkdir()
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), ())
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp_path)
    step = Step("cancellation", logs, ctx.tracker)
    step.log(f"# lanes-config cancel_bound_s={cfg.cancel_bound_s!r}")
    step.log(f"# lanes-config stream_n_predict={cancellation.STREAM_PREDICT}")
    step.log(f"# lanes-config sigint_exit_bound_s={cfg.sigint_exit_bound_s!r}")
    try:
        client_problems = cancellation.abort_stream(ctx, step)
        # Stand-in for the llama-completion part (the fake lane has no llama-completion).
        step.log("# SIGINT: exit 130 after 0.010s, 96 bytes generated")
        step.log("# exit 0 after 0.10s")
    finally:
        ctx.tracker.stop_all()
    counts, metrics, problems = cancellation.evaluate(logs)
    assert cancellation.recompute(logs) == (counts, metrics)
    return client_problems, counts, metrics, problems


def test_cancellation_passes_when_the_server_cancels(tmp_path):
    client, counts, metrics, problems = _cancellation_with_fake_server(tmp_path, "cancel")
    assert client == [] and problems == [], problems
    assert counts["stream_cancel_logged"] == 1 and counts["stream_tokens_decoded"] < 3000
    assert counts["server_sigint_exit_code"] == 0 and counts["sigint_exit_code"] == 130
    assert metrics["stream_task_seconds"] <= metrics["cancel_bound_s"] == 5.0
    assert counts["stream_chunks_before_abort"] == 4


def test_cancellation_fails_when_the_server_ignores_the_dropped_stream(tmp_path):
    """The former loophole: a server that never cancels still finished inside the client's wait
    and passed. Its own log shows no cancel and all 3000 tokens decoded for nobody."""
    client, counts, _, problems = _cancellation_with_fake_server(tmp_path, "ignore_cancel")
    assert counts["stream_cancel_logged"] == 0 and counts["stream_tokens_decoded"] == 3000
    text = "; ".join(problems)
    assert "never logged 'cancel task" in text and "decoding did not stop" in text


def test_cancellation_wrong_sigint_exit_fails(tmp_path):
    from tools.runner.checks import cancellation
    logs = tmp_path
    (logs / "cancellation.server.log").write_text(_read("llama_server_cancellation_cpu.log"))
    (logs / "cancellation.stream.txt").write_bytes(b"data: {}\n\ndata: {}\n\n")
    base = ("# lanes-config cancel_bound_s=5.0\n# lanes-config stream_n_predict=3000\n"
            "# lanes-config sigint_exit_bound_s=10.0\n# llama-server SIGINT: exit 0 after 0.010s\n")
    (logs / "cancellation.log").write_text(base + "# SIGINT: exit 130 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    assert cancellation.evaluate(logs)[2] == []
    (logs / "cancellation.log").write_text(base + "# SIGINT: exit 0 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    assert any("expected 130" in p for p in cancellation.evaluate(logs)[2])
    (logs / "cancellation.log").write_text(base.replace("SIGINT: exit 0", "SIGINT: exit 1") +
                                           "# SIGINT: exit 130 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    assert any("llama-server exited 1" in p for p in cancellation.evaluate(logs)[2])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
