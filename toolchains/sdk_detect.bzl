"""Repository rule @lane_sdks: detects each lane's SDK and says AVAILABLE or UNAVAILABLE, and why.

Detection only; nothing is installed or fetched. The result is `@lane_sdks//:sdks.bzl` (SDKS, read
by lanes/ to make lanes buildable or to fail with the reason) and `@lane_sdks//:sdks.json` (read by
the matrix and the runner).

Which SDKs: the detectors of sdk_table.bzl, one file per SDK; nothing here names one.

When it re-runs: Bazel re-runs this rule when a variable a detector declares changes (PATH,
CUDA_PATH, ROCM_PATH, VULKAN_SDK, the LANES_* modes) or a file it reads by label changes (the
locks), on `bazel sync --configure` (configure = True) and on `bazel sync --only=lane_sdks`. An
SDK installed into a directory already on PATH changes none of these, so every UNAVAILABLE reason
ends with the command that re-detects (sdk_result.REDETECT).
"""

load("//toolchains:sdk_result.bzl", "first_line", "run_tool")
load("//toolchains:sdk_table.bzl", "SDK_DETECTORS")

def _environ():
    names = []
    for detector in SDK_DETECTORS:
        names += [n for n in detector.environ if n not in names]
    return names

def _impl(rctx):
    sdks = {detector.name: detector.detect(rctx) for detector in SDK_DETECTORS}

    # Debian's bazel-bootstrap reports no version of its own; its package version is the truth there.
    bazel_version = native.bazel_version or "bazel-bootstrap " + (run_tool(rctx, ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"]) or "unknown").strip()
    host = struct(os = rctx.os.name, arch = first_line(run_tool(rctx, ["uname", "-m"])), bazel_version = bazel_version)
    rctx.file("sdks.json", struct(host = host, sdks = sdks).to_json())
    rctx.template("sdks.bzl", rctx.attr._sdks_template, substitutions = {
        "%{HOST}": repr({"os": host.os, "arch": host.arch, "bazel_version": host.bazel_version}),
        "%{SDKS}": repr(sdks),
    })
    rctx.template("BUILD.bazel", rctx.attr._build_template)
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.name))

lane_sdks = repository_rule(
    implementation = _impl,
    doc = "Detects every lane's SDK (see the module docstring for when it re-runs).",
    attrs = {
        "_build_template": attr.label(default = "//toolchains:BUILD.lane_sdks.bazel.tpl", allow_single_file = True),
        "_sdks_template": attr.label(default = "//toolchains:sdks.bzl.tpl", allow_single_file = True),
    },
    environ = _environ(),
    configure = True,
    local = True,
)
