"""A spec with one more lane than the real one: a new backend on the host toolchain.

It is what adding a lane is on the Starlark side: one entry of the spec (lanes/private/lanes.bzl
LANES); lane_targets() declares its targets from it with nothing else edited.
"""

load("//lanes/private:lanes.bzl", "LANES")

SYNTHETIC_LANE_ID = "linux-x86_64-synthetic"

SYNTHETIC_LANES = {
    SYNTHETIC_LANE_ID: dict(
        LANES["linux-x86_64-cpu"],
        alias = "synthetic",
        backend = "synthetic",
        notes = "a test lane: never built, only analysed",
    ),
}
