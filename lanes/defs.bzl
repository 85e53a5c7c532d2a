"""Public API of the lanes: what a BUILD file or rule outside lanes/ loads.

    load("//lanes:defs.bzl", "LaneInfo")

    def _impl(ctx):
        lane = ctx.attr.lane[LaneInfo]  # lane.lane_dir, lane.evidence, lane.spec_entry, ...

Everything else is under lanes/private/ and may change without notice.
"""

load("//lanes/private:lane_targets.bzl", _lane_targets = "lane_targets")
load("//lanes/private:lanes.bzl", _LANES = "LANES")
load("//lanes/private:providers.bzl", _LaneInfo = "LaneInfo")
load("//lanes/private:spec_schema.bzl", _LANE_SPEC_FIELDS = "LANE_SPEC_FIELDS")

LaneInfo = _LaneInfo

# The lane spec ({lane_id: entry}) and its schema, read-only.
LANES = _LANES
LANE_SPEC_FIELDS = _LANE_SPEC_FIELDS

# Declares every lane's targets from a spec (lanes/BUILD.bazel; a test package for a synthetic spec).
lane_targets = _lane_targets
