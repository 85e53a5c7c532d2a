"""Maps a lane to the detected SDK that builds it (see sdk_detect.bzl for detection)."""

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

def sdk_for_lane(lane, sdks, host):
    """Returns the SDK dict for a lane: status, reason, name, plus build env and cache entries.

    A lane for another OS or CPU than this host is UNAVAILABLE whatever SDKs are installed.

    Args:
      lane: a lane of the spec (lanes/lanes.bzl).
      sdks: SDKS of @lane_sdks//:sdks.bzl.
      host: HOST of @lane_sdks//:sdks.bzl.
    Returns:
      the lane's SDK dict, with env, cache_entries and build_data when it is AVAILABLE.
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
    if lane["sdk"] == "vulkan":
        sdk = dict(sdks["vulkan"])
        if sdk["status"] == "AVAILABLE":
            sdk.update(_vulkan_build(sdk))
        return sdk
    if lane["sdk"] == "host-cc":
        return dict(sdks["host-cc"])
    return dict(sdks[lane["sdk"]])

def _vulkan_build(sdk):
    """env, cache_entries and build_data of a Vulkan lane, hermetic (@vulkan_sdk) or local."""
    if sdk.get("mode") == "local":
        include, library, glslc, spirv = sdk["include_dir"], sdk["library"], sdk["glslc"], sdk["spirv_headers_dir"]
        env, build_data = {}, []
    else:
        # Only the Vulkan lane references @vulkan_sdk: nothing is fetched unless that lane is built.
        root = "$EXT_BUILD_ROOT/external/vulkan_sdk"
        include = root + "/usr/include"
        library = root + "/usr/lib/x86_64-linux-gnu/libvulkan.so"

        # bin/glslc runs usr/bin/glslc with the unpacked libshaderc.so.1 (the host has none).
        glslc = root + "/bin/glslc"
        spirv = root + "/usr/share/cmake/SPIRV-Headers"
        env = {"PATH": root + "/bin"}
        build_data = ["@vulkan_sdk//:sdk"]
    lib_dir = library.rsplit("/", 1)[0]
    return {
        "env": env,
        "cache_entries": {
            "Vulkan_INCLUDE_DIR": include,
            "Vulkan_LIBRARY": library,
            "Vulkan_GLSLC_EXECUTABLE": glslc,
            # find_package(SPIRV-Headers CONFIG) in ggml-vulkan's CMakeLists.txt.
            "SPIRV-Headers_DIR": spirv,
            # Tools link libggml-vulkan, whose libvulkan.so.1 the linker must find; at run time
            # the runner supplies the loader (the host's, or @vulkan_sdk//:loader).
            "CMAKE_EXE_LINKER_FLAGS": "-Wl,-rpath-link," + lib_dir,
            "CMAKE_SHARED_LINKER_FLAGS": "-Wl,-rpath-link," + lib_dir,
        },
        "build_data": build_data,
    }
