# @vulkan_sdk: the pinned Debian Vulkan SDK (vulkan_sdk_lock.txt), unpacked by debian_packages.
package(default_visibility = ["//visibility:public"])

# Everything ggml-vulkan's CMake build reads: Vulkan and SPIR-V headers, the loader to link
# against, CMake package files, glslc with its libshaderc, and bin/glslc, which runs that glslc
# with the libshaderc of this tree (the host has none).
filegroup(
    name = "sdk",
    srcs = [
        "bin/glslc",
        "usr/bin/glslc",
    ] + glob(
        [
            "usr/include/**",
            "usr/lib/x86_64-linux-gnu/**",
            "usr/share/cmake/**",
        ],
        exclude = ["**/* *"],
    ),
)

# The pinned Vulkan loader, for running a lane on a host that has none:
# LD_LIBRARY_PATH=<this repo>/usr/lib/x86_64-linux-gnu.
filegroup(
    name = "loader",
    srcs = glob(["usr/lib/x86_64-linux-gnu/libvulkan.so.1*"]),
)

exports_files([
    "bin/glslc",
    "packages.json",
])
