"""Analysis-time checks of lane_targets() on a synthetic spec, run as a test (never builds a lane).

The test depends on the synthetic lane's targets for their providers only: none of their files is
in its runfiles, so `bazel test` analyses the lane and builds nothing of it.
"""

load("//lanes/private:providers.bzl", "LaneInfo")
load("//lanes/private:spec_schema.bzl", "lane_spec_problems")

def _problems(ctx):
    problems = []
    lane = ctx.attr.lane[LaneInfo]
    want = {
        "alias": ctx.attr.alias,
        "lane_id": ctx.attr.lane_id,
        "lane_dir_short_path": ctx.label.package + "/" + ctx.attr.alias,
        "evidence": ctx.attr.alias + ".evidence.pb",
        "evidence_json": ctx.attr.alias + ".evidence.json",
    }
    got = {
        "alias": lane.alias,
        "lane_id": lane.lane_id,
        "lane_dir_short_path": lane.lane_dir_short_path,
        "evidence": lane.evidence.basename,
        "evidence_json": lane.evidence_json.basename,
    }
    for field in sorted(want):
        if got[field] != want[field]:
            problems.append("LaneInfo.{} is {}, expected {}".format(field, got[field], want[field]))
    if lane.spec_entry.get("backend") != ctx.attr.lane_id.split("-")[-1]:
        problems.append("LaneInfo.spec_entry is not the lane's spec entry: {}".format(lane.spec_entry.get("backend")))
    for target in ctx.attr.also_declared:
        if not target.label.name.startswith(ctx.attr.alias):
            problems.append("{} is not one of the lane's targets".format(target.label))

    # The schema check can fail: a renamed field, a missing one and a retyped one are all named.
    bad = dict(lane.spec_entry, log_evidence_v2 = [], rpc = "yes")
    bad.pop("targets")
    found = lane_spec_problems(lane.lane_id, bad)
    for expected in ["field log_evidence_v2 is not in the LaneSpec schema", "required field targets is missing", "field rpc is a string, the schema says bool"]:
        if not [p for p in found if expected in p]:
            problems.append("lane_spec_problems missed: " + expected)
    if lane_spec_problems(lane.lane_id, lane.spec_entry):
        problems.append("the synthetic lane does not match the schema: {}".format(lane_spec_problems(lane.lane_id, lane.spec_entry)))
    return problems

def _lane_targets_test_impl(ctx):
    problems = _problems(ctx)
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    lines = ["#!/bin/sh"]
    if problems:
        lines += ["echo {}".format(repr(p)) for p in problems] + ["exit 1"]
    else:
        lines.append("echo 'lane_targets: {} targets, LaneInfo and the schema check as expected'".format(1 + len(ctx.attr.also_declared)))
    ctx.actions.write(script, "\n".join(lines) + "\n", is_executable = True)
    return [DefaultInfo(executable = script)]

lane_targets_test = rule(
    implementation = _lane_targets_test_impl,
    test = True,
    doc = "Checks the LaneInfo of a lane declared by lane_targets() and the LaneSpec schema check.",
    attrs = {
        "alias": attr.string(mandatory = True),
        "lane_id": attr.string(mandatory = True),
        "lane": attr.label(mandatory = True, providers = [LaneInfo]),
        "also_declared": attr.label_list(doc = "the lane's other targets; analysed, never built"),
    },
)
