"""A new backend is one entry in tools/runner/backends.py: preflight, speed and cleanup read it
from the table alone (compat: tools/compat/route_backend_test.py) (a synthetic backend, added here, is picked up by each of them)."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import backends
from tools.runner.checks import cleanup, preflight_devices, speed_bench
from tools.runner.context import RunContext
from tools.runner.lane_spec import load_lane
from tools.runner.testing import fake_lane

SYNTH = backends.Backend(name="synth", ggml_device="SYN0", bench_backend="Synth", device_buffer=r"SYN\d+",
                         device_probe="vulkan", bandwidth_probe="cuda_membw", rpc_device="SYN0")


@pytest.fixture
def synth(monkeypatch):
    monkeypatch.setattr(backends, "TABLE", [*backends.TABLE, SYNTH])  # the one entry
    monkeypatch.setitem(backends.MEMORY_PROBES, "SynthVendor", ["true"])
    return SYNTH


def _ctx(tmp_path, vendor: str = "SynthVendor") -> RunContext:
    lane = dataclasses.replace(load_lane(fake_lane.SPEC, "cuda"), backend="synth")
    cfg = fake_lane.config(tmp_path, tmp_path, None, None, lane="cuda")
    ctx = RunContext(config=cfg, lane=lane, logs_dir=tmp_path, scratch_dir=tmp_path)
    ctx.device.CopyFrom(rpb.DeviceClass(backend="synth", vendor=vendor))
    return ctx


def test_the_table_names_every_backend_once():
    names = [b.name for b in backends.TABLE]
    assert len(names) == len(set(names)) and {"cpu", "cuda", "vulkan"} <= set(names)
    with pytest.raises(backends.UnknownBackendError, match="'synth' is not in"):
        backends.get("synth")


def test_preflight_and_fixture_parity_take_the_device_from_the_table(synth, tmp_path):
    assert preflight_devices.BACKEND_CHECKS[backends.get("synth").device_probe] is preflight_devices.check_vulkan
    assert _ctx(tmp_path).backend0 == "SYN0"  # test-backend-ops -b


def test_speed_takes_the_bench_name_and_device_buffers_from_the_table(synth):
    bench = [{"backends": "Synth", "gpu_info": "synthetic gpu", "n_gpu_layers": 99, "n_prompt": 512, "n_gen": 0}]
    assert speed_bench.backend_problems(bench, "synth", offload=True) == []
    wrong = [dict(bench[0], backends="CUDA")]
    assert any("does not name Synth" in p for p in speed_bench.backend_problems(wrong, "synth", offload=True))
    log = ("load_tensors:         SYN0 model buffer size =     2.00 MiB\n"
           "load_tensors:          CPU model buffer size =     1.00 MiB\n")
    device, host, _ = speed_bench.device_weight_bytes(log, "synth")
    assert (device, host) == (2 * 1024 * 1024, 1024 * 1024)


def test_cleanup_measures_memory_with_the_vendors_probe(synth, tmp_path):
    assert cleanup._gpu(_ctx(tmp_path))  # MEMORY_PROBES["SynthVendor"] = ["true"], on PATH
    assert not cleanup._gpu(_ctx(tmp_path, vendor="NoProbeVendor"))


def test_two_entries_of_one_backend_are_refused(monkeypatch):
    monkeypatch.setattr(backends, "TABLE", [*backends.TABLE, dataclasses.replace(backends.get("cuda"), ggml_device="CUDA1")])
    with pytest.raises(backends.AmbiguousBackendError, match="'cuda' has 2 entries"):
        backends.get("cuda")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
