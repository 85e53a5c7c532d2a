"""Multi-GPU device classes (issue 29), over recorded nvidia-smi output and a fake nvidia-smi on PATH:
the topology matrix parsed strictly, the device class a two-GPU host gives, a one-GPU host refusing
a two-GPU certification, the split flags the lane's commands get, and the one-GPU class unchanged."""

from __future__ import annotations

import os
import pathlib

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import gpu_set
from tools.runner.checks import preflight_devices
from tools.runner.context import RunContext
from tools.runner.lane_spec import Lane
from tools.runner.steps import Step
from tools.runner.testing import fake_lane

CR = rpb.CheckResult
TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"
QUERY_1 = (TESTDATA / "nvidia_smi_query_h200.txt").read_text()
QUERY_2 = (TESTDATA / "nvidia_smi_query_h200x2.txt").read_text()
TOPO_2 = (TESTDATA / "nvidia_smi_topo_h200x2.txt").read_text()
TOPO_4 = (TESTDATA / "nvidia_smi_topo_pcie4.txt").read_text()
ONE_GPU_TOPO = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-47\t0\t\tN/A\n\nLegend:\n"


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """Installs a fake nvidia-smi answering as the given host; returns the installer."""
    monkeypatch.setenv("LANES_RUNNER_LOCK_DIR", str(tmp_path / "locks"))

    def install(query: str, topo: str = "") -> pathlib.Path:
        bin_dir = fake_lane.install_fake_nvidia_smi(tmp_path / "fakebin", query, topo)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        return bin_dir
    return install


def _cuda_ctx(tmp_path: pathlib.Path, **kw) -> tuple[RunContext, Step]:
    lane_dir = fake_lane.make_cuda_lane(tmp_path / "cudalane")
    cfg = fake_lane.config(tmp_path, lane_dir, None, None, lane="cuda", **kw)
    lane = Lane("linux-x86_64-cuda", "cuda", "linux", "x86_64", "cuda", "cuda", ("llama-completion",), (), ())
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=scratch)
    return ctx, Step("preflight", logs, ctx.tracker)


# --- nvidia-smi topo -m -------------------------------------------------------------------------

def test_topology_of_two_h200s():
    links = gpu_set.parse_topology(TOPO_2)
    assert links == {(0, 1): "NV18", (1, 0): "NV18"}  # the NIC rows and columns are not GPUs


def test_topology_of_four_gpus_and_weakest_link():
    links = gpu_set.parse_topology(TOPO_4)
    assert links[(0, 1)] == "NV12" and links[(2, 3)] == "PHB" and links[(0, 3)] == "SYS"
    assert gpu_set.weakest_link(["NV18", "NV4", "PIX"]) == "PIX"
    assert gpu_set.weakest_link(["NV18", "NV4"]) == "NV4"
    assert gpu_set.weakest_link(["PXB", "SYS", "NODE", "PHB"]) == "SYS"


def test_topology_colour_escapes_are_read():
    coloured = TOPO_2.replace("GPU0\tGPU1", "\x1b[4mGPU0\tGPU1\x1b[0m", 1)
    assert gpu_set.parse_topology(coloured)[(0, 1)] == "NV18"


@pytest.mark.parametrize("mutate,why", [
    (lambda t: t.replace("NV18", "NV99X", 1), "not one of X, NV<n>"),
    (lambda t: t.replace("GPU1\tNV18\t X", "GPU1\tPIX\t X", 1), "not symmetric"),
    (lambda t: t.replace("GPU0\t X \tNV18", "GPU0\tNV18\tNV18", 1), "X belongs on the diagonal"),
    (lambda t: t.replace("\nGPU1\t", "\nGPU7\t", 1), "where GPU1 was expected"),
    (lambda t: t.replace("\nGPU1\tNV18\t X \tSYS\tPIX\t0-47,96-143\t0\t\tN/A", "", 1), "1 GPU rows for 2"),
    (lambda t: t.replace("\tGPU0\tGPU1", "\tGPU1\tGPU0", 1), "expected GPU0"),
    (lambda t: t.replace("GPU0\t X \tNV18\tPIX\tSYS\t0-47,96-143\t0\t\tN/A", "GPU0\t X", 1),
     "fewer than its 2 GPU columns"),
    (lambda t: t.replace("GPU0\t X \tNV18\tPIX", "GPU0\t X \tPIX", 1), "not symmetric"),
    (lambda t: "No devices were found\n", "names no GPU column"),
    (lambda t: "", "printed nothing"),
    (lambda t: t.replace("NV18", "NV\x0818", 1), "control character"),
    (lambda t: t + "x" * gpu_set.TOPO_MAX_BYTES, "refused"),
])
def test_topology_fails_closed(mutate, why):
    with pytest.raises(gpu_set.TopologyError, match=why):
        gpu_set.parse_topology(mutate(TOPO_2))


def test_topology_with_too_many_gpus_refused():
    n = gpu_set.MAX_GPUS + 1
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\n"
    with pytest.raises(gpu_set.TopologyError, match="more than 64"):
        gpu_set.parse_topology(header)


# --- the device class ---------------------------------------------------------------------------

def test_two_gpu_host_device_class(tmp_path, fake_host):
    fake_host(QUERY_2, TOPO_2)
    ctx, step = _cuda_ctx(tmp_path, gpus=2, split_mode="layer", tensor_split="1,1")
    dc = preflight_devices.check_cuda(ctx, step)
    assert (dc.device_name, dc.compute_capability, dc.driver_major) == ("NVIDIA H200", "9.0", "580")
    gs = dc.gpu_set
    assert gs.count == 2 and gs.interconnect == "NV18"
    assert [(g.index, g.name, g.compute_capability, g.driver_version) for g in gs.gpus] == [
        (0, "NVIDIA H200", "9.0", "580.159.04"), (1, "NVIDIA H200", "9.0", "580.159.04")]
    assert [(link.a, link.b, link.link) for link in gs.links] == [(0, 1, "NV18")]
    # tools/certify's record names make it "cuda-2x-nvidia-h200-9.0-580-nv18" (records_test).
    assert gpu_set.slug_parts(dc) == ["cuda", "2x", "NVIDIA H200", "9.0", "580", "NV18"]
    assert step.result.metrics["gpu_count"] == 2


def test_the_gpu_set_is_re_derived_from_the_preflight_log(tmp_path, fake_host):
    from tools.runner.checks import preflight
    fake_host(QUERY_2, TOPO_2)
    ctx, step = _cuda_ctx(tmp_path, gpus=2)
    dc = preflight_devices.check_cuda(ctx, step)
    step.log(f"device class: {dc}".replace("\n", " "))
    step.finish(CR.PASS, "")
    assert preflight.gpu_set_problems(ctx.logs_dir, dc) == []
    forged = rpb.DeviceClass()
    forged.CopyFrom(dc)
    forged.gpu_set.interconnect = "NV4"  # a class that claims other links than the host printed
    assert "is not what nvidia-smi printed" in preflight.gpu_set_problems(ctx.logs_dir, forged)[0]


def test_one_gpu_class_is_unchanged_on_a_two_gpu_host(tmp_path, fake_host):
    fake_host(QUERY_2, TOPO_2)
    ctx, step = _cuda_ctx(tmp_path)
    dc = preflight_devices.check_cuda(ctx, step)
    assert not dc.HasField("gpu_set")
    assert gpu_set.slug_parts(dc) is None and gpu_set.key(dc) == ()


def test_row_split_on_a_backend_without_split_buffers_fails(tmp_path, fake_host):
    fake_host(QUERY_2, TOPO_2)
    ctx, step = _cuda_ctx(tmp_path, gpus=2, split_mode="row")
    lib = ctx.config.lane_dir / "lib" / "libggml-cuda.so.0"
    lib.write_bytes(b"\x7fELF ... ggml_backend_comm_init ... ggml_backend_get_features")
    with pytest.raises(preflight_devices.Failed, match="offers no split buffer type"):
        preflight_devices.check_cuda(ctx, step)
    lib.write_bytes(b"\x7fELF ... " + b"x" * (1 << 20) + b"ggml_backend_split_buffer_type\0")  # across a chunk edge
    assert preflight_devices.check_cuda(ctx, Step("preflight2", ctx.logs_dir, ctx.tracker)).gpu_set.count == 2
    ctx, step = _cuda_ctx(tmp_path / "layer", gpus=2, split_mode="layer")  # layer split needs no split buffers
    assert preflight_devices.check_cuda(ctx, step).gpu_set.count == 2


def test_unreadable_topology_refuses_the_multi_gpu_run(tmp_path, fake_host):
    fake_host(QUERY_2, TOPO_2.replace("NV18", "NVLINK", 2))
    ctx, step = _cuda_ctx(tmp_path, gpus=2)
    with pytest.raises(preflight_devices.Unavailable, match="cannot read how this host links its GPUs"):
        preflight_devices.check_cuda(ctx, step)


def test_absent_topology_refuses_the_multi_gpu_run(tmp_path, fake_host):
    fake_host(QUERY_2, "")
    ctx, step = _cuda_ctx(tmp_path, gpus=2)
    with pytest.raises(preflight_devices.Unavailable, match="nvidia-smi topo -m` exited"):
        preflight_devices.check_cuda(ctx, step)


@pytest.mark.parametrize("kw,why", [
    ({"gpus": 2, "split_mode": "tensor"}, "one of layer, row"),
    ({"gpus": 2, "tensor_split": "1,1,1"}, "3 weights for --gpus=2"),
    ({"gpus": 2, "tensor_split": "1,-1"}, "non-negative decimal weights"),
    ({"gpus": 1, "split_mode": "row"}, "needs --gpus >= 2"),
    ({"gpus": 1, "tensor_split": "1,1"}, "splits over 2 devices, the run has --gpus=1"),
    ({"gpus": 0}, "at least one GPU"),
])
def test_inconsistent_split_flags_fail(tmp_path, fake_host, kw, why):
    fake_host(QUERY_2, TOPO_2)
    ctx, step = _cuda_ctx(tmp_path, **kw)
    with pytest.raises(preflight_devices.Failed, match=why):
        preflight_devices.check_cuda(ctx, step)


# --- a one-GPU host refuses a two-GPU certification ---------------------------------------------

ONE_GPU_REFUSAL = ("this host has 1 GPU; the certification asks for 2 (--gpus=2, split mode layer): nvidia-smi "
                   "lists GPU0 NVIDIA H200; certify it on a host with 2 GPUs of one node (e.g. nvidia-h200-x2)")


def test_one_gpu_host_refuses_a_two_gpu_certification(tmp_path, fake_host):
    fake_host(QUERY_1, ONE_GPU_TOPO)
    lane_dir = fake_lane.make_cuda_lane(tmp_path / "cudalane")
    evidence = fake_lane.make_evidence(lane_dir, tmp_path / "cuda.evidence.pb", lane_id="linux-x86_64-cuda")
    model = fake_lane.make_gguf(tmp_path / "model.gguf")
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, lane="cuda",
                                                  cpu_lane_dir=lane_dir, gpus=2, split_mode="layer"))
    pre = next(c for c in report.checks if c.name == "preflight")
    print(pre.message)
    assert pre.status == CR.UNAVAILABLE
    assert pre.message == ONE_GPU_REFUSAL
    assert report.status == rpb.RunnerReport.UNAVAILABLE and not report.pass_recordable and code != 0
    assert all(c.status == CR.SKIPPED for c in report.checks if c.name != "preflight")


def test_two_gpu_host_refuses_a_four_gpu_certification(tmp_path, fake_host):
    fake_host(QUERY_2, TOPO_2)
    ctx, step = _cuda_ctx(tmp_path, gpus=4, split_mode="row")
    with pytest.raises(preflight_devices.Unavailable,
                       match=r"^this host has 2 GPUs; the certification asks for 4 \(--gpus=4, split mode row\)"):
        preflight_devices.check_cuda(ctx, step)


# --- what the lane's commands get ---------------------------------------------------------------

def test_split_flags_reach_the_lane_commands(tmp_path):
    ctx, _ = _cuda_ctx(tmp_path, gpus=2, split_mode="row", tensor_split="3,1")
    assert ctx.ngl == ["-ngl", "99", "-dev", "CUDA0,CUDA1", "-sm", "row", "-ts", "3,1"]
    assert ctx.split_args(bench=True) == ["-dev", "CUDA0/CUDA1", "-sm", "row", "-ts", "3/1"]
    from tools.runner.checks import corpus_parity, reference_parity, speed
    assert corpus_parity.perplexity_command(ctx, ctx.bin("llama-perplexity"), tmp_path / "b", True, False)[-7:] == [
        "-ngl", "99", "-dev", "CUDA0,CUDA1", "-sm", "row", "-ts", "3,1"][-7:]
    assert reference_parity.logits_command(ctx, ctx.bin("llama-logits"), tmp_path / "o", True)[-8:] == [
        "-ngl", "99", "-dev", "CUDA0,CUDA1", "-sm", "row", "-ts", "3,1"]
    assert speed.bench_command(ctx, ctx.config.lane_dir, True)[-8:] == [
        "-ngl", "99", "-dev", "CUDA0/CUDA1", "-sm", "row", "-ts", "3/1"]
    # The CPU lane's commands (the oracle) are never split.
    assert speed.bench_command(ctx, ctx.config.lane_dir, False)[-2:] == ["-ngl", "0"]


def test_one_gpu_commands_are_unchanged(tmp_path):
    ctx, _ = _cuda_ctx(tmp_path)
    assert ctx.ngl == ["-ngl", "99"]
    from tools.runner.checks import speed
    assert speed.bench_command(ctx, ctx.config.lane_dir, True)[-2:] == ["-ngl", "99"]


def test_layer_is_the_default_split_mode(tmp_path):
    ctx, _ = _cuda_ctx(tmp_path, gpus=2, gpu_index=2)
    assert ctx.split_args() == ["-dev", "CUDA2,CUDA3", "-sm", "layer"]


# --- parity: the split run against the CPU lane and against the same lane on one GPU -------------

def _parity_logs(tmp_path, lane, single):
    import numpy as np

    from tools.runner import log_blocks
    from tools.runner.checks import reference_parity as rp
    tol = {"tol_max_abs_delta_logit": 0.05, "tol_mean_kl": 1e-4, "tol_top1_agreement_decisive": 1.0,
           "tol_min_decisive_fraction": 0.5, "tie_margin": 0.1}
    config = {k: repr(v) for k, v in tol.items()} | {f"single_gpu.{k}": repr(v) for k, v in tol.items()}
    log_blocks.write_config(log_blocks.config_path(tmp_path, rp.STEP), config | {"prompt": "a prompt"})
    ref = np.random.default_rng(0).normal(0, 3, (20, 32))
    tokens = np.arange(20, dtype=np.int32)
    rp.save_logits(tmp_path / rp.LOGITS_FILE, {"tokens": tokens, "expected_tokens": tokens, "reference": ref,
                                               "cpu_lane": ref, "lane": ref + lane, "single_gpu": ref + single})
    return rp


def test_split_parity_passes_when_it_agrees_with_one_gpu(tmp_path):
    rp = _parity_logs(tmp_path, 1e-3, 2e-3)
    assert rp.problems(tmp_path) == []
    counts, metrics = rp.recompute(tmp_path)
    assert counts["single_gpu.n_tokens"] == 20 and metrics["single_gpu.max_abs_delta_logit"] < 2e-3


def test_split_parity_fails_when_the_split_changes_the_logits(tmp_path):
    rp = _parity_logs(tmp_path, 1e-3, 0.5)  # the one-GPU run differs from the split run by 0.5 per logit
    assert any(p.startswith("vs the same lane on one GPU: max |delta logit|") for p in rp.problems(tmp_path))


def test_split_run_compares_with_its_first_gpu_alone(tmp_path):
    from tools.runner.checks import reference_parity as rp
    ctx, _ = _cuda_ctx(tmp_path, gpus=2, split_mode="row", gpu_index=1)
    argv = rp.logits_command(ctx, ctx.bin("llama-logits"), tmp_path / "o", True, "auto", single_gpu=True)
    assert argv[-6:] == ["-ngl", "99", "-dev", "CUDA1", "-sm", "none"]


# --- the run lock covers every GPU of the split -------------------------------------------------

def test_a_run_on_the_second_gpu_refuses_the_split_run(tmp_path, fake_host, monkeypatch):
    from tools.runner import run_lock
    from tools.runner.checks import preflight
    monkeypatch.setattr(run_lock.RunLock, "start_watchdog", lambda self: None)
    fake_host(QUERY_2, TOPO_2)
    one, one_step = _cuda_ctx(tmp_path / "a", gpu_index=1)  # a one-GPU run on GPU 1
    preflight.check_leftovers(one, one_step)
    try:
        split, split_step = _cuda_ctx(tmp_path / "b", gpus=2)
        with pytest.raises(preflight_devices.Failed, match=r"another run is using device gpu1"):
            preflight.check_leftovers(split, split_step)
        split.tracker.release()
    finally:
        one.tracker.release()
    split, split_step = _cuda_ctx(tmp_path / "c", gpus=2)
    preflight.check_leftovers(split, split_step)  # both free now: the split run holds both
    assert [p.name for p, _ in split.tracker.device_flocks] == ["gpu1.lock.json"]
    later, later_step = _cuda_ctx(tmp_path / "d", gpu_index=1)
    monkeypatch.setattr(preflight.time, "monotonic", iter(range(0, 10**6, 20)).__next__)  # no 15 s wait
    with pytest.raises(preflight_devices.Failed, match=r"another run is using device gpu1"):
        preflight.check_leftovers(later, later_step)
    split.tracker.release()
    fd = run_lock.try_flock(run_lock.lock_path("cuda", 1))  # released with the run
    assert fd is not None
    run_lock.release_flock(run_lock.lock_path("cuda", 1), fd)


# --- cleanup: every GPU of the split back to its baseline ---------------------------------------

def _two_gpu_memory(used0: int, used1: int) -> str:
    return (f"NVIDIA H200, 9.0, 580.159.04, 143771 MiB, {used0} MiB\n"
            f"NVIDIA H200, 9.0, 580.159.04, 143771 MiB, {used1} MiB\n")


@pytest.mark.parametrize("after,verdict,named", [
    ((30, 40), CR.PASS, ""),
    ((30, 900), CR.FAIL, "after concurrency: GPU 1 device memory used 900 MiB > baseline 0 + 64 MiB"),
])
def test_cleanup_measures_every_gpu_of_the_split(tmp_path, fake_host, monkeypatch, after, verdict, named):
    from tools.runner.checks import cleanup
    monkeypatch.setattr(cleanup, "GRACE_S", 0.3)
    live = tmp_path / "memory_now.txt"
    bin_dir = fake_host(QUERY_2, TOPO_2)
    fake_lane.install_fake_nvidia_smi(bin_dir, QUERY_2, TOPO_2, memory_used_file=live)
    ctx, _ = _cuda_ctx(tmp_path, gpus=2)
    ctx.device.vendor = "NVIDIA"
    cleanup.after_step(ctx, "preflight", [])  # the baseline: 0 MiB on both GPUs
    proc = ctx.tracker.popen(["true"])
    proc.wait()
    live.write_text(_two_gpu_memory(*after))  # what the step left on each GPU (the baseline read 0 MiB)
    cleanup.after_step(ctx, "concurrency", [proc.pid])
    step = Step("cleanup", ctx.logs_dir, ctx.tracker)
    status, message = cleanup.run_cleanup(ctx, step)
    assert status == verdict, message
    assert named in message
    _, metrics = cleanup.recompute(ctx.logs_dir)
    assert metrics["gpu0.memory_before_mib"] == 0 and metrics["gpu1.memory_before_mib"] == 0
    assert metrics["step.concurrency.gpu1.memory_used_mib"] == after[1]
    assert metrics["memory_after_mib"] == after[0] and metrics["gpu1.memory_after_mib"] == after[1]


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
