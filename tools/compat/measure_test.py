"""measure() end to end over fake lane binaries: the step exit file states the real outcome, and the
recipe is the one the route's argv set (the lanes' certified recipe by default)."""

from __future__ import annotations

import sys

import pytest

from tools.compat import compat_record, rpc_route
from tools.compat.testing import fake_route
from tools.runner import log_blocks


def test_a_compatible_route_passes_its_step_under_the_lanes_recipe(tmp_path):
    out, report = fake_route.measure(tmp_path)
    assert report["compatible"], report["problems"]
    # A CheckResult status, not the exit code 0 read as one ("1 STATUS_UNSPECIFIED").
    assert (out / "logs" / "compat.exit").read_text() == "0 PASS\n"
    assert "# PASS: compatible" in (out / "logs" / "compat.log").read_text()
    assert report["recipe"] == {"kvCacheTypes": ["f16"], "flashAttention": ["on"], "nGpuLayers": -1,
                                "contextSize": 1024, "batchSize": 1024, "ubatchSize": 512, "parallelSequences": 1,
                                # The longest sequence compared: a corpus chunk less its unscored last token.
                                "longestSequenceTokens": 257}
    routed = [c.argv for c in log_blocks.commands((out / "logs" / "compat.log").read_text())
              if rpc_route.is_route_command(c.argv)]
    assert len(routed) == rpc_route.LOGIT_PROMPTS + len(rpc_route.PROMPTS) + 1  # + the corpus run
    assert all(log_blocks.flag_value(argv, "-fa") == "on" and log_blocks.flag_value(argv, "-ctk") == "f16"
               for argv in routed)
    # The recipe and the exit file are raw files of the measurement, digested like the rest.
    assert {"compat.config.json", "compat.exit"} <= set(report["log_digests"])
    assert compat_record.load_measurement(out)["recipe"] == report["recipe"]
    # The corpus: route vs the CPU lane at every scored position, under the F32 model's bounds.
    corpus = report["corpus"]
    assert corpus["bounds"] == "f16" and corpus["n_compared"] == corpus["n_scored"] == 4096
    assert corpus["mean_kl"] < 1e-9 and corpus["top1_agreement_decisive"] == 1.0
    assert rpc_route.CORPUS_FILE in report["log_digests"]
    assert not list(out.glob("corpus-*")), "the logits files are removed after the comparison"
    # The record's bounds kind is re-derived from the model file: an F32 model's is "f16".
    compat_record._check_corpus_bounds(compat_record.load_measurement(out), tmp_path / "m.gguf")
    looser = dict(compat_record.load_measurement(out), corpus={**report["corpus"], "bounds": "quantized"})
    with pytest.raises(compat_record.CompatibilityInputError, match="'quantized' bounds; the model's tensor types call"):
        compat_record._check_corpus_bounds(looser, tmp_path / "m.gguf")


def test_a_route_that_drifts_over_the_corpus_is_not_compatible(tmp_path):
    out, report = fake_route.measure(tmp_path, "diverge_corpus")
    assert not report["compatible"] and (out / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    assert any(p.startswith("route vs cpu over the corpus: mean_kl") for p in report["problems"]), report["problems"]
    # The prompts' logits agree: only the corpus shows it.
    assert all("over the corpus" in p for p in report["problems"]), report["problems"]


def test_another_recipe_is_run_and_stated_as_given(tmp_path):
    _, report = fake_route.measure(tmp_path, flags=rpc_route.RecipeFlags(kv_cache_type="q8_0", flash_attention="off"))
    assert report["recipe"]["kvCacheTypes"] == ["q8_0"] and report["recipe"]["flashAttention"] == ["off"]


def test_an_incompatible_route_fails_its_step(tmp_path):
    out, report = fake_route.measure(tmp_path, "diverge")
    assert not report["compatible"]
    assert (out / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    assert "# FAIL: not compatible: route vs " in (out / "logs" / "compat.log").read_text()


def test_a_failed_command_fails_its_step(tmp_path):
    with pytest.raises(rpc_route.RouteError, match="llama-completion for route, prompt 0, exited 1"):
        fake_route.measure(tmp_path, "crash")
    assert (tmp_path / "out" / "logs" / "compat.exit").read_text() == "1 FAIL\n"


# 16 words: the fake lanes' tokens, as many as the route generates; a newline inside, as a coder
# model prints (compat.log cannot hold such a -p on one line: the fed bytes go to logits.npz).
OTHER_TEXT = " " + " ".join(["other"] * 7) + "\n" + " ".join(["words"] * 9)


def test_a_route_text_the_cpu_lane_takes_up_to_near_ties_agrees(tmp_path):
    # The GPU lanes and the route print other text than the CPU lane; fed it, the CPU lane (and each
    # lane) ranks every token of it its own top-1: the path runs, measured and judged end to end.
    out, report = fake_route.measure(tmp_path, gpu_completion=OTHER_TEXT)
    assert report["compatible"], report["problems"]
    cpu = report["comparisons"]["cpu"]
    assert (cpu["greedy_identical"], cpu["greedy_near_tie_paths"], cpu["greedy_path_gaps"]) == (0, 4, [0.0] * 4)
    assert log_blocks.load_config(log_blocks.config_path(out / "logs", "compat"))["greedy_rule"] == "near-tie-paths"
    assert compat_record.load_measurement(out)["comparisons"]["cpu"]["greedy_near_tie_paths"] == 4


def test_a_route_text_cut_short_is_no_path(tmp_path):
    _, report = fake_route.measure(tmp_path, gpu_completion=" other words here")
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in report["problems"], report["problems"]


def test_a_route_text_the_cpu_lane_ranks_clearly_lower_is_refused(tmp_path):
    _, report = fake_route.measure(tmp_path, gpu_completion=OTHER_TEXT, cpu_markers=("unlikely",))
    assert not report["compatible"]
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in report["problems"], report["problems"]
    assert min(report["comparisons"]["cpu"]["greedy_path_gaps"]) > 4.0


def test_a_lane_binary_other_than_its_evidence_is_refused_before_anything_runs(tmp_path):
    def swap(root):
        (root / "vulkan" / "bin" / "llama-logits").write_text(f"#!{sys.executable}\nprint('another binary')\n")
    with pytest.raises(rpc_route.RouteError, match=r"linux-x86_64-vulkan \(.*\): bin/llama-logits: sha256 .* != evidence"):
        fake_route.measure(tmp_path, prepare=swap)
    assert not (tmp_path / "out").exists(), "nothing may be written for a lane nobody certified"


def test_a_file_added_to_a_lane_is_refused(tmp_path):
    def add(root):
        (root / "cuda" / "lib").mkdir(exist_ok=True)
        (root / "cuda" / "lib" / "libpreload.so").write_bytes(b"\x7fELF")
    with pytest.raises(rpc_route.RouteError, match="lib/libpreload.so: not in the evidence"):
        fake_route.measure(tmp_path, prepare=add)


def test_an_unverified_cpu_lane_is_refused(tmp_path):
    with pytest.raises(rpc_route.RouteError, match="--cpu_evidence"):
        fake_route.measure(tmp_path, cpu_evidence=None)
    def swap(root):
        (root / "cpu" / "bin" / "llama-perplexity").write_text("#!/bin/sh\n")
    with pytest.raises(rpc_route.RouteError, match="reference CPU lane .* is not the lane of"):
        fake_route.measure(tmp_path / "again", prepare=swap)


def test_a_lane_rewritten_while_the_route_runs_fails_the_measurement(tmp_path):
    with pytest.raises(rpc_route.RouteError, match="a lane changed while the route was measured: .*bin/llama-perplexity"):
        fake_route.measure(tmp_path, "rewrite")
    assert (tmp_path / "out" / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    assert not (tmp_path / "out" / rpc_route.REPORT_FILE).exists()


def test_flash_attention_auto_is_refused(tmp_path):
    with pytest.raises(rpc_route.RouteError, match="auto proves no mode"):
        fake_route.measure(tmp_path, flags=rpc_route.RecipeFlags(flash_attention="auto"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
