"""The Vulkan lane's external repositories: the pinned SDK and, for negative tests, lavapipe."""

load("//toolchains/vulkan:debian_packages.bzl", "debian_packages")

def vulkan_repositories():
    """Declares @vulkan_sdk and @vulkan_lavapipe; each is fetched only when a target uses it."""
    debian_packages(
        name = "vulkan_sdk",
        build_file_template = "//toolchains/vulkan:BUILD.vulkan_sdk.bazel.tpl",
        lock_file = "//toolchains/vulkan:vulkan_sdk_lock.txt",
        templates = {"//toolchains/vulkan:glslc.sh.tpl": "bin/glslc"},
    )
    debian_packages(
        name = "vulkan_lavapipe",
        build_file_template = "//toolchains/vulkan:BUILD.vulkan_lavapipe.bazel.tpl",
        icd_manifests = {"usr/share/vulkan/icd.d/lvp_icd.x86_64.json": "lvp_icd.x86_64.json"},
        ldd = ["usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"],
        lib_dirs = ["usr/lib/x86_64-linux-gnu"],
        lock_file = "//toolchains/vulkan:vulkan_lavapipe_lock.txt",
    )
