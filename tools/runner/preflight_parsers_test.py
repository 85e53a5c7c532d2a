"""Preflight's device probes' parsers (nvidia-smi, vulkaninfo, rocminfo, cpuinfo, ldd, ggml's CPU
variant load line), on captured samples (testdata/)."""

from __future__ import annotations

import pathlib
import sys

import pytest

from tools.runner.checks import preflight_devices

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _read(name: str) -> str:
    return (TESTDATA / name).read_text()


def test_nvidia_smi_h200():
    rows = preflight_devices.parse_nvidia_smi_query(_read("nvidia_smi_query_h200.txt"))
    assert rows == [{"name": "NVIDIA H200", "compute_cap": "9.0", "driver_version": "580.159.04",
                     "memory_total": "143771 MiB", "memory_used": "0 MiB"}]
    assert preflight_devices.parse_mib(rows[0]["memory_total"]) == 143771
    assert preflight_devices.parse_cuda_version(_read("nvidia_smi_h200.txt")) == "13.0"


def test_vulkaninfo_summary_and_rocminfo():
    text = ("Devices:\n========\nGPU0:\n\tapiVersion         = 1.3.255\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU\n"
            "\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)\n\tdriverName         = llvmpipe\n"
            "GPU1:\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\n\tdeviceName         = AMD Radeon PRO W7900\n")
    devices = preflight_devices.parse_vulkaninfo_summary(text)
    assert [d["deviceType"] for d in devices] == ["PHYSICAL_DEVICE_TYPE_CPU", "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU"]
    assert preflight_devices.parse_rocminfo_agents("  Name:                    gfx942\n  Name: AMD EPYC\n") == ["gfx942"]


def test_cpuinfo():
    info = preflight_devices.read_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fma avx2\n\nprocessor\t: 1\n")
    assert info["vendor_id"] == "GenuineIntel" and "avx2" in info["flags"].split()


def test_parse_ldd_marks_missing_libraries():
    from tools.runner.checks import preflight_devices
    text = ("\tlibcudart.so.13 => /usr/local/cuda/lib64/libcudart.so.13 (0x7f00)\n"
            "\tlibcublas.so.13 => not found\n\tlinux-vdso.so.1 (0x7ffd)\n")
    assert preflight_devices.parse_ldd(text) == {"libcudart.so.13": "/usr/local/cuda/lib64/libcudart.so.13",
                                         "libcublas.so.13": "not found"}


def test_cpu_variant_comes_from_ggmls_own_load_line():
    from tools.runner.checks import preflight_devices
    line = "load_backend: loaded CPU backend from /x/lanes/cpu/bin/libggml-cpu-zen4.so\n"
    assert preflight_devices.parse_cpu_variant("ggml_backend_load_best: search path /x\n" + line) == "zen4"
    assert preflight_devices.parse_cpu_variant("load_backend: loaded RPC backend from /x/libggml-rpc.so\n") is None
    with pytest.raises(ValueError, match="more than one CPU variant"):
        preflight_devices.parse_cpu_variant(line + line.replace("zen4", "haswell"))


def test_a_variant_the_spec_does_not_list_fails_preflight(tmp_path):
    from tools.runner.checks import preflight_devices
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    from tools.runner.steps import ProcessTracker, Step
    lane_dir = tmp_path / "lane"
    (lane_dir / "bin").mkdir(parents=True)
    exe = lane_dir / "bin" / "llama-bench"
    exe.write_text("#!/bin/sh\necho 'load_backend: loaded CPU backend from /l/bin/libggml-cpu-zen5.so' >&2\n")
    exe.chmod(0o755)
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), (), cpu_variants=("x64", "zen4"))
    cfg = RunnerConfig(lane="cpu", lane_dir=lane_dir, evidence=None, spec=tmp_path / "s", model=None,
                       out_dir=tmp_path, report=tmp_path / "r.pb")
    (tmp_path / "logs").mkdir()
    ctx = RunContext(config=cfg, lane=lane, logs_dir=tmp_path / "logs", scratch_dir=tmp_path / "s")
    step = Step("preflight", tmp_path / "logs", ProcessTracker())
    with pytest.raises(preflight_devices.Failed, match="'zen5', which the lane spec does not list"):
        preflight_devices.detect_cpu_variant(ctx, step)
    exe.write_text(exe.read_text().replace("zen5", "zen4"))
    assert preflight_devices.detect_cpu_variant(ctx, step, ZEN4_CPUINFO) == "zen4"
    # The same loader line on an Intel AMX host: ggml would have loaded sapphirerapids there, so the
    # line is another host's (a replay) and preflight refuses it.
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), (),
                cpu_variants=("x64", "zen4", "sapphirerapids"))
    ctx = RunContext(config=cfg, lane=lane, logs_dir=tmp_path / "logs", scratch_dir=tmp_path / "s")
    step = Step("preflight", tmp_path / "logs", ProcessTracker())
    with pytest.raises(preflight_devices.Failed, match="the pinned ggml chooses 'sapphirerapids'"):
        preflight_devices.detect_cpu_variant(ctx, step, ZEN4_CPUINFO.replace("flags\t:", "flags\t: amx_tile amx_int8"))


_AVX512 = "avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16"
ZEN4_CPUINFO = f"vendor_id\t: AuthenticAMD\nflags\t: fpu sse4_2 avx f16c fma avx2 bmi2 {_AVX512}\n"


def test_expected_variant_follows_ggml_scores():
    from tools.runner import host_cpu
    all_variants = tuple(host_cpu.VARIANT_FEATURES)
    zen4 = host_cpu.cpuinfo_flags(ZEN4_CPUINFO)
    assert host_cpu.expected_variant(all_variants, zen4) == "zen4"
    assert host_cpu.expected_variant(all_variants, zen4 | {"amx_int8", "amx_tile"}) == "sapphirerapids"
    assert host_cpu.expected_variant(all_variants, {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}) == "haswell"
    assert host_cpu.expected_variant(all_variants, {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni"}) == "alderlake"
    assert host_cpu.expected_variant(all_variants, set()) == "x64"
    assert host_cpu.expected_variant(("zen4",), set()) is None
    with pytest.raises(host_cpu.HostCpuError, match="not in the pinned tree's table"):
        host_cpu.expected_variant(("zen9",), zen4)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
