"""The one lane spec: every lane the design names, pinned build choices, honest availability."""

import json
import os
import pathlib
import sys

import pytest

LANES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes", "lanes")


@pytest.fixture(scope="module")
def spec():
    return json.loads((LANES / "spec.json").read_text())["lanes"]


@pytest.fixture(scope="module")
def availability():
    return json.loads((LANES / "availability.json").read_text())


def test_every_designed_lane_is_registered(spec):
    assert set(spec) >= {"linux-x86_64-cpu", "linux-x86_64-cuda", "linux-aarch64-cuda", "linux-x86_64-rocm",
                         "linux-x86_64-vulkan", "darwin-arm64-metal", "windows-x86_64-cuda",
                         "windows-x86_64-vulkan", "android-arm64-vulkan"}
    for lane_id, lane in spec.items():
        assert lane_id == f"{lane['os']}-{lane['arch']}-{lane['backend']}"


def test_cpu_lane_is_deterministic_and_relocatable(spec):
    cpu = spec["linux-x86_64-cpu"]
    assert cpu["ggml_cache_entries"]["GGML_NATIVE"] == "OFF"
    assert cpu["ggml_cache_entries"]["CMAKE_INSTALL_RPATH"] == "$ORIGIN"
    assert cpu["llama_cache_entries"]["CMAKE_INSTALL_RPATH"].startswith("$ORIGIN/../lib")
    assert {"llama-completion", "llama-simple", "llama-bench", "llama-server", "test-backend-ops"} <= set(cpu["targets"])


def test_gpu_lanes_pin_their_device_targets(spec):
    assert spec["linux-x86_64-cuda"]["ggml_cache_entries"]["CMAKE_CUDA_ARCHITECTURES"] == "90a"
    assert spec["linux-x86_64-rocm"]["ggml_cache_entries"]["GPU_TARGETS"]
    for lane in spec.values():
        if lane["backend"] != "cpu" and lane["alias"]:
            assert lane["log_evidence"], "accelerator lanes name the backend log lines the runner requires"


def test_unavailable_always_says_why(spec, availability):
    assert set(availability["lanes"]) == set(spec)
    for lane_id, avail in availability["lanes"].items():
        assert avail["status"] in {"AVAILABLE", "UNAVAILABLE"}
        if avail["status"] == "UNAVAILABLE":
            assert len(avail["reason"]) > 10, lane_id
    # Lanes for another OS or CPU are never available on this host.
    host = availability["host"]
    for lane_id, lane in spec.items():
        if lane["os"] != host["os"].split(" ")[0]:
            assert availability["lanes"][lane_id]["status"] == "UNAVAILABLE"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
