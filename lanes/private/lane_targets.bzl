"""Every lane's targets, from the spec, by one loop (lanes/BUILD.bazel calls lane_targets()).

For each lane of the spec with an alias:
  <alias>            the lane (bin/, lib/, build evidence; LaneInfo), public
  <alias>.lane.json  its manifest (manifest.bzl), for tools outside the build graph
  <alias>_ggml, <alias>_llama  its two cmake() stages, private to the package
  <alias>_ctest      llama.cpp's CTest bundle (+ <alias>_ctest_report where it gates in CI)
  <alias>_upstream   the upstream-default reference build, for lanes in UPSTREAM_REFERENCE
A lane whose backend is not the CPU is an accelerator lane: tagged manual, built when requested.
Lanes without an alias are registered only (spec and availability, no targets).
"""

load("//lanes/private:ctest.bzl", "llama_ctest")
load("//lanes/private:lane.bzl", "llama_lane")
load("//lanes/private:lanes.bzl", "LANES", "UPSTREAM_REFERENCE")
load("//lanes/private:reference.bzl", "upstream_reference")
load("//lanes/private:spec_schema.bzl", "check_lane_spec")

# buildifier: disable=unnamed-macro (one call per package declares the targets of every lane; each
# is named by its alias, so there is no one name to pass)
def lane_targets(lanes = LANES, upstream_reference_builds = UPSTREAM_REFERENCE, public = ["//visibility:public"], internal = None):
    """Declares every lane's targets in the calling package.

    Args:
      lanes: the spec's lanes ({lane_id: entry}); checked against the LaneSpec schema first.
      upstream_reference_builds: {lane_id: upstream-default build} (UPSTREAM_REFERENCE).
      public: visibility of what users build (the lanes, their manifests, the upstream builds).
      internal: visibility of the CTest bundles and reports (default: the package's).
    """
    check_lane_spec(lanes)
    for lane_id, lane in lanes.items():
        alias = lane["alias"]
        if not alias:
            continue
        heavy = lane["backend"] != "cpu"
        llama_lane(name = alias, lane_id = lane_id, heavy = heavy, lane = lane, visibility = public)
        llama_ctest(name = alias + "_ctest", lane_id = lane_id, heavy = heavy, lane = lane, visibility = internal)
        if lane_id in upstream_reference_builds:
            upstream_reference(
                name = alias + "_upstream",
                lane_id = lane_id,
                lane = lane,
                reference = upstream_reference_builds[lane_id],
                visibility = public,
            )
