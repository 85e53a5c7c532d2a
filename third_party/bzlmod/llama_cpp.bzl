"""Module extension `llama_cpp`: @llama_cpp under Bzlmod, the same repository rule as WORKSPACE.

MODULE.bazel:
    llama_cpp = use_extension("//third_party/bzlmod:llama_cpp.bzl", "llama_cpp")
    llama_cpp.archive(name = "llama_cpp", commit = ..., sha256 = ..., ...)
    use_repo(llama_cpp, "llama_cpp")

The `archive` tag takes the attributes of the WORKSPACE `llama_cpp_archive(...)` call, so the pin
(commit, sha256, sdist, strip_prefix, patch stack) is written literally in MODULE.bazel and
//tests:module_pins_test compares it with WORKSPACE. Bazel 4.2.3 never loads this file.
"""

load("//third_party/llama_cpp:llama_cpp_archive.bzl", "llama_cpp_archive")

_archive = tag_class(
    doc = "One llama_cpp_archive repository; the attributes are the repository rule's.",
    attrs = {
        "commit": attr.string(mandatory = True),
        "name": attr.string(mandatory = True),
        "patch_series": attr.label(mandatory = True, allow_single_file = True),
        "patches": attr.label_list(allow_files = [".patch"]),
        "pypi_sdist": attr.string(),
        "sha256": attr.string(mandatory = True),
        "strip_prefix": attr.string(mandatory = True),
        "urls": attr.string_list(),
    },
)

def _llama_cpp_impl(module_ctx):
    seen = {}
    for mod in module_ctx.modules:
        for tag in mod.tags.archive:
            if tag.name in seen:
                fail("llama_cpp.archive: repository {} is declared twice ({} and {})".format(tag.name, seen[tag.name], mod.name))
            seen[tag.name] = mod.name
            llama_cpp_archive(
                name = tag.name,
                commit = tag.commit,
                patch_series = tag.patch_series,
                patches = tag.patches,
                pypi_sdist = tag.pypi_sdist,
                sha256 = tag.sha256,
                strip_prefix = tag.strip_prefix,
                urls = tag.urls,
            )

    # Hash-pinned: the lock file may record the result.
    return module_ctx.extension_metadata(
        root_module_direct_deps = "all",
        root_module_direct_dev_deps = [],
        reproducible = True,
    )

llama_cpp = module_extension(
    implementation = _llama_cpp_impl,
    tag_classes = {"archive": _archive},
    doc = "llama.cpp pinned to an exact archive plus the verified patch stack (llama_cpp_archive).",
)
