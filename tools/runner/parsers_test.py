"""Parsers of the lane binaries' output (llama-bench JSON, completion logs, version stamp, step
logs) and the lane spec's aliases, on captured samples (testdata/)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from tools.runner import lane_spec
from tools.runner.checks import artifact_integrity, graph_smoke, speed_bench

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _read(name: str) -> str:
    return (TESTDATA / name).read_text()


def test_llama_bench_json():
    m = speed_bench.parse_llama_bench_json(_read("llama_bench_cpu.json"))
    assert m["pp_tokens_per_s"] == pytest.approx(5935.349104)
    assert m["tg_tokens_per_s"] > 0
    assert m["model_bytes"] == 70259712


def test_llama_bench_json_after_log_noise():
    text = "some log line [not json\n" + json.dumps([{"n_prompt": 0, "n_gen": 8, "avg_ts": 12.5, "model_size": 10}])
    assert speed_bench.parse_llama_bench_json(text)["tg_tokens_per_s"] == 12.5


def test_log_evidence_cpu_and_cuda_patterns():
    log = _read("llama_completion_cpu_q8_0.log")
    cpu = lane_spec.load_lane(TESTDATA / "spec.json", "cpu")
    cuda = lane_spec.load_lane(TESTDATA / "spec.json", "linux-x86_64-cuda")
    assert graph_smoke.missing_log_evidence(cpu.log_evidence, log) == []
    assert graph_smoke.missing_log_evidence(cuda.log_evidence, log) == list(cuda.log_evidence)
    cuda_log = ("ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143156 MiB):\n"
                "load_tensors: offloaded 3/3 layers to GPU\n"
                "load_tensors:        CUDA0 model buffer size =    67.00 MiB\n")
    assert graph_smoke.missing_log_evidence(cuda.log_evidence, cuda_log) == []
    partial = cuda_log.replace("3/3", "2/3")  # not every layer offloaded
    assert graph_smoke.missing_log_evidence(cuda.log_evidence, partial) == [cuda.log_evidence[1]]


def test_eval_and_kv_type_lines():
    log = _read("llama_completion_cpu_q8_0.log")
    ev = graph_smoke.parse_eval(log)
    assert ev["eval_runs"] == 15 and ev["prompt_tokens"] > 0
    assert graph_smoke.parse_kv_types(log) == ("q8_0", "q8_0")
    assert graph_smoke.flash_attn_for("q4_0") == "on" and graph_smoke.flash_attn_for("f16") == "auto"


def test_version_stamp():
    text = ("version: 0.5.0-dev (build 0, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
            "lanes: lane linux-x86_64-cpu, patch stack abc123\n")
    commit = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert artifact_integrity.parse_version(text) == ("0c1e570", "linux-x86_64-cpu", "abc123")
    assert artifact_integrity.version_problems(text, "linux-x86_64-cpu", commit, "abc123") == []
    assert artifact_integrity.version_problems(text, "linux-x86_64-cpu", commit, "other") != []
    stock = text.split("lanes:")[0]
    assert any("stamp" in p for p in artifact_integrity.version_problems(stock, "linux-x86_64-cpu", commit, "abc123"))


def test_lane_spec_alias_and_unknown():
    assert lane_spec.load_lane(TESTDATA / "spec.json", "cuda").lane_id == "linux-x86_64-cuda"
    with pytest.raises(lane_spec.LaneSpecError, match="neither a lane id nor an alias"):
        lane_spec.load_lane(TESTDATA / "spec.json", "tpu")


def test_exit_line_is_found_after_output_without_a_trailing_newline(tmp_path):
    # A tool whose output ends mid-line (llama.cpp's async logger can) must not hide its exit status.
    from tools.runner import log_blocks
    from tools.runner.steps import ProcessTracker, Step
    step = Step("demo", tmp_path, ProcessTracker())
    step.run(["printf", "no newline at the end"], 30)
    step.finish(0, "done")
    (cmd,) = log_blocks.commands((tmp_path / "demo.log").read_text())
    assert cmd.exit_code == 0 and cmd.output == "no newline at the end"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
