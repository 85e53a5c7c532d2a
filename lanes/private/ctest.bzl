"""llama.cpp's own CTest suite per lane (issue 14): a test-build stage beside the lane's stages.

The lane's llama stage (<lane>_llama) builds the test executables upstream registers beside the
lane's tools, from one compile of the tree, and keeps the build tree's CTestTestfile.cmake files.
<lane>_ctest is the relocatable bundle made from that stage: the test binaries, the CTest file with its build and source paths made placeholders, the
source data the tests read (tokenizer vocabularies, chat templates) and manifest.json (each test's
command, labels, and exclusion reason from the lane spec). It runs against the lane's own
libraries (bazel-bin/lanes/<lane>/lib), so the tests exercise the artifacts the lane ships. The
lane's own targets and outputs are untouched.
"""

load("@lane_sdks//:sdks.bzl", "HOST", "SDKS")
load("//lanes/private:lane.bzl", "unavailable_lane")
load("//lanes/private:lanes.bzl", "LANES")
load("//lanes/private:providers.bzl", "LaneInfo")
load("//toolchains:sdk.bzl", "sdk_for_lane")

def _stage_prefix(target):
    """The cmake() target's output directory <name>/ (the parent of its bin/)."""
    for f in target[DefaultInfo].files.to_list():
        if not f.is_directory and f.dirname.endswith("/bin"):
            return f.dirname[:-len("/bin")]
    fail("{} declares no binaries".format(target.label))

def _ctest_bundle_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    stage = ctx.attr.build[DefaultInfo].files.to_list()

    # The llama stage's bin/ holds the lane's tools too: the bundle takes the CTest executables.
    binaries = [f for f in stage if not f.is_directory and f.dirname.endswith("/bin") and f.basename in ctx.attr.binaries]
    missing = sorted([b for b in ctx.attr.binaries if b not in [f.basename for f in binaries]])
    if missing:
        fail("{}: {} has no {}".format(ctx.label, ctx.attr.build.label, ", ".join(missing)))
    vocab = [f for f in ctx.files.test_data if f.path.endswith("/models/ggml-vocab-llama-spm.gguf")]
    if not vocab:
        fail("{} has no models/ggml-vocab-llama-spm.gguf".format(ctx.attr.test_data.label))
    args = ctx.actions.args()
    args.add("--lane_id", ctx.attr.lane_id)
    args.add("--spec", ctx.file._spec)
    args.add("--build_tree", _stage_prefix(ctx.attr.build))
    args.add_all(binaries, before_each = "--binary")
    args.add("--source_root", vocab[0].dirname.rsplit("/", 1)[0])
    args.add("--out", out.path)
    ctx.actions.run(
        executable = ctx.executable._make_bundle,
        arguments = [args],
        inputs = depset([ctx.file._spec] + stage + ctx.files.test_data + ctx.files.srcs),
        outputs = [out],
        mnemonic = "CTestBundle",
        progress_message = "Bundling llama.cpp's CTest suite for {}".format(ctx.attr.lane_id),
        use_default_shell_env = False,
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

# The relocatable bundle: bin/, ctest/ templates, source/ data and manifest.json (bundle.py).
ctest_bundle = rule(
    implementation = _ctest_bundle_impl,
    attrs = {
        "lane_id": attr.string(mandatory = True),
        "build": attr.label(mandatory = True, doc = "the lane's llama stage (cmake())"),
        "binaries": attr.string_list(mandatory = True, doc = "the CTest executables to bundle from its bin/"),
        "test_data": attr.label(default = "@llama_cpp//:test_data"),
        # Scripts the tests run (e.g. tests/test-rpc-multi-server.sh).
        "srcs": attr.label(default = "@llama_cpp//:srcs"),
        "_spec": attr.label(default = "//lanes:spec.json", allow_single_file = True),
        "_make_bundle": attr.label(default = "//tools/ctest:make_bundle", executable = True, cfg = "exec"),
    },
)

def _ctest_report_impl(ctx):
    lane = ctx.attr.lane[LaneInfo]
    alias = lane.alias

    # Beside the lane's <alias>.evidence.{pb,json}: <alias>_ctest.report.{pb,json} and the raw log.
    report_pb = ctx.actions.declare_file("{}_ctest.report.pb".format(alias))
    report_json = ctx.actions.declare_file("{}_ctest.report.json".format(alias))
    log = ctx.actions.declare_file("{}_ctest.log".format(alias))
    lane_files = lane.binaries.to_list() + lane.libraries.to_list() + [lane.evidence, lane.evidence_json]
    args = ctx.actions.args()
    args.add("--bundle", ctx.file.bundle.path)
    args.add("--lane_dir", lane.lane_dir)
    args.add("--evidence", lane.evidence)
    args.add("--model", ctx.file.model)
    args.add("--out", report_pb.dirname)
    args.add("--log_name", log.basename)
    args.add("--report_pb", report_pb.basename)
    args.add("--report_json", report_json.basename)
    args.add("--jobs", "2")
    args.add("--report_only")
    ctx.actions.run(
        executable = ctx.executable._run_bundle,
        arguments = [args],
        inputs = depset([ctx.file.bundle, ctx.file.model] + lane_files),
        outputs = [report_pb, report_json, log],
        mnemonic = "CTest",
        progress_message = "Running llama.cpp's CTest suite for {}".format(ctx.attr.lane_id),
        # ctest -j2 (the two cores CI has); the tests see no network in the sandbox either way.
        execution_requirements = {"resources:cpu:2": ""},
        use_default_shell_env = False,
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )
    return [DefaultInfo(
        files = depset([report_pb, report_json, log]),
        runfiles = ctx.runfiles(files = [report_pb, report_json, log]),
    )]

# Runs the bundle against the lane's libraries with ctest; the report and raw log land beside the
# lane's build evidence. Passed or not, the action succeeds once the report is written: the gate
# is the test that reads it (//tests:cpu_ctest_test), which names each failing test.
ctest_report = rule(
    implementation = _ctest_report_impl,
    attrs = {
        "lane_id": attr.string(mandatory = True),
        "bundle": attr.label(mandatory = True, allow_single_file = True),
        "lane": attr.label(mandatory = True, providers = [LaneInfo], doc = "the lane whose libraries the suite runs against"),
        "model": attr.label(default = "//tools/model:tiny_llama_f32", allow_single_file = True),
        "_run_bundle": attr.label(default = "//tools/ctest:run_bundle", executable = True, cfg = "exec"),
    },
)

def llama_ctest(name, lane_id, heavy = False, lane = None, visibility = None):
    """Declares <name> (the bundle from the lane's llama stage) and <name>_report for one lane of the spec.

    Args:
      name: "<alias>_ctest", e.g. "cpu_ctest".
      lane_id: a key of LANES.
      heavy: tag manual (accelerator lanes: built only when asked).
      lane: the spec entry; default LANES[lane_id].
      visibility: of the bundle and its report (the build stage stays private to the package).
    """
    lane = lane or LANES[lane_id]
    alias = lane["alias"]
    if name != alias + "_ctest":
        fail("llama_ctest(name = {}): expected {}_ctest for {}".format(name, alias, lane_id))
    sdk = sdk_for_lane(lane, SDKS, HOST)
    if sdk["status"] != "AVAILABLE":
        unavailable_lane(name = name, lane_id = lane_id, reason = sdk["reason"], tags = ["manual"], visibility = visibility)
        return
    tags = ["manual"] if heavy else []
    ctest = lane["ctest"]
    ctest_bundle(
        name = name,
        lane_id = lane_id,
        build = ":" + alias + "_llama",
        binaries = ctest["targets"],
        tags = tags,
        visibility = visibility,
    )
    if heavy:
        # Accelerator lanes run on their hardware: tools/ctest/run_bundle.py on the GPU host.
        return
    ctest_report(
        name = name + "_report",
        lane_id = lane_id,
        bundle = ":" + name,
        lane = ":" + alias,
        visibility = visibility,
    )
