"""Repository rule `debian_packages`: exact Debian packages, sha256-verified, unpacked into a repo.

The lock file (one `<package> <version> <architecture> <sha256>` a line) is the only source of
truth. Each .deb comes from the host's apt configuration (`apt-get download <pkg>=<version>`) or,
offline, from the directory named by $LANES_DEB_DIR; fetch_debs.py checks every sha256 before
anything is unpacked. The BUILD file comes from a template file, so it can be read and linted.
Only targets that reference the repository fetch it (the Vulkan lane, the lavapipe runner).
"""

def _impl(rctx):
    args = [
        "python3",
        str(rctx.path(rctx.attr._fetcher)),
        "--lock",
        str(rctx.path(rctx.attr.lock_file)),
        "--dest",
        str(rctx.path(".")),
    ]
    for shipped, out in rctx.attr.icd_manifests.items():
        args += ["--icd", "{}={}".format(shipped, out)]
    for lib in rctx.attr.ldd:
        args += ["--ldd", lib]
    for lib_dir in rctx.attr.lib_dirs:
        args += ["--lib_dir", lib_dir]
    rctx.report_progress("Fetching and verifying the Debian packages of " + str(rctx.attr.lock_file))
    res = rctx.execute(args, timeout = 1800, quiet = True)
    if res.return_code != 0:
        fail("{}: {}{}".format(rctx.name, res.stdout, res.stderr))
    if res.stdout.strip():
        # fetch_debs.py prints only warnings (e.g. libraries neither pinned nor on this host).
        # buildifier: disable=print
        print("{}: {}".format(rctx.name, res.stdout.strip()))
    for template, dest in rctx.attr.templates.items():
        rctx.template(dest, template, executable = dest.startswith("bin/"))
    rctx.template("BUILD.bazel", rctx.attr.build_file_template)
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.name))

debian_packages = repository_rule(
    implementation = _impl,
    doc = "Unpacks sha256-pinned Debian packages (see the module docstring).",
    attrs = {
        "build_file_template": attr.label(mandatory = True, allow_single_file = True, doc = "BUILD file of the repository."),
        "icd_manifests": attr.string_dict(doc = "Shipped Vulkan ICD manifest -> copy with a library_path relative to the copy."),
        "ldd": attr.string_list(doc = "Unpacked libraries whose ldd output is recorded in ldd.txt."),
        "lib_dirs": attr.string_list(doc = "Unpacked library directories searched first by --ldd."),
        "lock_file": attr.label(mandatory = True, allow_single_file = True, doc = "The package lock."),
        "templates": attr.label_keyed_string_dict(allow_files = True, doc = "Template file -> path in the repository (bin/* executable)."),
        "_fetcher": attr.label(default = "//toolchains/vulkan:fetch_debs.py", allow_single_file = True),
    },
    environ = ["LANES_DEB_DIR"],
)
