"""concurrency: divergence at near-ties, and the server log's overlapping slots (testdata/)."""

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


def _concurrency_logs(tmp_path, server_log: str):
    from tools.runner.checks import concurrency as cc
    (tmp_path / "concurrency.log").write_text("# lanes-config n_parallel=4\n# lanes-config tie_tolerance_nats=0.1\n")
    same = {"tokens": [1, 2, 3], "tokens_predicted": 3, "completion_probabilities": []}
    (tmp_path / cc.RESPONSES_FILE).write_text(json.dumps({"prompts": list(cc.PROMPTS), "concurrent": [same] * 4,
                                                          "sequential": [same] * 4}))
    (tmp_path / cc.SERVER_LOG).write_text(_read(server_log))
    return cc.evaluate(tmp_path)


def test_concurrency_server_log_shows_overlapping_slots(tmp_path):
    c, m, problems = _concurrency_logs(tmp_path, "llama_server_concurrency_cpu.log")
    assert problems == []
    assert c["server_max_busy_slots"] == 4 and c["server_distinct_slots"] == 4 and c["exact_matches"] == 4
    assert 0 < m["server_concurrent_wall_s"] < m["server_sequential_wall_s"]


def test_concurrency_one_at_a_time_server_fails(tmp_path):
    """The former loophole: 4 requests in flight at the client passed even if the server decoded
    them one after another. Its own log shows each task released before the next launched."""
    c, _, problems = _concurrency_logs(tmp_path, "llama_server_one_at_a_time.log")
    assert c["server_max_busy_slots"] == 1 and c["server_distinct_slots"] == 4
    assert any("one at a time" in p for p in problems)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
