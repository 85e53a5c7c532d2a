"""Upstream-default reference builds of the pinned tree, to measure a lane's speed against.

`bazel build //lanes:cpu_upstream` configures the same patched source with upstream's own defaults
(lanes.bzl UPSTREAM_REFERENCE) and builds llama-bench with its libraries. GGML_NATIVE=ON makes the
output depend on the build host's CPU, which no action key sees: the target is never cached or
executed remotely (no-cache, no-remote), so a benchmark always compares with a build of this host.
"""

load("@lane_sdks//:sdks.bzl", "HOST", "SDKS")
load("@rules_foreign_cc//foreign_cc:defs.bzl", "cmake")
load("//lanes/private:lane.bzl", "unavailable_lane")
load("//lanes/private:lanes.bzl", "LANES", "UPSTREAM_REFERENCE", "merge_dicts")
load("//lanes/private:stage.bzl", "STAGE_FEATURES", "install_from_build_tree")
load("//toolchains:sdk.bzl", "sdk_for_lane")

_BENCH_LIBS = ["libllama.so.0", "libllama-common.so.0", "libllama-bench-impl.so"]

def upstream_reference(name, lane_id, lane = None, reference = None, visibility = ["//visibility:public"]):
    """Declares //lanes:<name>: llama-bench (bin/) and its libraries (lib/), upstream defaults.

    Args:
      name: the target name, e.g. "cpu_upstream".
      lane_id: the lane it is the reference for (a key of UPSTREAM_REFERENCE).
      lane: the lane's spec entry; default LANES[lane_id].
      reference: its upstream-default build; default UPSTREAM_REFERENCE[lane_id].
      visibility: of the target.
    """
    ref = reference or UPSTREAM_REFERENCE[lane_id]
    sdk = sdk_for_lane(lane or LANES[lane_id], SDKS, HOST)
    if sdk["status"] != "AVAILABLE":
        unavailable_lane(name = name, lane_id = lane_id, reason = sdk["reason"], tags = ["manual"], visibility = visibility)
        return
    cmake(
        name = name,
        lib_source = "@llama_cpp//:srcs",
        lib_name = name,
        cache_entries = merge_dicts(ref["cache_entries"], sdk.get("cache_entries", {})),
        env = sdk.get("env", {}),
        build_data = sdk.get("build_data", []),
        targets = ["llama-bench"],
        install = False,
        postfix_script = install_from_build_tree(["llama-bench"], _BENCH_LIBS + ["lib{}.so.0".format(lib) for lib in ref["ggml_libs"]]),
        out_binaries = ["llama-bench"],
        out_shared_libs = _BENCH_LIBS + ["lib{}.so.0".format(lib) for lib in ref["ggml_libs"]],
        out_include_dir = "",
        build_args = ["--parallel", "8"],
        generate_args = ["-GNinja"],
        features = STAGE_FEATURES,
        tags = ["manual", "no-cache", "no-remote"],
        visibility = visibility,
    )
