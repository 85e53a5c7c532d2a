"""compat reads a backend's RPC device from tools/runner/backends.py alone (a synthetic entry)."""

from __future__ import annotations

import pathlib
import sys

import pytest

from tools.compat import rpc_route
from tools.runner import backends

SYNTH = backends.Backend(name="synth", ggml_device="SYN0", bench_backend="Synth", device_buffer=r"SYN\d+",
                         device_probe="vulkan", bandwidth_probe="cuda_membw", rpc_device="SYN0")


@pytest.fixture
def synth(monkeypatch):
    monkeypatch.setattr(backends, "TABLE", [*backends.TABLE, SYNTH])
    return SYNTH


def test_compat_routes_to_the_tables_rpc_device(synth):
    lane = rpc_route.RouteLane(lane_id="linux-x86_64-synth", backend="synth", lane_dir=pathlib.Path("."),
                               evidence=pathlib.Path("e"))
    assert lane.server_device == "SYN0"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
