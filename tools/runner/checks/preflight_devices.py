"""Preflight's device probes, one per backend (tools/runner/backends.py names which: device_probe):
each returns the host's device class, or raises Unavailable (this host cannot run the lane) or
Failed (the lane's inputs are broken). Also the parsers of the tools' output they read.
"""

from __future__ import annotations

import os
import pathlib
import platform
import re
import shutil

from proto import runner_report_pb2 as rpb
from tools.runner import backends, exits, gpu_set, host_cpu
from tools.runner.context import RunContext
from tools.runner.steps import Step

# The x86-64-v3 baseline every x86_64 lane is built for (GGML_NATIVE=OFF; lanes.bzl _X86_64_V3).
X86_64_V3_FLAGS = ("avx2", "fma", "f16c", "bmi2")
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}
_SOFTWARE_ICDS = ("llvmpipe", "lavapipe", "swiftshader")


class Unavailable(Exception):
    """This host cannot run the lane."""


class Failed(Exception):
    """The lane's inputs are broken."""


def _norm_arch(arch: str) -> str:
    arch = arch.lower()
    return _ARCH_ALIASES.get(arch, arch)


def read_cpuinfo(text: str) -> dict[str, str]:
    """First processor block of /proc/cpuinfo as a dict."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _tool_output(step: Step, argv: list[str], timeout_s: float = 60) -> str:
    """Output of a host tool (nvidia-smi, vulkaninfo...); Unavailable if absent or failing."""
    if shutil.which(argv[0]) is None:
        raise Unavailable(f"{argv[0]} not found on PATH: this host has no {argv[0].split('-')[0]} driver/runtime tools")
    res = step.run(argv, timeout_s)
    if res.exit_code != 0:
        raise Unavailable(f"`{' '.join(argv)}` exited {exits.describe(res.exit_code)}: {res.output.strip()[-300:]}")
    return res.output


def check_cpu(ctx: RunContext, step: Step, cpuinfo_text: str | None = None) -> rpb.DeviceClass:
    lane = ctx.lane
    host_os, host_arch = platform.system().lower(), _norm_arch(platform.machine())
    if host_os != lane.os:
        raise Unavailable(f"lane {lane.lane_id} needs os {lane.os}; this host is {host_os}")
    if host_arch != _norm_arch(lane.arch):
        raise Unavailable(f"lane {lane.lane_id} needs arch {lane.arch}; this host is {host_arch}")
    dc = rpb.DeviceClass(backend="cpu", os=lane.os, arch=lane.arch)
    if cpuinfo_text is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo_text = f.read()
        except OSError:
            cpuinfo_text = ""
    info = read_cpuinfo(cpuinfo_text)
    dc.vendor = info.get("vendor_id", info.get("CPU implementer", ""))
    dc.device_name = info.get("model name", platform.processor())
    if host_arch == "x86_64" and lane.cpu_variants:
        # ggml picks the variant at run time (detect_cpu_variant); x64 runs on any x86_64 host.
        flags = set(info.get("flags", "").split())
        dc.compute_capability = "unknown-variant"
        dc.isa_features.extend(f for f in X86_ISA_FLAGS if f in flags)
    elif host_arch == "x86_64":
        flags = set(info.get("flags", "").split())
        missing = [f for f in X86_64_V3_FLAGS if f not in flags]
        if missing:
            raise Unavailable(f"CPU lacks {', '.join(missing)} needed by the x86-64-v3 baseline of {lane.lane_id}")
        dc.compute_capability = "x86-64-v3"
        dc.isa_features.extend(X86_64_V3_FLAGS)
    else:
        dc.compute_capability = host_arch
        feats = set(info.get("Features", "").split())
        dc.isa_features.extend(sorted(f for f in ("asimd", "fphp", "asimdhp", "dotprod", "sve") if f in feats))
    step.log(f"cpu: vendor={dc.vendor} model={dc.device_name} isa={','.join(dc.isa_features)}")
    return dc


# The x86 features ggml's CPU variants are built for (informational in the device class).
X86_ISA_FLAGS = ("sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                 "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8")
_CPU_VARIANT_LOADED = re.compile(r"load_backend: loaded CPU backend from (\S*?)libggml-cpu-([A-Za-z0-9_.]+)\.so\s*$",
                                 re.MULTILINE)


def parse_cpu_variant(text: str) -> str | None:
    """The CPU variant ggml loaded, from its own `load_backend: loaded CPU backend from
    .../libggml-cpu-<variant>.so` line; None if it printed none. Two different ones: ValueError."""
    found = {m.group(2) for m in _CPU_VARIANT_LOADED.finditer(text)}
    if len(found) > 1:
        raise ValueError(f"ggml loaded more than one CPU variant: {sorted(found)}")
    return found.pop() if found else None


def detect_cpu_variant(ctx: RunContext, step: Step, cpuinfo_text: str | None = None) -> str:
    """Runs a lane binary that loads ggml's backends and reads which CPU variant it chose."""
    # llama-bench prints ggml's own loader lines (llama-completion's logger hides them).
    res = step.run([ctx.bin("llama-bench"), "--list-devices"], 60)
    try:
        variant = parse_cpu_variant(res.output)
    except ValueError as err:
        raise Failed(str(err)) from err
    if variant is None:
        raise Failed("the lane loaded no CPU variant (no `load_backend: loaded CPU backend from "
                     "...libggml-cpu-<variant>.so` line from llama-bench --list-devices)")
    if variant not in ctx.lane.cpu_variants:
        raise Failed(f"ggml loaded CPU variant {variant!r}, which the lane spec does not list "
                     f"({', '.join(ctx.lane.cpu_variants)})")
    # The loader line is the lane's word: the host's own flags say which variant ggml must choose.
    if cpuinfo_text is None:
        cpuinfo_text = _read_cpuinfo()
    flags = host_cpu.cpuinfo_flags(cpuinfo_text)
    try:
        expected = host_cpu.expected_variant(ctx.lane.cpu_variants, flags)
    except host_cpu.HostCpuError as err:
        raise Failed(str(err)) from err
    step.config("host_cpu_flags", " ".join(sorted(flags)))
    step.config("expected_cpu_variant", expected or "")
    step.config("cpu_variant", f"{variant}")
    if variant != expected:
        lacking = host_cpu.missing_flags(variant, flags)
        why = f" (the host lacks {', '.join(lacking)})" if lacking else ""
        raise Failed(f"the lane says ggml loaded CPU variant {variant!r}{why}, but on this host's CPU flags "
                     f"(/proc/cpuinfo) the pinned ggml chooses {expected!r}: the loader line is not this host's")
    return variant


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read(4 << 20)
    except OSError:
        return ""


def parse_nvidia_smi_query(text: str) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,memory.used
    --format=csv,noheader`."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0]:
            continue
        rows.append(dict(zip(("name", "compute_cap", "driver_version", "memory_total", "memory_used"), parts)))
    return rows


def parse_mib(value: str) -> float:
    m = re.match(r"\s*([0-9.]+)\s*MiB", value)
    if not m:
        raise ValueError(f"not a MiB value: {value!r}")
    return float(m.group(1))


def parse_cuda_version(nvidia_smi_header: str) -> str:
    m = re.search(r"CUDA Version:\s*([0-9.]+)", nvidia_smi_header)
    return m.group(1) if m else ""


NVIDIA_QUERY = backends.NVIDIA_QUERY


def gpu_memory_used_mib(step: Step, index: int) -> float:
    rows = parse_nvidia_smi_query(_tool_output(step, NVIDIA_QUERY))
    return parse_mib(rows[index]["memory_used"])


def parse_ldd(text: str) -> dict[str, str]:
    """{soname: resolved path or "not found"} from `ldd` output."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"\s*(\S+) => (not found|\S+)", line)
        if match:
            found[match[1]] = match[2]
    return found


def cuda_runtime_libraries(step: Step, lib: pathlib.Path) -> dict[str, str]:
    """Which cudart/cuBLAS/driver the loader really resolves for the lane (recorded, not assumed)."""
    resolved = parse_ldd(_tool_output(step, ["ldd", str(lib)]))
    wanted = {k: v for k, v in resolved.items() if re.match(r"lib(cudart|cublas|cublasLt|cuda)\.so", k)}
    missing = sorted(k for k, v in wanted.items() if v == "not found")
    if missing:
        raise Failed(f"{lib.name} needs {', '.join(missing)}, which the loader cannot find on this host")
    return {k: os.path.realpath(v) for k, v in wanted.items()}


def split_problems(config) -> list[str]:
    """What is wrong with a run's --gpus / --split_mode / --tensor_split before any device is read."""
    gpus = getattr(config, "gpus", 1)
    mode, split = getattr(config, "split_mode", ""), getattr(config, "tensor_split", "")
    if gpus < 1:
        return [f"--gpus={gpus}: a run uses at least one GPU"]
    out = []
    if gpus == 1:
        if mode:
            out.append(f"--split_mode={mode} needs --gpus >= 2 (a one-GPU run splits nothing)")
        if split and len(split.split(",")) > 1:
            out.append(f"--tensor_split={split} splits over {len(split.split(','))} devices, the run has --gpus=1: "
                       f"pass --gpus={len(split.split(','))}")
        return out
    if mode and mode not in gpu_set.SPLIT_MODES:
        out.append(f"--split_mode={mode!r}: one of {', '.join(gpu_set.SPLIT_MODES)}")
    if split:
        weights = split.split(",")
        if len(weights) != gpus:
            out.append(f"--tensor_split={split} gives {len(weights)} weights for --gpus={gpus}")
        elif not all(re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,6})?", w) for w in weights) or not any(float(w) > 0 for w in weights):
            out.append(f"--tensor_split={split}: non-negative decimal weights, one per GPU, not all zero")
    return out


# What llama.cpp asks a backend's registry for to split rows over devices (llama-model.cpp
# make_gpu_buft_list); a backend that answers it holds the name as a string literal.
SPLIT_BUFFER_PROC = "ggml_backend_split_buffer_type"
_SPLIT_SCAN_MAX = 1 << 30


def offers_split_buffers(lib: pathlib.Path) -> bool:
    """Whether the backend library names SPLIT_BUFFER_PROC (read in chunks, at most 1 GiB)."""
    needle = SPLIT_BUFFER_PROC.encode()
    tail = b""
    read = 0
    with open(lib, "rb") as f:
        while read < _SPLIT_SCAN_MAX and (chunk := f.read(1 << 20)):
            read += len(chunk)
            if needle in tail + chunk:
                return True
            tail = chunk[-len(needle):]
    return False


def _gpus_label(rows: list[dict[str, str]]) -> str:
    return "; ".join(f"GPU{i} {r['name']}" for i, r in enumerate(rows[:MAX_LISTED])) + (" ..." if len(rows) > MAX_LISTED else "")


MAX_LISTED = 8


def check_cuda(ctx: RunContext, step: Step) -> rpb.DeviceClass:
    cfg = ctx.config
    want = getattr(cfg, "gpus", 1)
    if problems := split_problems(cfg):
        raise Failed("; ".join(problems))
    rows = parse_nvidia_smi_query(_tool_output(step, NVIDIA_QUERY))
    if not rows:
        raise Unavailable("nvidia-smi lists no GPU")
    if want >= 2 and cfg.gpu_index + want > len(rows):
        where = f" from GPU index {cfg.gpu_index}" if cfg.gpu_index else ""
        raise Unavailable(
            f"this host has {len(rows)} GPU{'s' if len(rows) != 1 else ''}; the certification asks for {want}{where} "
            f"(--gpus={want}, split mode {cfg.split_mode or 'layer'}): nvidia-smi lists {_gpus_label(rows)}; "
            f"certify it on a host with {want} GPUs of one node (e.g. nvidia-h200-x{want})")
    if cfg.gpu_index >= len(rows):
        raise Unavailable(f"GPU index {ctx.config.gpu_index} requested; nvidia-smi lists {len(rows)}")
    gpu = rows[ctx.config.gpu_index]
    gpus = None
    if want >= 2:
        indices = list(range(cfg.gpu_index, cfg.gpu_index + want))
        try:
            gpus = gpu_set.make_gpu_set(rows, indices, gpu_set.parse_topology(_tool_output(step, gpu_set.NVIDIA_TOPO)))
        except gpu_set.TopologyError as err:
            raise Unavailable(f"cannot read how this host links its GPUs: {err}") from err
        drivers = {g.driver_version for g in gpus.gpus}
        if len(drivers) != 1:
            raise Unavailable(f"the GPUs of the run report different drivers ({', '.join(sorted(drivers))})")
        step.log(f"gpu set: {want} GPUs ({', '.join(f'GPU{g.index} {g.name} {g.compute_capability}' for g in gpus.gpus)}), "
                 f"interconnect {gpus.interconnect} (links {', '.join(f'GPU{l.a}-GPU{l.b} {l.link}' for l in gpus.links)}); "
                 f"split mode {cfg.split_mode or 'layer'}, tensor split {cfg.tensor_split or '(by free memory)'}")
        step.config("gpus", f"{want}")
        step.config("split_mode", cfg.split_mode or "layer")
        step.config("tensor_split", cfg.tensor_split)
    lib = ctx.config.lane_dir / "lib" / "libggml-cuda.so.0"
    if not lib.is_file():
        raise Failed(f"missing artifact {lib}: not a CUDA lane build")
    if gpus is not None and (cfg.split_mode or "layer") == "row" and not offers_split_buffers(lib):
        raise Failed(f"--split_mode=row: the lane's {lib.name} offers no split buffer type (its backend registry "
                     f"names no {SPLIT_BUFFER_PROC!r}), so llama.cpp refuses row split on it (\"does not support split "
                     "buffers\"); certify --split_mode=layer, or a lane whose CUDA backend has split buffers")
    header = _tool_output(step, ["nvidia-smi"])
    loaded = cuda_runtime_libraries(step, lib)
    step.log("runtime libraries resolved for libggml-cuda.so.0: " + ", ".join(f"{k} -> {v}" for k, v in sorted(loaded.items())))
    # Host facts that used to sit in an undigested host.txt beside the run.
    step.log(f"python {platform.python_version()}; LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')}")
    toolkit = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "version.json"
    if toolkit.is_file():
        step.log(f"{toolkit}:\n{toolkit.read_text(errors='replace').rstrip()}")
    step.config("gpu_index", f"{ctx.config.gpu_index}")
    runtime = f"CUDA {parse_cuda_version(header)} (driver API); " + ", ".join(
        os.path.basename(v) for k, v in sorted(loaded.items()))
    dc = rpb.DeviceClass(
        backend="cuda", os=ctx.lane.os, arch=ctx.lane.arch, vendor="NVIDIA", device_name=gpu["name"],
        compute_capability=gpu["compute_cap"], driver_version=gpu["driver_version"],
        driver_major=gpu["driver_version"].split(".")[0], runtime_version=runtime,
    )
    if gpus is not None:
        dc.gpu_set.CopyFrom(gpus)
    step.result.metrics["gpu_count"] = len(rows)
    step.result.metrics["memory_total_mib"] = parse_mib(gpu["memory_total"])
    return dc


def parse_rocminfo_agents(text: str) -> list[str]:
    return re.findall(r"^\s*Name:\s*(gfx[0-9a-f]+)\s*$", text, flags=re.MULTILINE)


def check_rocm(ctx: RunContext, step: Step) -> rpb.DeviceClass:
    agents = parse_rocminfo_agents(_tool_output(step, ["rocminfo"]))
    if not agents:
        raise Unavailable("rocminfo lists no gfx* GPU agent")
    if shutil.which("hipcc") is None:
        raise Unavailable("hipcc not found on PATH: ROCm runtime incomplete")
    lib = ctx.config.lane_dir / "lib" / "libggml-hip.so.0"
    if not lib.is_file():
        raise Failed(f"missing artifact {lib}: not a ROCm lane build")
    return rpb.DeviceClass(backend="rocm", os=ctx.lane.os, arch=ctx.lane.arch, vendor="AMD",
                           device_name=agents[0], compute_capability=agents[0])


VULKAN_PROBE = pathlib.Path(__file__).resolve().parents[1] / "probes" / "vulkan_probe.py"
# PCI vendor ids the probe prints (VkPhysicalDeviceProperties.vendorID).
_VULKAN_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel", "0x13b5": "ARM", "0x5143": "Qualcomm",
                   "0x106b": "Apple", "0x10005": "Mesa"}
_DEVICE_TYPE_SHORT = {"PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": "discrete-gpu", "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": "integrated-gpu",
                      "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": "virtual-gpu", "PHYSICAL_DEVICE_TYPE_CPU": "cpu",
                      "PHYSICAL_DEVICE_TYPE_OTHER": "other"}


def parse_vulkaninfo_summary(text: str) -> list[dict[str, str]]:
    """Devices of `vulkaninfo --summary` or of tools/runner/probes/vulkan_probe.py (GPU<n>: blocks of `key = value`)."""
    devices: list[dict[str, str]] = []
    for line in text.splitlines():
        if re.match(r"^GPU\d+:\s*$", line.strip()):
            devices.append({})
        elif devices and "=" in line and line[:1] in ("\t", " "):
            key, _, value = line.partition("=")
            devices[-1].setdefault(key.strip(), value.strip())
    return devices


def is_software_vulkan(device: dict[str, str]) -> bool:
    """llvmpipe/lavapipe, SwiftShader, or anything the driver itself calls a CPU device."""
    text = (device.get("deviceName", "") + " " + device.get("driverName", "")).lower()
    return device.get("deviceType", "").endswith("CPU") or any(s in text for s in _SOFTWARE_ICDS)


def vulkan_device_class(device: dict[str, str], lane) -> rpb.DeviceClass:
    vendor = _VULKAN_VENDORS.get(device.get("vendorID", "").lower(), device.get("vendorID", ""))
    driver_info = device.get("driverInfo", "")
    major = re.match(r"\s*(\d+)\.", driver_info)
    return rpb.DeviceClass(
        backend="vulkan", os=lane.os, arch=lane.arch, vendor=vendor, device_name=device.get("deviceName", ""),
        compute_capability=_DEVICE_TYPE_SHORT.get(device.get("deviceType", ""), device.get("deviceType", "")),
        driver_version=f"{device.get('driverName', '')} {driver_info}".strip(),
        driver_major=major.group(1) if major else "",
        runtime_version=f"Vulkan {device.get('apiVersion', '')}",
    )


def choose_vulkan_device(devices: list[dict[str, str]], index: int, allow_software: bool) -> tuple[int, dict[str, str]]:
    """The index-th usable device (hardware only unless allow_software) and its loader index.

    Unavailable names every device seen and why it was not taken."""
    usable = [(i, d) for i, d in enumerate(devices) if allow_software or not is_software_vulkan(d)]
    if index < len(usable):
        return usable[index]
    seen = "; ".join(f"GPU{i} {d.get('deviceName', '?')} ({d.get('deviceType', '?')}, driver {d.get('driverName', '?')})"
                     for i, d in enumerate(devices)) or "none"
    if not usable and devices:
        raise Unavailable(f"the Vulkan loader lists only software devices ({seen}): software ICDs never certify; "
                          "--allow_software_icd runs them as a non-recordable diagnostic")
    raise Unavailable(f"no hardware Vulkan device #{index} (the loader lists: {seen}); install the GPU's Vulkan "
                      "driver, or point VK_DRIVER_FILES at its ICD manifest")


def check_vulkan(ctx: RunContext, step: Step) -> rpb.DeviceClass:
    """The loader's own device list (tools/runner/probes/vulkan_probe.py through the Vulkan API), not ggml's."""
    import sys
    cfg = ctx.config
    res = step.run([sys.executable, str(VULKAN_PROBE)], 120)
    if res.exit_code != 0:
        raise Unavailable(f"the Vulkan probe found no usable loader/instance: {res.output.strip()[-300:]}")
    devices = parse_vulkaninfo_summary(res.output)
    index, device = choose_vulkan_device(devices, cfg.gpu_index, cfg.allow_software_icd)
    if is_software_vulkan(device):
        ctx.non_recordable.append(f"--allow_software_icd: software Vulkan device {device.get('deviceName')} "
                                  f"(driver {device.get('driverName')}): a diagnostic run, never recordable")
    # ggml-vulkan uses exactly this device (it would skip a CPU-type one unless named here).
    os.environ["GGML_VK_VISIBLE_DEVICES"] = str(index)
    step.config("gpu_index", f"{cfg.gpu_index}")
    step.config("vulkan_device_index", f"{index}")
    step.config("allow_software_icd", f"{cfg.allow_software_icd}")
    step.log(f"python {platform.python_version()}; LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')}; "
             f"GGML_VK_VISIBLE_DEVICES={index}")
    step.result.metrics["vulkan_device_count"] = len(devices)
    lib = cfg.lane_dir / "lib" / "libggml-vulkan.so.0"
    if not lib.is_file():
        raise Failed(f"missing artifact {lib}: not a Vulkan lane build")
    dc = vulkan_device_class(device, ctx.lane)
    return dc


def check_metal(ctx: RunContext, step: Step) -> rpb.DeviceClass:
    if platform.system() != "Darwin":
        raise Unavailable(f"lane {ctx.lane.lane_id} needs macOS with a Metal device; this host is {platform.system()}")
    out = _tool_output(step, ["system_profiler", "SPDisplaysDataType"])
    m = re.search(r"Chipset Model:\s*(.+)", out)
    if "Metal" not in out or not m:
        raise Unavailable("system_profiler shows no Metal device")
    return rpb.DeviceClass(backend="metal", os=ctx.lane.os, arch=ctx.lane.arch, vendor="Apple",
                           device_name=m.group(1).strip(), compute_capability=(re.search(r"Metal( Support)?:\s*(.+)", out) or [None, None, ""])[2])


BACKEND_CHECKS = {"cuda": check_cuda, "rocm": check_rocm, "vulkan": check_vulkan, "metal": check_metal}
