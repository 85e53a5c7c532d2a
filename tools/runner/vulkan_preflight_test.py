"""Vulkan preflight: the loader's device list (vulkan_probe.py output), software ICDs refused."""

from __future__ import annotations

import pathlib

import pytest

from tools.runner.checks import preflight_devices
from tools.runner.lane_spec import Lane

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _devices(name: str) -> list[dict[str, str]]:
    return preflight_devices.parse_vulkaninfo_summary((TESTDATA / name).read_text())


def _lane() -> Lane:
    return Lane(lane_id="linux-x86_64-vulkan", alias="vulkan", os="linux", arch="x86_64", backend="vulkan",
                sdk="vulkan", targets=("llama-completion",), log_evidence=(), ggml_libs=("ggml-vulkan",))


def test_probe_output_of_lavapipe_parses():
    # Captured here: the pinned loader with Mesa's lavapipe ICD (tools/runner/probes/vulkan_probe.py).
    (dev,) = _devices("vulkan_probe_lavapipe.txt")
    assert dev["deviceType"] == "PHYSICAL_DEVICE_TYPE_CPU"
    assert dev["driverName"] == "llvmpipe"
    assert preflight_devices.is_software_vulkan(dev)


def test_software_icd_refused_without_the_flag():
    with pytest.raises(preflight_devices.Unavailable, match="only software devices.*llvmpipe.*--allow_software_icd"):
        preflight_devices.choose_vulkan_device(_devices("vulkan_probe_lavapipe.txt"), 0, allow_software=False)


def test_software_icd_taken_with_the_flag():
    index, dev = preflight_devices.choose_vulkan_device(_devices("vulkan_probe_lavapipe.txt"), 0, allow_software=True)
    assert index == 0 and dev["driverName"] == "llvmpipe"


def test_hardware_device_chosen_past_a_software_one():
    index, dev = preflight_devices.choose_vulkan_device(_devices("vulkan_probe_two_devices.txt"), 0, allow_software=False)
    assert index == 1  # the loader's index, which GGML_VK_VISIBLE_DEVICES takes
    dc = preflight_devices.vulkan_device_class(dev, _lane())
    assert (dc.vendor, dc.device_name, dc.compute_capability) == ("NVIDIA", "NVIDIA H200", "discrete-gpu")
    assert (dc.driver_version, dc.driver_major) == ("NVIDIA 580.00.00", "580")
    assert dc.runtime_version == "Vulkan 1.4.312"


def test_second_hardware_device_absent_is_unavailable():
    with pytest.raises(preflight_devices.Unavailable, match="no hardware Vulkan device #1.*NVIDIA H200"):
        preflight_devices.choose_vulkan_device(_devices("vulkan_probe_two_devices.txt"), 1, allow_software=False)


@pytest.mark.parametrize("name,driver", [("SwiftShader Device (Subzero)", "SwiftShader driver"),
                                         ("llvmpipe (LLVM 17)", "llvmpipe"), ("lavapipe", "Mesa")])
def test_software_names(name, driver):
    assert preflight_devices.is_software_vulkan({"deviceName": name, "driverName": driver,
                                         "deviceType": "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU"})


def test_empty_probe_output_has_no_devices():
    assert preflight_devices.parse_vulkaninfo_summary("loader = x\ndevices = 0\n") == []
    with pytest.raises(preflight_devices.Unavailable, match="no hardware Vulkan device #0.*none"):
        preflight_devices.choose_vulkan_device([], 0, allow_software=False)


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
