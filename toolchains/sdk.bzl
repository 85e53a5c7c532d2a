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
        sdk = dict(sdks["cuda"])
        if sdk["status"] == "AVAILABLE":
            # Both modes go through @cuda_toolkit (wheels assembled, or a link to the local toolkit),
            # which only the CUDA lane references: nothing is fetched unless that lane is built.
            root = "$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit"
            sdk["env"] = {"PATH": root + "/bin", "CUDAToolkit_ROOT": root, "CUDA_PATH": root}
            sdk["cache_entries"] = {
                "CMAKE_CUDA_COMPILER": root + "/bin/nvcc",
                # libggml-cuda's cudart/cuBLAS are found at link time here, at run time via RUNPATH
                # or the host's CUDA install (the runner records which were loaded).
                "CMAKE_EXE_LINKER_FLAGS": "-Wl,-rpath-link," + root + "/lib",
                "CMAKE_SHARED_LINKER_FLAGS": "-Wl,-rpath-link," + root + "/lib",
            }
            sdk["build_data"] = ["@cuda_toolkit//:toolkit"]
        return sdk
    if lane["sdk"] == "host-cc":
        return dict(sdks["host-cc"])
    return dict(sdks[lane["sdk"]])
