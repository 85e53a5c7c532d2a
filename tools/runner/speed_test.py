"""Speed catches fallbacks: relative floors over the CPU lane, the backend the bench names, roofline
bytes from the backend's own buffer lines, bandwidth from the digested probe; every figure from
recompute(logs_dir)."""

from __future__ import annotations

import copy
import json
import math
import pathlib
import sys

import pytest

from tools.runner import log_blocks
from tools.runner.checks import speed, speed_bench, speed_roofline

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"
CPU_JSON = json.loads((TESTDATA / "llama_bench_cpu.json").read_text())
# The committed H200 run (9e5fa75): CPU lane pp512 81,624 / tg128 4,417 tok/s on the tiny model,
# 22.6 tok/s on the 4 GB roofline model.
CPU_PP, CPU_TG, CPU_BIG_TG = 81623.647194, 4416.671938, 22.598742
# pp512 on the roofline model (test figures of the right order: compute bound, the GPU far ahead).
CPU_BIG_PP, BIG_PP = 310.0, 21500.0
# The roofline model's loader lines (F16, 8 layers, n_embd 4096): the 32000 x 4096 F16 token
# embedding (250.00 MiB) stays in host memory; the rest is in CUDA0.
ROOFLINE_LOG = """load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors: offloading output layer to GPU
load_tensors: offloading 7 repeating layers to GPU
load_tensors: offloaded 9/9 layers to GPU
load_tensors:   CPU_Mapped model buffer size =   250.00 MiB
load_tensors:        CUDA0 model buffer size =  3578.26 MiB
"""


def _tests(backend: str, pp: float | None, tg: float | None, model_size: int = 70259712,
           model_filename: str | None = None, build_commit: str = "0c1e570") -> list[dict]:
    out = []
    for t in copy.deepcopy(CPU_JSON):
        is_pp = t["n_prompt"] > 0
        if (is_pp and pp is None) or (not is_pp and tg is None):
            continue
        t.update(n_prompt=512 if is_pp else 0, n_gen=0 if is_pp else 128, avg_ts=pp if is_pp else tg,
                 model_size=model_size, backends=backend, n_gpu_layers=99 if backend != "CPU" else 0,
                 gpu_info="NVIDIA H200" if backend != "CPU" else "", build_commit=build_commit)
        if model_filename is not None:
            t["model_filename"] = model_filename
        out.append(t)
    return out


def _write_run(logs: pathlib.Path, *, lane_pp=260819.9, lane_tg=4349.9, lane_backend="CUDA", big_tg=761.75, big_pp=BIG_PP,
               membw=True, offload_line="load_tensors: offloaded 3/3 layers to GPU", cpu_backend="CPU",
               roofline=True, override=None) -> pathlib.Path:
    logs.mkdir(parents=True, exist_ok=True)
    config = ["# lanes-config backend=cuda", "# lanes-config min_speedup_roofline_pp=2.0", "# lanes-config min_speedup_roofline_tg=4.0"]
    if override:
        config.append(f"# lanes-config hbm_bandwidth_gbs_override={override!r}")
    (logs / "speed.log").write_text("\n".join(config) + "\n")
    (logs / "speed.lane.json").write_text(json.dumps(_tests(lane_backend, lane_pp, lane_tg)))
    (logs / "speed.lane.log").write_text(offload_line + "\nload_tensors:        CUDA0 model buffer size =    35.75 MiB\n")
    (logs / "speed.cpu_lane.json").write_text(json.dumps(_tests(cpu_backend, CPU_PP, CPU_TG)))
    (logs / "speed.cpu_lane.log").write_text("load_tensors:   CPU_Mapped model buffer size =    67.00 MiB\n")
    if roofline:
        (logs / "speed.roofline_lane.json").write_text(json.dumps(_tests("CUDA", big_pp, big_tg, 4014227456)))
        (logs / "speed.roofline_lane.log").write_text(ROOFLINE_LOG)
        (logs / "speed.roofline_cpu_lane.json").write_text(json.dumps(_tests("CPU", CPU_BIG_PP, CPU_BIG_TG, 4014227456)))
        (logs / "speed.roofline_cpu_lane.log").write_text("")
    if membw:
        # 8 GiB moved (4 GiB read + 4 GiB written) in a median 2.0216 ms: 4249.3 GB/s.
        (logs / "speed.membw.json").write_text(json.dumps(
            {"device": "NVIDIA H200", "bytes_moved": 8589934592, "samples_ms": [2.0216, 2.0210, 2.0230], "median_ms": 2.0216}))
    return logs


def test_cuda_at_the_committed_figures_passes(tmp_path):
    counts, m, problems, summary = speed.evaluate(_write_run(tmp_path))
    assert problems == [], problems
    assert m["speedup_pp"] == pytest.approx(260819.9 / CPU_PP)
    assert m["roofline_speedup_tg"] == pytest.approx(761.75 / CPU_BIG_TG)
    assert m["roofline_speedup_pp"] == pytest.approx(BIG_PP / CPU_BIG_PP)
    assert counts["roofline_device_weight_bytes"] == round(3578.26 * 2**20)
    assert counts["roofline_host_weight_bytes"] == 250 * 2**20
    assert m["hbm_bandwidth_gbs"] == pytest.approx(8589934592 / 2.0216e-3 / 1e9)
    # Device-resident bytes, not the whole file: ~67%, not the 72% the file size gave.
    assert m["tg_roofline_fraction"] == pytest.approx(761.75 * round(3578.26 * 2**20) / (m["hbm_bandwidth_gbs"] * 1e9))
    assert 0.66 < m["tg_roofline_fraction"] < 0.68
    assert "(measured)" in summary and "host-resident excluded" in summary


def test_roofline_pp_below_twice_the_cpu_lane_fails(tmp_path):
    # Faster than the CPU lane on the compute-bound model, but only x1.8.
    _, m, problems, _ = speed.evaluate(_write_run(tmp_path, big_pp=1.8 * CPU_BIG_PP))
    assert m["roofline_speedup_pp"] == pytest.approx(1.8)
    assert any("roofline pp x1.8" in p and "below the relative floor x2" in p for p in problems), problems


def test_the_tiny_model_pp_ratio_is_kept_without_a_floor(tmp_path):
    # The H200 run in which the CPU lane's native variant made the tiny-model ratio x1.96 (Vulkan).
    _, m, problems, summary = speed.evaluate(_write_run(tmp_path, lane_pp=1.96 * CPU_PP))
    assert problems == [], problems
    assert m["speedup_pp"] == pytest.approx(1.96) and "x1.96 pp" in summary


def test_roofline_pp_absent_fails(tmp_path):
    _, m, problems, _ = speed.evaluate(_write_run(tmp_path, big_pp=None))
    assert m["roofline_pp_tokens_per_s"] == 0.0
    assert any("roofline pp x0.0" in p for p in problems), problems


def test_cuda_fallback_to_cpu_fails(tmp_path):
    # A lane that silently ran on the CPU: the CPU lane's own figures, the JSON names CPU.
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path, lane_pp=CPU_PP, lane_tg=CPU_TG, lane_backend="CPU",
                                                  big_tg=CPU_BIG_TG, big_pp=CPU_BIG_PP, offload_line=""))
    text = "; ".join(problems)
    assert "does not name CUDA" in text
    assert "gpu_info is empty" in text
    assert "no full offload" in text
    assert "below the relative floor x2" in text and "below the relative floor x4" in text


def test_json_naming_cpu_for_a_cuda_lane_fails_even_when_fast(tmp_path):
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path, lane_backend="CPU"))
    assert any("backends 'CPU' does not name CUDA" in p for p in problems), problems


def test_cpu_lane_bench_must_be_cpu(tmp_path):
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path, cpu_backend="CUDA"))
    assert any(p.startswith("CPU lane bench:") for p in problems), problems


def test_partial_offload_fails(tmp_path):
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path, offload_line="load_tensors: offloaded 2/3 layers to GPU"))
    assert any("no full offload" in p for p in problems), problems


def test_roofline_and_bandwidth_are_required_for_accelerators(tmp_path):
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path / "a", roofline=False))
    assert any("--roofline_model" in p for p in problems), problems
    _, m, problems, _ = speed.evaluate(_write_run(tmp_path / "b", membw=False))
    assert "tg_roofline_fraction" not in m
    assert any("bandwidth not measured" in p for p in problems), problems


def test_bandwidth_override_is_used_and_said(tmp_path):
    _, m, problems, summary = speed.evaluate(_write_run(tmp_path, membw=False, override=4800.0))
    assert problems == [] and m["hbm_bandwidth_gbs"] == 4800.0 and "(override)" in summary


def test_fraction_above_one_fails(tmp_path):
    # A bandwidth far too low (or bytes far too high) cannot pass as a measurement.
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path, membw=False, override=100.0))
    assert any("of the roofline: bytes or bandwidth are wrong" in p for p in problems), problems


def test_nan_speed_fails(tmp_path):
    _, _, problems, _ = speed.evaluate(_write_run(tmp_path, lane_pp=float("nan")))
    assert any("speedup_pp" in p for p in problems), problems


def test_device_bytes_from_real_cuda_log_excerpt():
    # graph_smoke.log of the committed H200 run: the tiny model's CUDA0 buffer counts, CPU_Mapped not.
    device, host, lines = speed_bench.device_weight_bytes((TESTDATA / "load_tensors_cuda_tiny.log").read_text(), "cuda")
    assert device == round(35.75 * 2**20) and host == round(31.25 * 2**20)
    assert len(lines) == 2 and lines[1].endswith("CUDA0 model buffer size =    35.75 MiB")
    assert speed_bench.parse_offloaded((TESTDATA / "load_tensors_cuda_tiny.log").read_text()) == (3, 3)


def test_cuda_host_buffer_is_not_device_memory():
    text = "load_tensors:    CUDA_Host model buffer size =   100.00 MiB\nload_tensors:        CUDA0 model buffer size =    10.00 MiB\n"
    assert speed_bench.device_weight_bytes(text, "cuda")[:2] == (10 * 2**20, 100 * 2**20)


def test_cpu_lane_keeps_absolute_floors(tmp_path):
    logs = tmp_path
    (logs / "speed.log").write_text("# lanes-config backend=cpu\n# lanes-config floor_tg_tokens_per_s=100.0\n"
                                    "# lanes-config floor_pp_tokens_per_s=1000.0\n")
    (logs / "speed.lane.json").write_text((TESTDATA / "llama_bench_cpu.json").read_text())
    counts, m, problems, _ = speed.evaluate(logs)
    assert problems == [] and m["floor_pp_tokens_per_s"] == 1000.0
    assert counts == {"n_prompt": 64, "n_gen": 32, "repetitions": 2, "model_bytes": 70259712}
    (logs / "speed.log").write_text("# lanes-config backend=cpu\n# lanes-config floor_tg_tokens_per_s=300.0\n"
                                    "# lanes-config floor_pp_tokens_per_s=1000.0\n")
    assert any(p.startswith("tg 282.9") for p in speed.evaluate(logs)[2])


def test_recompute_equals_evaluate(tmp_path):
    logs = _write_run(tmp_path)
    counts, metrics, _, _ = speed.evaluate(logs)
    assert speed.recompute(logs) == (counts, metrics)
    assert all(math.isfinite(v) for v in metrics.values())


def _fake_bench(root: pathlib.Path, backend: str, pp: float, tg: float, big_tg: float, stderr: str,
                big_pp: float = BIG_PP, model: pathlib.Path | None = None, roofline: pathlib.Path | None = None,
                build_commit: str = "0c1e570") -> pathlib.Path:
    """A lane whose llama-bench prints canned JSON (stdout) and loader lines (stderr), naming the
    given model files with their tensor bytes as llama-bench does."""
    (root / "bin").mkdir(parents=True)
    small, big = root / "small.json", root / "big.json"
    small.write_text(json.dumps(_tests(backend, pp, tg, *_named(model, 70259712), build_commit)))
    big.write_text(json.dumps(_tests(backend, big_pp, big_tg, *_named(roofline, 4014227456), build_commit)))
    (root / "stderr.txt").write_text(stderr)
    script = root / "bin" / "llama-bench"
    script.write_text(f"#!/bin/sh\ncat {root}/stderr.txt >&2\n"
                      f"case \"$*\" in *roofline*) cat {big};; *) cat {small};; esac\n")
    script.chmod(0o755)
    return root


def _named(model: pathlib.Path | None, default_size: int) -> tuple[int, str | None]:
    """(model_size, model_filename) llama-bench prints for a GGUF: its tensor bytes and the -m path."""
    if model is None:
        return default_size, None
    return sum(speed_roofline.tensor_sizes(model).values()), str(model)


def _evidence(commit: str = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"):
    from proto import build_evidence_pb2 as epb
    return epb.BuildEvidence(upstream=epb.Upstream(commit=commit))


def test_run_speed_cuda_orchestration(tmp_path):
    """The CUDA branch end to end with fake binaries: raw files kept, figures = recompute, override said."""
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import load_lane
    from tools.runner.steps import Step
    from tools.runner.testing import fake_lane

    model, roofline = _gguf(tmp_path / "m.gguf", ("token_embd.weight",)), _gguf(tmp_path / "roofline.gguf", ("a", "b"))
    cuda = _fake_bench(tmp_path / "cuda", "CUDA", 260819.9, 4349.9, 761.75,
                       "load_tensors: offloaded 3/3 layers to GPU\n" + ROOFLINE_LOG, model=model, roofline=roofline)
    cpu = _fake_bench(tmp_path / "cpu", "CPU", CPU_PP, CPU_TG, CPU_BIG_TG, "", big_pp=CPU_BIG_PP, model=model,
                      roofline=roofline)
    logs = tmp_path / "logs"
    logs.mkdir()
    cfg = fake_lane.config(tmp_path, cuda, None, model, lane="cuda", cpu_lane_dir=cpu,
                           roofline_model=roofline, hbm_bandwidth_gbs=4249.3)
    ctx = RunContext(config=cfg, lane=load_lane(fake_lane.SPEC, "cuda"), logs_dir=logs, scratch_dir=tmp_path,
                     evidence=_evidence())
    step = Step("speed", logs, ctx.tracker)
    status, message = speed.run_speed(ctx, step)
    step.finish(status, message)
    assert status == speed.CR.PASS, message
    assert {p.name for p in step.extra_logs} == {f"speed.{b}.{e}" for b in ("lane", "cpu_lane", "roofline_lane", "roofline_cpu_lane")
                                                 for e in ("json", "log")} | {"speed.config.json"}
    assert any("--hbm_bandwidth_gbs=4249.3" in r for r in ctx.non_recordable)
    assert speed.recompute(logs) == (dict(step.result.counts), dict(step.result.metrics))
    # Line 2: the configuration (3 values) is in speed.config.json, no longer the log's first lines.
    assert "-v" in (logs / "speed.log").read_text().split("\n")[2].split()
    # What was benched is bound in the runner's configuration: the model, the roofline model, the pin.
    config = log_blocks.step_config(logs, "speed")
    assert config["model"] == str(model) and config["roofline_model"] == str(roofline)
    assert config["build_commit"].startswith("0c1e570") and config["model_sha256"]
    # The same run over a lane whose llama-bench is another build fails, and so does no evidence.
    ctx.evidence = _evidence("deadbeef" * 5)
    step = Step("speed", logs, ctx.tracker)
    status, message = speed.run_speed(ctx, step)
    step.finish(status, message)
    assert status == speed.CR.FAIL and "build_commit '0c1e570' is not the pinned upstream commit deadbeefdead" in message
    ctx.evidence = None
    step = Step("speed", logs, ctx.tracker)
    status, message = speed.run_speed(ctx, step)
    step.finish(status, message)
    assert status == speed.CR.FAIL and "no build evidence with the pinned upstream commit" in message


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def _cpu_roofline_run(logs: pathlib.Path, big_tg: float, membw: bool = True) -> pathlib.Path:
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "speed.log").write_text("# lanes-config backend=cpu\n# lanes-config floor_tg_tokens_per_s=0.0\n"
                                    "# lanes-config floor_pp_tokens_per_s=0.0\n"
                                    f"# lanes-config roofline_rows_only_bytes={128 * 2**20}\n")
    (logs / "speed.lane.json").write_text((TESTDATA / "llama_bench_cpu.json").read_text())
    (logs / "speed.roofline_lane.json").write_text(json.dumps(_tests("CPU", None, big_tg, 671088640)))
    (logs / "speed.roofline_lane.log").write_text("load_tensors:   CPU_Mapped model buffer size =   640.00 MiB\n")
    if membw:
        # 2 GiB read in the fastest sample, 100 ms: 21.47 GB/s of host memory.
        (logs / "speed.membw.json").write_text(json.dumps(
            {"device": "host memory (read)", "threads": 2, "bytes_moved": 2147483648, "statistic": "fastest",
             "samples_ms": [130.0, 100.0, 101.0]}))
    return logs


def test_cpu_roofline_fraction_from_the_host_probe(tmp_path):
    counts, m, problems, summary = speed.evaluate(_cpu_roofline_run(tmp_path, big_tg=16.0))
    assert problems == [], problems
    assert counts["roofline_host_weight_bytes"] == 512 * 2**20  # 640 MiB of buffers less the 128 MiB embedding
    assert m["tg_roofline_fraction"] == pytest.approx(16.0 * 512 * 2**20 / (2147483648 / 0.1))
    assert "host memory read (measured)" in summary


def test_cpu_roofline_above_the_bandwidth_or_unmeasured_fails(tmp_path):
    assert any("of the roofline" in p for p in speed.evaluate(_cpu_roofline_run(tmp_path / "a", big_tg=200.0))[2])
    assert any("not measured" in p for p in speed.evaluate(_cpu_roofline_run(tmp_path / "b", 16.0, membw=False))[2])


def _gguf(path: pathlib.Path, names: tuple[str, ...]) -> pathlib.Path:
    import gguf
    import numpy as np
    w = gguf.GGUFWriter(str(path), "llama")
    for name in names:
        w.add_tensor(name, np.zeros((100, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_rows_only_bytes_is_the_embedding_only_with_a_separate_output(tmp_path):
    separate = _gguf(tmp_path / "a.gguf", ("token_embd.weight", "output.weight"))
    assert speed_roofline.rows_only_bytes(separate) == 100 * 64 * 2
    tied = _gguf(tmp_path / "b.gguf", ("token_embd.weight",))  # the output matmul reads it all
    assert speed_roofline.rows_only_bytes(tied) == 0


def test_cpu_membw_probe_prints_what_parse_membw_reads(tmp_path):
    import subprocess
    out = subprocess.run([sys.executable, str(speed.CPU_MEMBW_SOURCE), "1"], capture_output=True, text=True, check=True)
    assert speed_bench.parse_membw(out.stdout) > 0.1  # GB/s: any host moves more than this


def _upstream_pairs(logs: pathlib.Path, factors: list[float]) -> None:
    """Alternating lane/upstream benches: pair i's upstream runs `factors[i]` times as fast as the lane."""
    lane = json.loads((logs / "speed.lane.json").read_text())
    for i, factor in enumerate(factors, 1):
        lane_label, up_label = speed_bench.pair_labels(i)
        if i > 1:
            (logs / f"speed.{lane_label}.json").write_text(json.dumps(lane))
            (logs / f"speed.{lane_label}.log").write_text("")
        up = copy.deepcopy(lane)
        for t in up:
            t["avg_ts"] = t["avg_ts"] * factor
            t["build_commit"] = "unknown"  # the upstream-default build is not stamped
        (logs / f"speed.{up_label}.json").write_text(json.dumps(up))
        (logs / f"speed.{up_label}.log").write_text("")


def test_upstream_ratio_from_its_own_bench_file(tmp_path):
    logs = _cpu_roofline_run(tmp_path, big_tg=16.0)
    _upstream_pairs(logs, [2.0, 2.0, 2.0])  # upstream twice as fast: ratio 0.5
    _, m, problems, summary = speed.evaluate(logs)
    assert problems == [] and m["upstream_ratio_pp"] == pytest.approx(0.5) and m["upstream_ratio_tg"] == pytest.approx(0.5)
    assert "vs upstream defaults on this host (median of 3 alternating pairs): pp x0.50, tg x0.50" in summary
    (logs / "speed.upstream.json").write_text("not json")
    assert "upstream build's llama-bench JSON unreadable" in speed.evaluate(logs)[2]


def test_upstream_ratio_is_the_median_of_three_alternating_pairs_not_one_outlier(tmp_path):
    # The CPU record's x1.87 came from one pair in which upstream ran slow: the median of the pairs
    # does not move with it.
    logs = _cpu_roofline_run(tmp_path / "a", big_tg=16.0)
    _upstream_pairs(logs, [1 / 1.87, 1.0, 1.02])
    _, m, problems, _ = speed.evaluate(logs)
    assert problems == [], problems
    assert m["upstream_ratio_pp"] == pytest.approx(1.0) and m["upstream_ratio_pp_max"] == pytest.approx(1.87)
    assert m["upstream_pairs"] == 3
    # One pair (or two) is not a ratio.
    for n in (1, 2):
        logs = _cpu_roofline_run(tmp_path / f"n{n}", big_tg=16.0)
        _upstream_pairs(logs, [1 / 1.87] * n)
        problems = speed.evaluate(logs)[2]
        assert any(f"needs 3 alternating pairs of benches (lane, upstream, ...); found {n}" in p for p in problems), problems


def _bound_run(logs: pathlib.Path, model: pathlib.Path, **lane_changes) -> pathlib.Path:
    """A CPU run whose configuration binds the benches: the model's path and bytes, the pinned commit."""
    logs.mkdir(parents=True, exist_ok=True)
    tensor_bytes = sum(speed_roofline.tensor_sizes(model).values())
    log_blocks.write_config(log_blocks.config_path(logs, "speed"), {
        "backend": "cpu", "floor_tg_tokens_per_s": "0.0", "floor_pp_tokens_per_s": "0.0", "model": str(model),
        "model_file_bytes": str(model.stat().st_size), "model_tensor_bytes": str(tensor_bytes), "model_sha256": "x",
        "build_commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f"})
    (logs / "speed.log").write_text("")
    lane = _tests("CPU", 5000.0, 300.0, tensor_bytes, str(model))
    for t in lane:
        t.update(lane_changes)
    (logs / "speed.lane.json").write_text(json.dumps(lane))
    (logs / "speed.lane.log").write_text("")
    return logs


def test_speed_binds_the_bench_to_the_runs_model_and_the_pinned_build(tmp_path):
    model = _gguf(tmp_path / "tiny.gguf", ("token_embd.weight", "output.weight"))
    counts, _, problems, _ = speed.evaluate(_bound_run(tmp_path / "honest", model))
    assert problems == [], problems
    assert counts["model_bytes"] == 2 * 100 * 64 * 2
    # Issue 23 class 9: a bench JSON of another model and another build.
    problems = speed.evaluate(_bound_run(tmp_path / "lie", model, model_size=123, build_commit="deadbee",
                                         model_filename="/tmp/other.gguf"))[2]
    text = "; ".join(problems)
    assert "model_filename '/tmp/other.gguf' is not the run's model" in text
    assert f"model_size 123 is not the {2 * 100 * 64 * 2} B of tensors" in text
    assert "build_commit 'deadbee' is not the pinned upstream commit 0c1e57098bba" in text
    # A prefix shorter than a short hash binds nothing.
    problems = speed.evaluate(_bound_run(tmp_path / "short", model, build_commit="0c"))[2]
    assert any("build_commit '0c' is not the pinned" in p for p in problems), problems


def test_speed_without_tensor_bytes_holds_model_size_to_the_file(tmp_path):
    model = _gguf(tmp_path / "tiny.gguf", ("token_embd.weight",))
    logs = _bound_run(tmp_path / "a", model)
    config = log_blocks.step_config(logs, "speed")
    del config["model_tensor_bytes"]
    log_blocks.write_config(log_blocks.config_path(logs, "speed"), config)
    assert speed.evaluate(logs)[2] == []
    lane = json.loads((logs / "speed.lane.json").read_text())
    for t in lane:
        t["model_size"] = model.stat().st_size + 1  # more than the file holds
    (logs / "speed.lane.json").write_text(json.dumps(lane))
    assert any("does not fit the" in p for p in speed.evaluate(logs)[2])


def test_lane_and_upstream_benches_must_agree_on_the_model(tmp_path):
    model = _gguf(tmp_path / "tiny.gguf", ("token_embd.weight",))
    logs = _bound_run(tmp_path / "a", model)
    _upstream_pairs(logs, [1.0, 1.0, 1.0])
    assert speed.evaluate(logs)[2] == []
    up = json.loads((logs / "speed.upstream.2.json").read_text())
    for t in up:
        t.update(model_filename="/tmp/small.gguf", model_size=123)
    (logs / "speed.upstream.2.json").write_text(json.dumps(up))
    problems = speed.evaluate(logs)[2]
    assert any("upstream.2 bench: test n_prompt=512 n_gen=0: model_filename '/tmp/small.gguf'" in p for p in problems), problems
    assert any("the compared benches ran different models" in p and "upstream.2" in p for p in problems), problems
    # Older runs (no model in the configuration) still hold compared benches to one model.
    log_blocks.config_path(logs, "speed").unlink()
    (logs / "speed.log").write_text("# lanes-config backend=cpu\n")
    problems = speed.evaluate(logs)[2]
    assert [p for p in problems if "ran different models" in p], problems


def test_membw_statistic_is_the_probes_own_and_unknown_ones_are_refused():
    text = {"bytes_moved": 1e9, "samples_ms": [1.0, 2.0, 4.0]}
    assert speed_bench.parse_membw(json.dumps(text)) == pytest.approx(500.0)  # median_high: 2 ms
    assert speed_bench.parse_membw(json.dumps({**text, "statistic": "fastest"})) == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="unknown statistic"):
        speed_bench.parse_membw(json.dumps({**text, "statistic": "best-ever"}))


# The CPU roofline model (//tools/model:cpu_roofline_f16): 4 layers of n_embd 2048 / n_ff 5632 in
# F16, separate token_embd and output (32000 x 2048 each), F32 norms. Its tensors, each once:
ROOFLINE_TENSOR_BYTES = 2 * 32000 * 2048 * 2 + 4 * (4 * 2048 * 2048 * 2 + 3 * 2048 * 5632 * 2 + 2 * 2048 * 4) + 2048 * 4
EMBEDDING_BYTES = 32000 * 2048 * 2


def _roofline_log(logs: pathlib.Path, buffer_lines: str, tensor_bytes: int | None, tg: float, gbs: float) -> pathlib.Path:
    logs.mkdir(parents=True, exist_ok=True)
    config = ("# lanes-config backend=cpu\n# lanes-config floor_tg_tokens_per_s=0.0\n# lanes-config floor_pp_tokens_per_s=0.0\n"
              f"# lanes-config roofline_rows_only_bytes={EMBEDDING_BYTES}\n")
    if tensor_bytes is not None:
        config += f"# lanes-config roofline_tensor_bytes={tensor_bytes}\n"
    (logs / "speed.log").write_text(config)
    (logs / "speed.lane.json").write_text((TESTDATA / "llama_bench_cpu.json").read_text())
    (logs / "speed.roofline_lane.json").write_text(json.dumps(_tests("CPU", None, tg, 673263904)))
    (logs / "speed.roofline_lane.log").write_text(buffer_lines)
    (logs / "speed.membw.json").write_text(json.dumps(
        {"device": "host memory (read)", "threads": 2, "bytes_moved": int(gbs * 1e8), "statistic": "fastest",
         "samples_ms": [100.0]}))
    return logs


# What llama-bench -v printed on the Intel Xeon (sapphirerapids) host: the mapping spans token_embd
# and the layers; the AMX buffer holds copies of the layers' matrices and of output.weight.
AMX_HOST_LINES = ("load_tensors:   CPU_Mapped model buffer size =   517.07 MiB\n"
                  "load_tensors:          AMX model buffer size =   517.00 MiB\n")
ZEN4_LINES = "load_tensors:   CPU_Mapped model buffer size =   642.07 MiB\n"


def test_cpu_roofline_counts_an_amx_copy_and_the_mapping_it_was_made_from_once(tmp_path):
    counts, m, problems, summary = speed.evaluate(_roofline_log(tmp_path, AMX_HOST_LINES, ROOFLINE_TENSOR_BYTES, 30.0, 20.7))
    assert problems == [], problems
    # Each weight once (673259520 B of tensors) less the row-gathered embedding; the run
    # counted 953228984 B (both buffers), 1.76x this.
    assert counts["roofline_host_weight_bytes"] == ROOFLINE_TENSOR_BYTES - EMBEDDING_BYTES == 542187520
    assert m["tg_roofline_fraction"] == pytest.approx(30.0 * 542187520 / 20.7e9)
    assert "AMX 542113792 B copied out of the mapping" in summary and "mapped span not counted" in summary


def test_cpu_roofline_on_zen4_is_the_model_less_the_embedding(tmp_path):
    counts, _, problems, _ = speed.evaluate(_roofline_log(tmp_path / "a", ZEN4_LINES, ROOFLINE_TENSOR_BYTES, 72.6, 41.0))
    assert problems == [], problems
    assert counts["roofline_host_weight_bytes"] == ROOFLINE_TENSOR_BYTES - EMBEDDING_BYTES == 542187520
    # A run that logged no tensor bytes (runner 0.2.0) is counted from its mapping.
    counts, _, problems, _ = speed.evaluate(_roofline_log(tmp_path / "b", ZEN4_LINES, None, 72.6, 41.0))
    assert problems == [], problems
    assert counts["roofline_host_weight_bytes"] == round(642.07 * 2**20) - EMBEDDING_BYTES == 542187192


def test_cpu_roofline_refuses_buffers_too_small_for_the_model(tmp_path):
    small = "load_tensors:   CPU_Mapped model buffer size =   320.00 MiB\n"  # a log that understates the bytes
    problems = speed.evaluate(_roofline_log(tmp_path, small, ROOFLINE_TENSOR_BYTES, 72.6, 41.0))[2]
    assert any("cannot hold the model's 673259520 B" in p for p in problems), problems


def test_cpu_roofline_refuses_extra_buffers_it_cannot_count_once(tmp_path):
    # An extra buffer without the model's tensor bytes: which bytes are read once is unknowable.
    problems = speed.evaluate(_roofline_log(tmp_path / "a", AMX_HOST_LINES, None, 30.0, 20.7))[2]
    assert any("no roofline_tensor_bytes" in p for p in problems), problems
    # Extra buffers larger than the model's tensors: a tensor counted twice.
    twice = AMX_HOST_LINES + "load_tensors:   CPU_REPACK model buffer size =   400.00 MiB\n"
    problems = speed.evaluate(_roofline_log(tmp_path / "b", twice, ROOFLINE_TENSOR_BYTES, 30.0, 20.7))[2]
    assert any("a tensor counted twice" in p for p in problems), problems
    # The host figures with the bytes counted once still exceed that host's probe figure.
    problems = speed.evaluate(_roofline_log(tmp_path / "c", AMX_HOST_LINES, ROOFLINE_TENSOR_BYTES, 41.46, 20.7))[2]
    assert any("1.09 of the roofline" in p for p in problems), problems


def test_bandwidth_probe_runs_before_and_after_the_bench_pool_their_samples():
    before = json.dumps({"bytes_moved": 1000000000, "statistic": "fastest", "samples_ms": [40.0, 35.0]})
    after = json.dumps({"bytes_moved": 1000000000, "statistic": "fastest", "samples_ms": [25.0, 30.0]})
    assert speed_bench.parse_membw(before + "\n" + after + "\n") == pytest.approx(40.0)  # 1 GB in the fastest 25 ms
    mixed = json.dumps({"bytes_moved": 2000000000, "statistic": "fastest", "samples_ms": [25.0]})
    with pytest.raises(ValueError, match="different byte counts"):
        speed_bench.parse_membw(before + "\n" + mixed)
    with pytest.raises(ValueError, match="no probe output"):
        speed_bench.parse_membw("\n")


def _cpu_speed_run(tmp_path: pathlib.Path, model: pathlib.Path, upstream: bool):
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import load_lane
    from tools.runner.steps import Step
    from tools.runner.testing import fake_lane

    named = model if model.suffix == ".gguf" and model.read_bytes()[:4] == b"GGUF" else None
    lane = _fake_bench(tmp_path / "lane", "CPU", 5000.0, 300.0, 16.0, "", model=named)
    up = _fake_bench(tmp_path / "upstream", "CPU", 4000.0, 250.0, 16.0, "", model=named, build_commit="unknown")
    logs = tmp_path / "logs"
    logs.mkdir()
    cfg = fake_lane.config(tmp_path, lane, None, model, upstream_dir=up if upstream else None)
    ctx = RunContext(config=cfg, lane=load_lane(fake_lane.SPEC, "cpu"), logs_dir=logs, scratch_dir=tmp_path,
                     evidence=_evidence())
    step = Step("speed", logs, ctx.tracker)
    status, message = speed.run_speed(ctx, step)
    step.finish(status, message)
    return status, message, logs


def test_run_speed_alternates_lane_and_upstream_benches(tmp_path):
    model = _gguf(tmp_path / "tiny.gguf", ("token_embd.weight",))
    status, message, logs = _cpu_speed_run(tmp_path, model, upstream=True)
    assert status == speed.CR.PASS, message
    order = [line.split("(stdout: ")[1].split(",")[0] for line in (logs / "speed.log").read_text().splitlines()
             if line.startswith("$ ")]
    assert order == ["speed.lane.json", "speed.upstream.json", "speed.lane.2.json", "speed.upstream.2.json",
                     "speed.lane.3.json", "speed.upstream.3.json"]
    assert "median of 3 alternating pairs): pp x1.25, tg x1.20" in message
    assert log_blocks.step_config(logs, "speed")["upstream_pairs"] == "3"


def test_run_speed_refuses_a_model_it_cannot_read(tmp_path):
    model = tmp_path / "tiny.gguf"
    model.write_text("not a gguf")
    status, message, _ = _cpu_speed_run(tmp_path, model, upstream=False)
    assert status == speed.CR.FAIL and "cannot read its tensors" in message and "the bench cannot be bound" in message
