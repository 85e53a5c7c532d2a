"""Lane targets from the lane spec: two cmake() stages, a relocatable bundle and its build evidence.

A lane whose SDK is UNAVAILABLE on this host gets a target that fails with the reason when it is
requested explicitly; it is tagged manual so `bazel build //...` never fails for a missing SDK.
"""

load("@lane_sdks//:sdks.bzl", "HOST", "SDKS")
load("@llama_cpp//:pin.bzl", "PIN")
load("@rules_foreign_cc//foreign_cc:defs.bzl", "cmake")
load("//lanes/private:lanes.bzl", "LANES", "merge_dicts")
load("//lanes/private:manifest.bzl", "lane_manifest")
load("//lanes/private:providers.bzl", "LaneInfo")
load("//lanes/private:stage.bzl", "STAGE_FEATURES", "install_from_build_tree")
load("//toolchains:sdk.bzl", "sdk_for_lane")

# As many compile jobs as the host has cores, up to 8 (the stand-in reserves them from Bazel).
_PARALLEL = ["--parallel", "8"]

def _soname(lib):
    return "lib{}.so.0".format(lib)

def _lane_bundle_impl(ctx):
    lane_id = ctx.attr.lane_id
    alias = ctx.label.name

    # Only what rules_foreign_cc's cmake() itself returns: DefaultInfo files under <name>/bin and
    # <name>/lib, and the CMake_logs output group. ggml ships lib<x>.so (to link against) and
    # lib<x>.so.0 (its SONAME); a lane needs only the latter.
    ggml_libs = _stage_files(ctx.attr.ggml, "lib")
    runtime_libs = [f for f in ggml_libs if f.basename.endswith(".so.0")] + _stage_files(ctx.attr.llama, "lib")

    # ggml's runtime-loaded CPU variants (GGML_BACKEND_DL) sit beside the binaries: ggml looks there.
    # The llama stage also builds the CTest executables (one compile of the tree for both): the lane
    # ships only its own targets.
    llama_bins = [f for f in _stage_files(ctx.attr.llama, "bin") if f.basename in ctx.attr.binaries]
    missing = sorted([b for b in ctx.attr.binaries if b not in [f.basename for f in llama_bins]])
    if missing:
        fail("{}: the llama stage has no {}".format(ctx.label, ", ".join(missing)))
    bins = llama_bins + _stage_files(ctx.attr.ggml, "bin")
    stage_logs = ctx.attr.ggml[OutputGroupInfo].CMake_logs.to_list() + ctx.attr.llama[OutputGroupInfo].CMake_logs.to_list()
    out_bins = [ctx.actions.declare_file("{}/bin/{}".format(alias, f.basename)) for f in bins]
    out_libs = [ctx.actions.declare_file("{}/lib/{}".format(alias, f.basename)) for f in runtime_libs]
    evidence_pb = ctx.actions.declare_file("{}.evidence.pb".format(alias))
    evidence_json = ctx.actions.declare_file("{}.evidence.json".format(alias))
    lane_dir = out_bins[0].dirname.rsplit("/", 1)[0]

    args = ctx.actions.args()
    args.add("--lane_id", lane_id)
    args.add("--lane_dir", lane_dir)
    args.add("--spec", ctx.file._spec)
    args.add("--pin", ctx.file._pin)
    args.add("--sdk", ctx.file.sdk_info)
    args.add("--sdk_name", ctx.attr.sdk_name)
    args.add_all(stage_logs, before_each = "--stage_log")
    args.add_all(bins, before_each = "--binary")
    args.add_all(runtime_libs, before_each = "--library")
    args.add("--patches_dir", ctx.files._patches[0].dirname)
    args.add("--bazel_version", HOST["bazel_version"])
    args.add("--out_pb", evidence_pb)
    args.add("--out_json", evidence_json)
    ctx.actions.run(
        executable = ctx.executable._writer,
        arguments = [args],
        inputs = depset(
            [ctx.file._spec, ctx.file._pin, ctx.file.sdk_info] + bins + runtime_libs + ctx.files._patches + stage_logs,
        ),
        outputs = out_bins + out_libs + [evidence_pb, evidence_json],
        mnemonic = "LaneEvidence",
        progress_message = "Bundling lane {} and writing its build evidence".format(lane_id),
    )
    return [
        DefaultInfo(
            files = depset(out_bins + out_libs + [evidence_pb, evidence_json]),
            runfiles = ctx.runfiles(files = out_bins + out_libs + [evidence_pb, evidence_json]),
        ),
        OutputGroupInfo(evidence = depset([evidence_pb, evidence_json])),
        LaneInfo(
            alias = alias,
            lane_id = lane_id,
            lane_dir = lane_dir,
            lane_dir_short_path = out_bins[0].short_path.rsplit("/", 2)[0],
            binaries = depset(out_bins),
            libraries = depset(out_libs),
            evidence = evidence_pb,
            evidence_json = evidence_json,
            spec_entry = json.decode(ctx.attr.spec_entry),
        ),
    ]

def _stage_files(target, sub):
    """Files (not directories) that a cmake() target declared under <name>/<sub>/."""
    return [
        f
        for f in target[DefaultInfo].files.to_list()
        if not f.is_directory and f.dirname.endswith("/" + sub)
    ]

lane_bundle = rule(
    implementation = _lane_bundle_impl,
    doc = "A lane's relocatable bin/ and lib/ and its build evidence; provides LaneInfo.",
    provides = [LaneInfo],
    attrs = {
        "lane_id": attr.string(mandatory = True),
        "ggml": attr.label(mandatory = True, providers = [OutputGroupInfo]),
        "llama": attr.label(mandatory = True, providers = [OutputGroupInfo]),
        "binaries": attr.string_list(mandatory = True, doc = "the llama stage's bin/ files the lane ships (the spec's targets)"),
        "sdk_info": attr.label(mandatory = True, allow_single_file = True),
        "sdk_name": attr.string(mandatory = True),
        "spec_entry": attr.string(mandatory = True, doc = "the lane's spec entry as JSON (LaneInfo.spec_entry)"),
        "_spec": attr.label(default = "//lanes:spec.json", allow_single_file = True),
        "_pin": attr.label(default = "@llama_cpp//:pin.json", allow_single_file = True),
        "_patches": attr.label(default = "//third_party/llama_cpp/patches:stack"),
        # buildifier: disable=attr-cfg ("exec" names another output directory for the tool, which is in
        # the command line: every lane's action keys would change, so the CUDA kernels would recompile
        # and the certified builds would differ; switch with the next rebuild of every lane).
        "_writer": attr.label(default = "//tools/evidence:write_build_evidence", executable = True, cfg = "host"),
    },
)

def _unavailable_lane_impl(ctx):
    fail("\n\nLane {} is UNAVAILABLE on this host: {}\n".format(ctx.attr.lane_id, ctx.attr.reason))

unavailable_lane = rule(
    implementation = _unavailable_lane_impl,
    attrs = {
        "lane_id": attr.string(mandatory = True),
        "reason": attr.string(mandatory = True),
    },
)

def llama_cache_entries(lane_id, lane, sdk):
    """The llama stage's CMake cache entries; the CTest stage (ctest.bzl) configures with the same.

    Args:
      lane_id: a key of LANES.
      lane: LANES[lane_id].
      sdk: the lane's SDK as sdk_for_lane returns it.

    Returns:
      A dict of cache entries.
    """

    # The SDK's entries too: tools link libggml-<backend>, whose SDK libraries the linker must find.
    return merge_dicts(lane["llama_cache_entries"], sdk.get("cache_entries", {}), {
        # The ggml stage, as the cmake() rule lays out a dependency: $EXT_BUILD_DEPS/<its lib_name>.
        "CMAKE_PREFIX_PATH": "$EXT_BUILD_DEPS/{}_ggml".format(lane["alias"]),
        "LANES_LANE_ID": lane_id,
        "LANES_PATCH_STACK_DIGEST": PIN["patch_stack_digest"],
        "LLAMA_BUILD_COMMIT": PIN["short_commit"],
    })

def llama_lane(name, lane_id, heavy = False, lane = None, visibility = ["//visibility:public"]):
    """Declares //lanes:<name>, <name>.lane.json (and <name>_ggml, <name>_llama) for one lane.

    Args:
      name: the lane's alias in the spec (the target users build, e.g. "cpu").
      lane_id: a key of LANES.
      heavy: tag the build manual, so `bazel build //...` and `bazel test //...` skip it
        (accelerator lanes: a requested build only).
      lane: the spec entry; default LANES[lane_id].
      visibility: of the lane target (its stages stay private to the package).
    """
    lane = lane or LANES[lane_id]
    alias = lane["alias"]
    if name != alias:
        fail("llama_lane(name = {}): the spec's alias of {} is {}".format(name, lane_id, alias))
    sdk = sdk_for_lane(lane, SDKS, HOST)
    if sdk["status"] != "AVAILABLE":
        for target in [alias, alias + ".lane.json"]:
            unavailable_lane(name = target, lane_id = lane_id, reason = sdk["reason"], tags = ["manual"], visibility = visibility)
        return
    tags = ["manual"] if heavy else []
    cmake(
        name = alias + "_ggml",
        lib_source = "@llama_cpp//:ggml_srcs",
        lib_name = alias + "_ggml",
        cache_entries = merge_dicts(lane["ggml_cache_entries"], sdk.get("cache_entries", {}), {"GGML_BUILD_COMMIT": PIN["short_commit"]}),
        env = sdk.get("env", {}),
        build_data = sdk.get("build_data", []),
        out_shared_libs = [f for lib in lane["ggml_libs"] for f in ["lib{}.so".format(lib), _soname(lib)]],
        # GGML_BACKEND_DL installs each CPU variant as a module into bin/.
        out_binaries = ["libggml-cpu-{}.so".format(v) for v in lane.get("cpu_variants", [])],
        out_data_dirs = ["lib/cmake"],
        build_args = _PARALLEL,
        generate_args = ["-GNinja"],
        features = STAGE_FEATURES,
        tags = tags,
        visibility = ["//visibility:private"],
    )

    # The lane's tools and llama.cpp's CTest executables from one build of the tree (same cache
    # entries); the lane bundle keeps the former, the CTest bundle the latter.
    llama_stage_targets = lane["targets"] + [t for t in lane["ctest"]["targets"] if t not in lane["targets"]]
    cmake(
        name = alias + "_llama",
        lib_source = "@llama_cpp//:srcs",
        lib_name = alias + "_llama",
        cache_entries = llama_cache_entries(lane_id, lane, sdk),
        env = sdk.get("env", {}),
        build_data = sdk.get("build_data", []),
        deps = [":" + alias + "_ggml"],
        targets = llama_stage_targets,
        install = False,
        # The build tree's directories with the CTestTestfile.cmake files come along.
        postfix_script = install_from_build_tree(llama_stage_targets, lane["llama_libs"], lane["ctest"]["test_dirs"]),
        out_binaries = llama_stage_targets,
        out_shared_libs = lane["llama_libs"],
        out_include_dir = "",
        out_data_dirs = lane["ctest"]["test_dirs"],
        build_args = _PARALLEL,
        generate_args = ["-GNinja"],
        features = STAGE_FEATURES,
        tags = tags,
        visibility = ["//visibility:private"],
    )
    lane_bundle(
        name = alias,
        lane_id = lane_id,
        ggml = ":" + alias + "_ggml",
        llama = ":" + alias + "_llama",
        binaries = lane["targets"],
        sdk_info = "@lane_sdks//:sdks.json",
        sdk_name = sdk["name"],
        spec_entry = json.encode(lane),
        tags = tags,
        visibility = visibility,
    )
    lane_manifest(
        name = alias + ".lane.json",
        lane = ":" + alias,
        tags = tags,
        visibility = visibility,
    )

def _lane_availability_json_impl(ctx):
    lanes = {}
    for lane_id, lane in LANES.items():
        if not lane["alias"]:
            sdk = sdk_for_lane(lane, SDKS, HOST)
            if sdk["status"] == "AVAILABLE":
                sdk = {"name": lane["sdk"], "status": "UNAVAILABLE", "reason": "registered only: no Bazel target for this lane yet"}
        else:
            sdk = sdk_for_lane(lane, SDKS, HOST)
        lanes[lane_id] = {
            "alias": lane["alias"],
            "status": sdk["status"],
            "reason": sdk.get("reason", ""),
            "sdk": sdk.get("name", lane["sdk"]),
            "sdk_version": sdk.get("version", ""),
        }
    out = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.write(out, struct(host = HOST, lanes = lanes).to_json())
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

# {lane_id: {alias, status AVAILABLE|UNAVAILABLE, reason, sdk}} for this host, for the matrix.
lane_availability_json = rule(implementation = _lane_availability_json_impl)
