"""Module extension `llama_cpp`: @llama_cpp under Bzlmod, the same repository rule as WORKSPACE.

MODULE.bazel:
    llama_cpp = use_extension("//third_party/bzlmod:llama_cpp.bzl", "llama_cpp")
    llama_cpp.archive(name = "llama_cpp")
    use_repo(llama_cpp, "llama_cpp")

The pin comes from //third_party/llama_cpp:pin.bzl, which WORKSPACE loads too, and the patch stack
from patches/series (read by the repository rule), so neither is written here or in MODULE.bazel.
`urls` may point the same pinned tree at another archive. Bazel 4.2.3 never loads this file.
"""

load("//third_party/llama_cpp:llama_cpp_archive.bzl", "llama_cpp_archive")
load("//third_party/llama_cpp:pin.bzl", "LLAMA_CPP_PIN")

_archive = tag_class(
    doc = "One llama_cpp_archive repository of the pin in //third_party/llama_cpp:pin.bzl.",
    attrs = {
        "name": attr.string(mandatory = True),
        "urls": attr.string_list(doc = "an archive of the same tree; overrides the pin's sdist"),
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
                urls = tag.urls,
                **LLAMA_CPP_PIN
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
