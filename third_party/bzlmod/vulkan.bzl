"""Module extension `vulkan`: @vulkan_sdk and @vulkan_lavapipe under Bzlmod.

MODULE.bazel:
    vulkan = use_extension("//third_party/bzlmod:vulkan.bzl", "vulkan")
    vulkan.debian_packages(name = "vulkan_sdk", ...)
    vulkan.debian_packages(name = "vulkan_lavapipe", ...)
    use_repo(vulkan, "vulkan_lavapipe", "vulkan_sdk")

Wraps the repository rule `debian_packages` of //toolchains/vulkan:debian_packages.bzl (the pinned
Debian packages of the Vulkan headers, loader, glslc and the lavapipe software ICD). The
`debian_packages` tag takes that rule's attributes, so the pins are written literally in
MODULE.bazel and //tests:module_pins_test compares them with the WORKSPACE calls and checks that
this tag class declares exactly the rule's public attributes. Only what a tag sets is passed on.
Bazel 4.2.3 never loads this file.
"""

load("//toolchains/vulkan:debian_packages.bzl", _debian_packages_rule = "debian_packages")

# The public attributes of debian_packages (the pins test keeps this list equal to the rule's).
_ATTRS = {
    "build_file_template": attr.label(mandatory = True, allow_single_file = True),
    "icd_manifests": attr.string_dict(),
    "ldd": attr.string_list(),
    "lib_dirs": attr.string_list(),
    "lock_file": attr.label(mandatory = True, allow_single_file = True),
    "name": attr.string(mandatory = True),
    "templates": attr.label_keyed_string_dict(allow_files = True),
}

def _vulkan_impl(module_ctx):
    for mod in module_ctx.modules:
        for tag in mod.tags.debian_packages:
            kwargs = {}
            for attr_name in _ATTRS:
                value = getattr(tag, attr_name)
                if value and attr_name != "name":
                    kwargs[attr_name] = value
            _debian_packages_rule(name = tag.name, **kwargs)

    # Hash-pinned .debs: the lock file may record the result.
    return module_ctx.extension_metadata(
        root_module_direct_deps = "all",
        root_module_direct_dev_deps = [],
        reproducible = True,
    )

vulkan = module_extension(
    implementation = _vulkan_impl,
    tag_classes = {"debian_packages": tag_class(attrs = _ATTRS, doc = "One debian_packages repository.")},
    doc = "The pinned Vulkan SDK and the lavapipe software ICD (debian_packages).",
)
