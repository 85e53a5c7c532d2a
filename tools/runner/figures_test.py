"""Figures are recompute(logs)'s: artifact hashes are logged per file, graph_smoke figures come from
llama-completion's perf lines, and the runner fails a check whose figures differ from recompute."""

from __future__ import annotations

import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import runner
from tools.runner.checks import artifact_integrity, graph_smoke

A, B = "a" * 64, "b" * 64


def test_artifact_hashes_are_logged_and_recomputed(tmp_path):
    (tmp_path / "artifact_integrity.log").write_text(
        f"evidence bin/llama-completion sha256={A}\nevidence lib/libggml.so.0 sha256={A}\n"
        f"found bin/llama-completion sha256={A}\nfound lib/libggml.so.0 sha256={B}\nfound lib/extra.so sha256={A}\n")
    counts, metrics = artifact_integrity.recompute(tmp_path)
    assert counts == {"artifacts_checked": 2, "artifacts_mismatched": 2} and metrics == {}


def test_graph_smoke_figures_from_perf_lines(tmp_path):
    (tmp_path / "graph_smoke.log").write_text(
        "## kv cache type q8_0\n$ /l/bin/llama-completion -m m -ctk q8_0 -ctv q8_0 -fa on\n"
        "common_perf_print:        eval time =       8.00 ms /    15 runs   (    0.53 ms per token)\n# exit 0 after 1s\n")
    counts, metrics = graph_smoke.recompute(tmp_path)
    assert counts == {"tokens_decoded_q8_0": 15, "kv_types": 1}
    assert metrics == {"tg_tokens_per_s_q8_0": pytest.approx(1875.0)}


def test_graph_smoke_truncated_run_is_counted_and_superseded_by_its_rerun(tmp_path):
    block = "$ /l/bin/llama-completion -m m -ctk q4_0 -ctv q4_0 -fa on\n"
    (tmp_path / "graph_smoke.log").write_text(
        "## kv cache type q4_0\n" + block + "generated text\n# exit 0 after 1s\n"
        "# lanes: exit 0 without llama-completion's perf lines (output truncated); running q4_0 again\n" + block
        + "common_perf_print:        eval time =       8.00 ms /    15 runs   (    0.53 ms per token)\n# exit 0 after 1s\n")
    counts, _ = graph_smoke.recompute(tmp_path)
    assert counts == {"tokens_decoded_q4_0": 15, "kv_types": 1, "truncated_runs": 1}
    # Truncated with no re-run: no tokens, which the check fails.
    (tmp_path / "graph_smoke.log").write_text("## kv cache type q4_0\n" + block + "generated text\n# exit 0 after 1s\n")
    assert graph_smoke.recompute(tmp_path)[0]["tokens_decoded_q4_0"] == 0


def test_runner_fails_a_check_whose_figures_differ_from_recompute(tmp_path):
    (tmp_path / "artifact_integrity.log").write_text(f"evidence bin/x sha256={A}\nfound bin/x sha256={A}\n")
    result = rpb.CheckResult(name="artifact_integrity")
    result.counts.update({"artifacts_checked": 1, "artifacts_mismatched": 0})
    assert runner._recompute_figures(artifact_integrity.CHECK, tmp_path, result) == ""
    result.counts["artifacts_checked"] = 7  # a figure the logs do not support
    problem = runner._recompute_figures(artifact_integrity.CHECK, tmp_path, result)
    assert "artifacts_checked 7 != 1" in problem
    assert result.counts["artifacts_checked"] == 1  # the report carries recompute's figure


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
