"""Parsers of the lane binaries' and host tools' output, on captured samples (testdata/)."""

from __future__ import annotations

import json
import pathlib

import pytest

from tools.runner import artifact_integrity, fixture_parity, graph_smoke, lane_spec, preflight, speed

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _read(name: str) -> str:
    return (TESTDATA / name).read_text()


def test_test_backend_ops_grad_cpu():
    s = fixture_parity.parse_test_backend_ops(_read("test_backend_ops_grad_cpu.txt"))
    assert s.tests_ok == 2
    assert s.tests_failed == 3  # two MAA lines + "compare failed" (one line per printed result)
    assert s.tests_not_supported == 3
    assert s.tests_skipped == 2  # "skipping large tensors for speed" counts as neither
    assert s.ops_status == {"ADD": "passed", "SUM": "failed"}
    assert s.max_maa == pytest.approx(0.001956947)
    assert s.backend_status == {"CPU": "OK"}
    status, message = fixture_parity.judge(s, 0)
    assert status == fixture_parity.CR.FAIL and "SUM(" in message


def test_test_backend_ops_test_mode_with_err_prefix():
    s = fixture_parity.parse_test_backend_ops(_read("test_backend_ops_test_cuda_sample.txt"))
    assert s.tests_ok == 4
    assert s.tests_failed == 1
    assert s.failed_tests[0].startswith("MUL_MAT(type_a=q8_0")
    assert s.ops_status == {"ADD": "passed", "MUL_MAT": "failed", "OPT_STEP_SGD": "not_supported", "ROPE": "passed"}
    assert s.count("passed") == 2 and s.count("failed") == 1 and s.count("not_supported") == 1
    assert s.max_err == pytest.approx(1.234e-6)
    assert s.err_threshold == pytest.approx(1e-7)
    assert (s.summary_passed, s.summary_total) == (3, 4)
    assert s.backend_status == {"CUDA0": "FAIL"}


def test_zero_tests_is_fail():
    s = fixture_parity.parse_test_backend_ops("Testing 1 devices\n\nBackend 1/1: CPU\n  0/0 tests passed\n  Backend CPU: OK\n")
    assert fixture_parity.judge(s, 0)[0] == fixture_parity.CR.FAIL


def test_crash_without_fail_line_is_fail():
    s = fixture_parity.parse_test_backend_ops("  ADD(type=f32): OK\nggml.c:7227: GGML_ASSERT(...) failed\n")
    status, message = fixture_parity.judge(s, 134)
    assert status == fixture_parity.CR.FAIL and "exited 134" in message


def test_llama_bench_json():
    m = speed.parse_llama_bench_json(_read("llama_bench_cpu.json"))
    assert m["pp_tokens_per_s"] == pytest.approx(5935.349104)
    assert m["tg_tokens_per_s"] > 0
    assert m["model_bytes"] == 70259712


def test_llama_bench_json_after_log_noise():
    text = "some log line [not json\n" + json.dumps([{"n_prompt": 0, "n_gen": 8, "avg_ts": 12.5, "model_size": 10}])
    assert speed.parse_llama_bench_json(text)["tg_tokens_per_s"] == 12.5


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


def test_nvidia_smi_h200():
    rows = preflight.parse_nvidia_smi_query(_read("nvidia_smi_query_h200.txt"))
    assert rows == [{"name": "NVIDIA H200", "compute_cap": "9.0", "driver_version": "580.159.04",
                     "memory_total": "143771 MiB", "memory_used": "0 MiB"}]
    assert preflight.parse_mib(rows[0]["memory_total"]) == 143771
    assert preflight.parse_cuda_version(_read("nvidia_smi_h200.txt")) == "13.0"


def test_vulkaninfo_summary_and_rocminfo():
    text = ("Devices:\n========\nGPU0:\n\tapiVersion         = 1.3.255\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU\n"
            "\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)\n\tdriverName         = llvmpipe\n"
            "GPU1:\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\n\tdeviceName         = AMD Radeon PRO W7900\n")
    devices = preflight.parse_vulkaninfo_summary(text)
    assert [d["deviceType"] for d in devices] == ["PHYSICAL_DEVICE_TYPE_CPU", "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU"]
    assert preflight.parse_rocminfo_agents("  Name:                    gfx942\n  Name: AMD EPYC\n") == ["gfx942"]


def test_cpuinfo():
    info = preflight.read_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fma avx2\n\nprocessor\t: 1\n")
    assert info["vendor_id"] == "GenuineIntel" and "avx2" in info["flags"].split()


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



def test_parse_ldd_marks_missing_libraries():
    from tools.runner import preflight
    text = ("\tlibcudart.so.13 => /usr/local/cuda/lib64/libcudart.so.13 (0x7f00)\n"
            "\tlibcublas.so.13 => not found\n\tlinux-vdso.so.1 (0x7ffd)\n")
    assert preflight.parse_ldd(text) == {"libcudart.so.13": "/usr/local/cuda/lib64/libcudart.so.13",
                                         "libcublas.so.13": "not found"}


def test_fixture_ops_come_from_the_lane_spec_and_the_override_is_bring_up():
    import pathlib
    from tools.runner import fixture_parity
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    lane = Lane("linux-x86_64-cuda", "cuda", "linux", "x86_64", "cuda", "cuda", (), (), (), ("MUL_MAT", "ROPE"))
    cfg = RunnerConfig(lane="cuda", lane_dir=pathlib.Path("/l"), evidence=None, spec=pathlib.Path("/s"), model=None,
                       out_dir=pathlib.Path("/o"), report=pathlib.Path("/o/r.pb"))
    ctx = RunContext(config=cfg, lane=lane, logs_dir=pathlib.Path("/o/logs"), scratch_dir=pathlib.Path("/o/s"))
    assert fixture_parity.fixture_command(ctx)[1:] == ["test", "-b", "CUDA0", "-o", "MUL_MAT,ROPE"]
    import dataclasses
    ctx.config = dataclasses.replace(cfg, fixture_ops="ADD")
    assert fixture_parity.fixture_command(ctx)[-2:] == ["-o", "ADD"]


def _probs(*pairs):
    return [{"id": t1, "top_logprobs": [{"id": t1, "logprob": l1}, {"id": t2, "logprob": l2}]} for t1, l1, t2, l2 in pairs]


def test_concurrency_divergence_only_at_near_ties():
    from tools.runner.concurrency import judge_divergence
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

if __name__ == "__main__":
    import sys, pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
