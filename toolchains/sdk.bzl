"""Maps a lane to the detected SDK that builds it (see sdk_detect.bzl for detection)."""

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

def sdk_for_lane(lane, sdks, host):
    """Returns the SDK dict for a lane: status, reason, name, plus build env and cache entries.

    A lane for another OS or CPU than this host is UNAVAILABLE whatever SDKs are installed.
    """
    host_os = "darwin" if host["os"].startswith("mac") else host["os"].split(" ")[0]
    host_arch = _ARCH_ALIASES.get(host["arch"], host["arch"])
    lane_arch = _ARCH_ALIASES.get(lane["arch"], lane["arch"])
    if (lane["os"], lane_arch) != (host_os, host_arch):
        return {"name": lane["sdk"], "status": "UNAVAILABLE", "reason": "needs a {}-{} host; this host is {}-{}".format(lane["os"], lane["arch"], host_os, host_arch)}
    if lane["sdk"] == "cuda":
        sdk = dict(sdks["cuda-local"])
        if sdk["status"] == "AVAILABLE":
            sdk["env"] = {"PATH": sdk["path"] + "/bin", "CUDAToolkit_ROOT": sdk["path"]}
            sdk["cache_entries"] = {"CMAKE_CUDA_COMPILER": sdk["path"] + "/bin/nvcc"}
        return sdk
    if lane["sdk"] == "host-cc":
        return dict(sdks["host-cc"])
    return dict(sdks[lane["sdk"]])
