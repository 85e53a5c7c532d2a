"""Repository rule: llama.cpp pinned to an exact archive, plus the verified patch stack.

Default source is the PyPI sdist of llama-cpp-python, which vendors llama.cpp at a known upstream
commit; pip fetches it by name (no index host is written here) and the rule checks its sha256.
With `urls` set (e.g. the upstream archive of the same commit) Bazel's downloader is used instead;
the evidence records which source was used.

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

def _impl(rctx):
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

    series = [line.strip() for line in rctx.read(rctx.attr.patch_series).splitlines()]
    series = [line for line in series if line and not line.startswith("#")]
    by_name = {p.name: p for p in rctx.attr.patches}
    if sorted(series) != sorted(by_name.keys()):
        fail("llama_cpp_archive: `patches` {} and the series file {} disagree; list every patch once in both".format(
            sorted(by_name.keys()),
            series,
        ))
    patches = []
    patch_error = ""
    for name in series:
        path = rctx.path(by_name[name])
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
        "commit": attr.string(mandatory = True),
        "patch_series": attr.label(mandatory = True, allow_single_file = True),
        "patches": attr.label_list(allow_files = [".patch"]),
        "pypi_sdist": attr.string(doc = "name==version of a PyPI sdist that vendors llama.cpp"),
        "sha256": attr.string(mandatory = True),
        "strip_prefix": attr.string(mandatory = True),
        "urls": attr.string_list(doc = "an archive of the same tree; overrides pypi_sdist"),
    },
)
