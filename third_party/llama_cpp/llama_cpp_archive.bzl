"""Repository rule: llama.cpp pinned to an exact archive, plus the verified patch stack.

Default source is the PyPI sdist of llama-cpp-python, which vendors llama.cpp at a known upstream
commit; pip fetches it by name (no index host is written here) and the rule checks its sha256.
With `urls` set (e.g. the upstream archive of the same commit) Bazel's downloader is used instead;
the evidence records which source was used.

The pin's values are in //third_party/llama_cpp:pin.bzl, the stack's order in patches/series.

Layout of @llama_cpp:
  pristine/   the pinned tree exactly as archived (the patch test checks the stack against it)
  src/        the same tree with the patch stack applied (what lanes build)
  pin.json    {source_uri, archive_sha256, commit, strip_prefix, patches[{name, sha256}], patch_stack_digest}
  pin.bzl     the same facts as Starlark constants, for cache entries such as the build-info stamp
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

exports_files(["pin.json", "pin.bzl"])

# The whole project minus models/ (75 MB of tokenizer fixtures); the embedded model needs one vocab.
filegroup(
    name = "srcs",
    srcs = glob(["src/**"], exclude = ["src/models/**"]),
)

# ggml alone: a llama-only patch never invalidates the backend kernels built from this.
filegroup(
    name = "ggml_srcs",
    srcs = glob(["src/ggml/**"]),
)

filegroup(
    name = "pristine_srcs",
    srcs = glob(["pristine/**"], exclude = ["pristine/models/**"]),
)

exports_files(["src/models/ggml-vocab-llama-spm.gguf"])

# What llama.cpp's own tests read at run time (tokenizer vocabularies, chat templates): the
# lanes' CTest bundles (lanes/ctest.bzl) copy the files their tests reference from here.
filegroup(
    name = "test_data",
    srcs = glob(["src/models/**"]),
)
"""

_PATCH_FAILURE = """
def _impl(ctx):
    fail("\\n\\nThe llama.cpp patch stack does not apply: " + ctx.attr.reason + "\\nFix the patch (bazel test //tests:patch_stack_test names it).")

patch_failure = rule(implementation = _impl, attrs = {"reason": attr.string(), "srcs": attr.label_list(allow_files = True)})
"""

def _sha256(rctx, path):
    res = rctx.execute(["python3", "-c", "import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())", str(path)])
    if res.return_code != 0:
        fail("cannot hash {}: {}".format(path, res.stderr))
    return res.stdout.strip()

def _fetch_sdist(rctx):
    """Fetches the sdist with pip, hash-locked, and returns its path."""
    req = rctx.path("sdist.requirement.txt")
    rctx.file(req, "{} --hash=sha256:{}\n".format(rctx.attr.pypi_sdist, rctx.attr.sha256))
    res = rctx.execute(
        [
            "python3",
            "-m",
            "pip",
            "download",
            "--isolated",
            "--quiet",
            "--no-deps",
            "--no-binary=:all:",
            "--require-hashes",
            "--disable-pip-version-check",
            "-d",
            "_archive",
            "-r",
            str(req),
        ],
        timeout = 900,
        environment = {"PIP_ROOT_USER_ACTION": "ignore"},
    )
    if res.return_code != 0:
        fail("llama_cpp_archive: pip could not fetch {} (sha256 {}):\n{}".format(rctx.attr.pypi_sdist, rctx.attr.sha256, res.stderr))
    files = rctx.path("_archive").readdir()
    if len(files) != 1:
        fail("llama_cpp_archive: expected one sdist in _archive, found {}".format(files))
    return files[0], "pypi-sdist:" + rctx.attr.pypi_sdist

def _patch_files(rctx):
    """[(name, path)] in `series` order: the series is the only list of the stack.

    Every entry must be a file beside the series and every .patch there must be listed once, so a
    patch is added by one series line plus its file."""
    series_label = rctx.attr.patch_series
    names = [line.strip() for line in rctx.read(series_label).splitlines()]
    names = [line for line in names if line and not line.startswith("#")]
    patches_dir = rctx.path(series_label).dirname
    present = sorted([f.basename for f in patches_dir.readdir() if f.basename.endswith(".patch")])
    if sorted(names) != present or len(names) != len({n: True for n in names}):
        fail("llama_cpp_archive: the series file {} lists {}, {} holds {}; list every patch once".format(
            series_label,
            names,
            patches_dir,
            present,
        ))

    # Through the label, so Bazel re-runs this rule when a patch's contents change.
    return [(name, rctx.path(series_label.relative(name))) for name in names]

def _impl(rctx):
    # First: resolving a label may restart this function, so before the archive is fetched.
    patches_by_name = _patch_files(rctx)
    if rctx.attr.urls:
        rctx.download(rctx.attr.urls, output = "_archive/source.tar.gz", sha256 = rctx.attr.sha256)
        archive, source_uri = rctx.path("_archive/source.tar.gz"), rctx.attr.urls[0]
    else:
        archive, source_uri = _fetch_sdist(rctx)
    got = _sha256(rctx, archive)
    if got != rctx.attr.sha256:
        fail("llama_cpp_archive: {} has sha256 {}, the pin says {}".format(archive, got, rctx.attr.sha256))

    rctx.extract(archive, output = "_unpacked")
    top = rctx.attr.strip_prefix.split("/")[0]
    commit = rctx.attr.commit

    # An sdist of llama-cpp-python records the vendored submodule's commit under .git/modules.
    head = rctx.path("_unpacked/{}/.git/modules/vendor/llama.cpp/HEAD".format(top))
    if head.exists:
        recorded = rctx.read(head).strip()
        if recorded != commit:
            fail("llama_cpp_archive: the archive vendors llama.cpp {}, the pin says {}".format(recorded, commit))
    for d in ["pristine", "src"]:
        res = rctx.execute(["cp", "-a", "_unpacked/" + rctx.attr.strip_prefix, d])
        if res.return_code != 0:
            fail("llama_cpp_archive: strip_prefix {} not found in the archive: {}".format(rctx.attr.strip_prefix, res.stderr))

        # The vendored tree's .git is a submodule pointer into the sdist; without it git cannot
        # invent build info, and the pinned commit is stamped explicitly instead.
        rctx.delete(d + "/.git")
    rctx.delete("_unpacked")
    rctx.delete("_archive")

    patches = []
    patch_error = ""
    for name, path in patches_by_name:
        if not patch_error:
            res = rctx.execute(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "-d", "src", "-i", str(path)])
            if res.return_code != 0:
                # Not fail(): the patch test (which reads pristine/) must still run and name the
                # patch; everything built from src/ fails with this message instead.
                patch_error = "patch {} does not apply to llama.cpp {}: {}{}".format(name, commit, res.stdout, res.stderr)
        patches.append({"name": name, "sha256": _sha256(rctx, path)})
    stack = "".join(["{}  {}\n".format(p["sha256"], p["name"]) for p in patches])
    rctx.file("_stack.txt", stack)
    digest = _sha256(rctx, rctx.path("_stack.txt"))
    rctx.delete("_stack.txt")

    pin = struct(
        source_uri = source_uri,
        archive_sha256 = rctx.attr.sha256,
        commit = commit,
        strip_prefix = rctx.attr.strip_prefix,
        patches = [struct(name = p["name"], sha256 = p["sha256"]) for p in patches],
        patch_stack_digest = "sha256:" + digest,
    )
    rctx.file("pin.json", pin.to_json())
    rctx.file("pin.bzl", "PIN = {}\n".format(repr({
        "source_uri": source_uri,
        "archive_sha256": rctx.attr.sha256,
        "commit": commit,
        "short_commit": commit[:7],
        "patch_stack_digest": "sha256:" + digest,
    })))
    if patch_error:
        rctx.file("BUILD.bazel", _BUILD.replace("filegroup(\n    name = \"srcs\"", "patch_failure(\n    reason = {},\n    name = \"srcs\"".format(repr(patch_error))).replace(
            "filegroup(\n    name = \"ggml_srcs\"",
            "patch_failure(\n    reason = {},\n    name = \"ggml_srcs\"".format(repr(patch_error)),
        ).replace("package(default_visibility", 'load(":patch_failure.bzl", "patch_failure")\n\npackage(default_visibility'))
        rctx.file("patch_failure.bzl", _PATCH_FAILURE)
    else:
        rctx.file("BUILD.bazel", _BUILD)
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.name))

llama_cpp_archive = repository_rule(
    implementation = _impl,
    attrs = {
        "commit": attr.string(mandatory = True, doc = "the upstream llama.cpp commit the archive holds"),
        "patch_series": attr.label(
            mandatory = True,
            allow_single_file = True,
            doc = "the `series` file: patch names in apply order, each a file in its directory",
        ),
        "pypi_sdist": attr.string(doc = "name==version of a PyPI sdist that vendors llama.cpp"),
        "sha256": attr.string(mandatory = True, doc = "sha256 of the archive"),
        "strip_prefix": attr.string(mandatory = True, doc = "the llama.cpp tree's directory in the archive"),
        "urls": attr.string_list(doc = "an archive of the same tree; overrides pypi_sdist"),
    },
)
