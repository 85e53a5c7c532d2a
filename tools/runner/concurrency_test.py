"""concurrency: divergence at near-ties, the client's interleaved streams, the server log's overlapping
slots (testdata/), and the check against a fake llama-server (honest, and serial but logging overlap)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _read(name: str) -> str:
    return (TESTDATA / name).read_text()


def _probs(*pairs):
    return [{"id": t1, "top_logprobs": [{"id": t1, "logprob": l1}, {"id": t2, "logprob": l2}]} for t1, l1, t2, l2 in pairs]


def test_concurrency_divergence_only_at_near_ties():
    from tools.runner.checks.concurrency import judge_divergence
    seq = {"tokens": [5, 6, 7], "completion_probabilities": _probs((5, -0.1, 9, -3.0), (6, -0.50, 8, -0.52), (7, -0.1, 1, -4))}
    assert judge_divergence({"tokens": [5, 6, 7]}, seq, 0.1) == (None, None)
    problem, margin = judge_divergence({"tokens": [5, 8, 3]}, seq, 0.1)
    assert problem is None and abs(margin - 0.02) < 1e-9
    problem, _ = judge_divergence({"tokens": [9, 6, 7]}, seq, 0.1)
    assert "not a near-tie" in problem
    problem, _ = judge_divergence({"tokens": [5, 4, 7]}, seq, 0.1)
    assert "not among the sequential run's top 2" in problem
    problem, _ = judge_divergence({"tokens": [5, 8]}, {"tokens": [5, 6]}, 0.1)
    assert "no probabilities" in problem
    # Byte tokens (here 208) get no entry: entries are matched by id, not by index.
    skipped = {"tokens": [208, 6], "completion_probabilities": _probs((6, -0.50, 8, -0.52))}
    assert judge_divergence({"tokens": [208, 8]}, skipped, 0.1)[0] is None
    assert "no probabilities" in judge_divergence({"tokens": [209, 6]}, skipped, 0.1)[0]
    three_way = {"tokens": [6], "completion_probabilities": [{"id": 6, "top_logprobs": [
        {"id": 6, "logprob": -1.00}, {"id": 8, "logprob": -1.01}, {"id": 4, "logprob": -1.03}]}]}
    assert judge_divergence({"tokens": [4]}, three_way, 0.1)[0] is None


def _stream(prompt, times, tokens=None, content=" x"):
    """A client record of one streamed connection: one token event per arrival time, then the final one."""
    tokens = tokens if tokens is not None else list(range(len(times)))
    events = [[t, "data: " + json.dumps({"content": content, "tokens": [tok], "stop": False, "id_slot": 0,
                                          "tokens_predicted": k + 1})] for k, (t, tok) in enumerate(zip(times, tokens))]
    events.append([times[-1] + 0.0001, "data: " + json.dumps({"content": "", "tokens": [], "stop": True,
                                                              "tokens_predicted": len(times)})])
    return {"prompt": prompt, "sent": 0.0, "status": 200, "events": events, "end": "eof"}


def _concurrency_logs(tmp_path, server_log: str, spans=None, config: str = "quantized_types=\n# lanes-config tie_tolerance_nats=0.1"):
    """spans: per connection (first, last) arrival times of its 3 token events; default all overlapping."""
    from tools.runner.checks import concurrency as cc
    (tmp_path / "concurrency.log").write_text(f"# lanes-config n_parallel=4\n# lanes-config {config}\n")
    same = {"tokens": [0, 1, 2], "tokens_predicted": 3, "content": " x x x",
            "completion_probabilities": [{"id": i, "top_logprobs": [{"id": i, "logprob": -0.1}]} for i in range(3)]}
    (tmp_path / cc.RESPONSES_FILE).write_text(json.dumps({"prompts": list(cc.PROMPTS), "sequential": [same] * 4}))
    spans = spans or [(0.010 + k * 0.001, 0.050 + k * 0.001) for k in range(4)]
    conns = [_stream(p, [a, (a + b) / 2, b]) for p, (a, b) in zip(cc.PROMPTS, spans)]
    (tmp_path / cc.CLIENT_FILE).write_text(json.dumps({"connections": conns}))
    (tmp_path / cc.SERVER_LOG).write_text(_read(server_log))
    return cc.evaluate(tmp_path)


def test_the_tie_tolerance_follows_the_models_tensor_types(tmp_path):
    from tools.runner.checks import concurrency as cc
    assert cc.allowed_tie_tolerance((), 0.05) == 0.1 and cc.allowed_tie_tolerance(("Q4_K", "Q6_K"), 0.05) == 0.5
    quantized = "quantized_types=Q4_K,Q6_K\n# lanes-config tie_tolerance_nats=0.5"
    (tmp_path / "q").mkdir()
    assert _concurrency_logs(tmp_path / "q", "llama_server_concurrency_cpu.log", config=quantized)[2] == []
    for name, config, why in (
            ("f32", "quantized_types=\n# lanes-config tie_tolerance_nats=0.5", "looser than the 0.1"),
            ("unrecorded", "tie_tolerance_nats=0.1", "recorded no quantized_types")):
        (tmp_path / name).mkdir()
        problems = _concurrency_logs(tmp_path / name, "llama_server_concurrency_cpu.log", config=config)[2]
        assert any(why in p for p in problems), problems


def test_concurrency_server_log_shows_overlapping_slots(tmp_path):
    c, m, problems = _concurrency_logs(tmp_path, "llama_server_concurrency_cpu.log")
    assert problems == []
    assert c["server_max_busy_slots"] == 4 and c["server_distinct_slots"] == 4 and c["exact_matches"] == 4
    assert c["client_interleaved_pairs"] == c["client_connection_pairs"] == 6
    assert 0 < m["server_concurrent_wall_s"] < m["server_sequential_wall_s"]


def test_concurrency_one_at_a_time_server_fails(tmp_path):
    """The former loophole: 4 requests in flight at the client passed even if the server decoded
    them one after another. Its own log shows each task released before the next launched."""
    c, _, problems = _concurrency_logs(tmp_path, "llama_server_one_at_a_time.log")
    assert c["server_max_busy_slots"] == 1 and c["server_distinct_slots"] == 4
    assert any("one at a time" in p for p in problems)


def test_concurrency_streams_one_after_another_fail_despite_the_log(tmp_path):
    """The server's log shows 4 overlapping slots, but the client received each stream's chunks only
    after the previous stream's last: no interleave, FAIL."""
    serial = [(0.01 + k * 0.1, 0.05 + k * 0.1) for k in range(4)]
    c, _, problems = _concurrency_logs(tmp_path, "llama_server_concurrency_cpu.log", spans=serial)
    assert c["server_max_busy_slots"] == 4 and c["client_interleaved_pairs"] == 0
    assert any("no interleaving of streamed chunks for 6 of 6" in p for p in problems), problems
    # Two of the four streams overlap, the others come after: the pairs that never interleave fail it.
    partly = [(0.01, 0.05), (0.011, 0.051), (0.2, 0.3), (0.4, 0.5)]
    c, _, problems = _concurrency_logs(tmp_path, "llama_server_concurrency_cpu.log", spans=partly)
    assert c["client_interleaved_pairs"] == 1
    assert any("for 5 of 6" in p for p in problems), problems


def test_concurrency_streamed_output_must_match(tmp_path):
    from tools.runner.checks import concurrency as cc
    _concurrency_logs(tmp_path, "llama_server_concurrency_cpu.log")
    data = json.loads((tmp_path / cc.CLIENT_FILE).read_text())
    data["connections"][1] = _stream(cc.PROMPTS[1], [0.0111, 0.03, 0.0511], tokens=[0, 7, 2])
    data["connections"][2]["events"][1][1] = "data: {not json"
    (tmp_path / cc.CLIENT_FILE).write_text(json.dumps(data))
    text = "; ".join(cc.problems(tmp_path))
    assert "diverges at token 1 to token 7, not among" in text and "unparsable event" in text


def _concurrency_with_fake_server(tmp_path, mode):
    from tools.runner.checks import concurrency as cc
    from tools.runner.steps import Step
    ctx = _fake_ctx(tmp_path, mode)
    step = Step("concurrency", ctx.logs_dir, ctx.tracker)
    try:
        status, message = cc.run_concurrency(ctx, step)
    finally:
        ctx.tracker.stop_all()
    assert cc.recompute(ctx.logs_dir) == (dict(step.result.counts), dict(step.result.metrics))
    return status, message, step.result.counts, cc.problems(ctx.logs_dir)


def _fake_ctx(tmp_path, mode):
    from tools.runner.testing import fake_lane
    return fake_lane.server_context(tmp_path, mode)


def test_concurrency_passes_on_an_honest_fake_server(tmp_path):
    from proto import runner_report_pb2 as rpb
    status, message, counts, problems = _concurrency_with_fake_server(tmp_path, "cancel")
    assert status == rpb.CheckResult.PASS, message
    assert problems == [] and counts["client_interleaved_pairs"] == 6 and counts["exact_matches"] == 4


def test_concurrency_serial_server_logging_overlap_fails(tmp_path):
    """The red team's lie: one request decoded at a time while the log shows four overlapping slot
    launches. The server-log checks pass; the client's chunk arrivals do not interleave."""
    from proto import runner_report_pb2 as rpb
    status, message, counts, problems = _concurrency_with_fake_server(tmp_path, "serial")
    assert status == rpb.CheckResult.FAIL
    assert counts["server_max_busy_slots"] == 4 and counts["server_distinct_slots"] == 4
    # Streams served one after another can touch only at a boundary, and the fake pauses there; a
    # loaded host may still deliver a late tail, so neighbours in serving order may show one pair.
    assert counts["client_interleaved_pairs"] <= 3, counts
    assert len(problems) == 1 and "no interleaving of streamed chunks for" in problems[0], problems
    assert "no interleaving" in message


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
