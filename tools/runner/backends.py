"""The backend table: what the runner, compat and bench need to know about each ggml backend.

A new backend is one entry here (plus its lane in the spec): preflight picks its device probe,
fixture_parity and compat its ggml device name, speed its llama-bench name, device-buffer pattern
and bandwidth probe, cleanup its memory probe.
"""

from __future__ import annotations

import dataclasses

from tools.core.errors import LanesError

# The driver's own device query (name, compute capability, driver, memory): preflight logs it,
# cleanup measures device memory with it.
NVIDIA_QUERY = ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,memory.total,memory.used",
                "--format=csv,noheader"]
# Device-memory probes by device vendor: a Vulkan lane on an NVIDIA GPU is measured as a CUDA one.
MEMORY_PROBES: dict[str, list[str]] = {"NVIDIA": NVIDIA_QUERY}


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str              # the lane spec's `backend`
    ggml_device: str       # ggml's first device of the backend (test-backend-ops -b, llama-server --device)
    bench_backend: str     # what llama-bench's JSON `backends` field names
    device_buffer: str     # regex of the backend's device buffers in load_tensors lines ("" = none)
    device_probe: str      # preflight's device check (preflight_devices.BACKEND_CHECKS key; "" = the CPU only)
    bandwidth_probe: str   # the speed step's memory-bandwidth probe: "cpu_membw" or "cuda_membw"
    rpc_device: str        # the device an RPC server of this backend serves (compat routes)


TABLE: list[Backend] = [
    Backend("cpu", "CPU", "CPU", "", "", "cpu_membw", "CPU"),
    Backend("cuda", "CUDA0", "CUDA", r"CUDA\d+", "cuda", "cuda_membw", "CUDA0"),
    Backend("rocm", "ROCm0", "ROCm", r"ROCm\d+", "rocm", "", "ROCm0"),
    Backend("vulkan", "Vulkan0", "Vulkan", r"Vulkan\d+", "vulkan", "cuda_membw", "Vulkan0"),
    Backend("metal", "MTL0", "MTL", r"MTL\d+", "metal", "", "MTL0"),
]


class UnknownBackendError(LanesError, KeyError):
    code = "unknown-backend"


class AmbiguousBackendError(LanesError):
    code = "ambiguous-backend"


def get(name: str) -> Backend:
    """The one entry named `name`; two entries of one name are refused, never resolved by order."""
    matches = [b for b in TABLE if b.name == name]
    if len(matches) > 1:
        raise AmbiguousBackendError(f"backend {name!r} has {len(matches)} entries in tools/runner/backends.py; keep one")
    if matches:
        return matches[0]
    raise UnknownBackendError(f"backend {name!r} is not in tools/runner/backends.py; known: "
                              f"{', '.join(b.name for b in TABLE)}")


def memory_probe(vendor: str) -> list[str] | None:
    return MEMORY_PROBES.get(vendor)
