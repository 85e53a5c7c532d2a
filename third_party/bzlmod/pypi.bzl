"""Module extension `pypi`: the hash-locked Python wheels (@pypi) under Bzlmod.

MODULE.bazel:
    pypi = use_extension("//third_party/bzlmod:pypi.bzl", "pypi")
    pypi.lock(name = "pypi", lock_file = "//third_party/python:requirements_lock.txt")
    use_repo(pypi, "pypi")

Wraps the WORKSPACE rule `locked_requirements`: the same lock file (every requirement pinned with
its sha256) and the same installer, so both build systems install byte-identical wheels. No
requirement or hash is repeated here; //tests:module_pins_test checks both name the same lock.
Bazel 4.2.3 never loads this file.
"""

load("//third_party/python:locked_requirements.bzl", "locked_requirements")

_lock = tag_class(
    doc = "One locked_requirements repository; the attributes are the repository rule's.",
    attrs = {
        "lock_file": attr.label(mandatory = True, allow_single_file = True),
        "name": attr.string(mandatory = True),
        "python_interpreter": attr.string(default = "/usr/bin/python3"),
    },
)

def _pypi_impl(module_ctx):
    seen = {}
    for mod in module_ctx.modules:
        for tag in mod.tags.lock:
            if tag.name in seen:
                fail("pypi.lock: repository {} is declared twice ({} and {})".format(tag.name, seen[tag.name], mod.name))
            seen[tag.name] = mod.name
            locked_requirements(
                name = tag.name,
                lock_file = tag.lock_file,
                python_interpreter = tag.python_interpreter,
            )
    return module_ctx.extension_metadata(
        root_module_direct_deps = "all",
        root_module_direct_dev_deps = [],
        reproducible = True,
    )

pypi = module_extension(
    implementation = _pypi_impl,
    tag_classes = {"lock": _lock},
    doc = "Hash-locked Python wheels, one py_library per package (locked_requirements).",
)
