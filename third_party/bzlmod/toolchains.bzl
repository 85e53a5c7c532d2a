"""Module extensions for the lanes' SDKs under Bzlmod: `cuda`, `lane_sdks`.

MODULE.bazel:
    cuda = use_extension("//third_party/bzlmod:toolchains.bzl", "cuda")
    cuda.toolkit(name = "cuda_toolkit")
    use_repo(cuda, "cuda_toolkit")

    sdks = use_extension("//third_party/bzlmod:toolchains.bzl", "lane_sdks")
    sdks.detect(name = "lane_sdks")
    use_repo(sdks, "lane_sdks")

Each tag takes the attributes of the WORKSPACE call it replaces (`cuda_toolkit(...)`,
`lane_sdks(...)`), and the repository rules are the same ones, so the CUDA wheel lock and the SDK
detection are shared by both build systems. Only what a tag sets is passed on, so an attribute left
out here keeps the rule's default exactly as in WORKSPACE. The Vulkan SDK is in vulkan.bzl.
Bazel 4.2.3 never loads this file.
"""

load("//toolchains:sdk_detect.bzl", _lane_sdks_rule = "lane_sdks")
load("//toolchains/cuda:cuda_toolkit.bzl", "cuda_toolkit")

_toolkit = tag_class(
    doc = "One cuda_toolkit repository; the attributes are the repository rule's.",
    attrs = {
        "lock_file": attr.label(allow_single_file = True),
        "name": attr.string(mandatory = True),
    },
)

_detect = tag_class(
    doc = "One lane_sdks repository; the attributes are the repository rule's.",
    attrs = {
        "name": attr.string(mandatory = True),
    },
)

def _set(tag, names):
    """The tag's attributes that were set (a label left unset is None), as repository rule kwargs."""
    return {n: getattr(tag, n) for n in names if getattr(tag, n) != None}

def _cuda_impl(module_ctx):
    for mod in module_ctx.modules:
        for tag in mod.tags.toolkit:
            cuda_toolkit(name = tag.name, **_set(tag, ["lock_file"]))

    # Not reproducible: LANES_CUDA_MODE=local links whatever toolkit the host has.
    return module_ctx.extension_metadata(root_module_direct_deps = "all", root_module_direct_dev_deps = [])

cuda = module_extension(
    implementation = _cuda_impl,
    tag_classes = {"toolkit": _toolkit},
    doc = "The CUDA toolkit of the CUDA lane (cuda_toolkit: pinned NVIDIA wheels, or a local toolkit).",
)

def _lane_sdks_impl(module_ctx):
    for mod in module_ctx.modules:
        for tag in mod.tags.detect:
            _lane_sdks_rule(name = tag.name)
    return module_ctx.extension_metadata(root_module_direct_deps = "all", root_module_direct_dev_deps = [])

lane_sdks = module_extension(
    implementation = _lane_sdks_impl,
    tag_classes = {"detect": _detect},
    doc = "Detects each lane's SDK on the host (lane_sdks); detection only, nothing is installed.",
)
