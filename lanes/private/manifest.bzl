"""<alias>.lane.json: where a lane's files are, from its LaneInfo, for tools outside Bazel's graph.

Written without reading the lane's files (the action has no inputs), so building the manifest
never builds the lane; a tool reads it to find the lane directory and evidence beside bazel-bin.
"""

load("//lanes/private:providers.bzl", "LaneInfo")

def _lane_manifest_impl(ctx):
    lane = ctx.attr.lane[LaneInfo]
    out = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.write(out, json.encode_indent({
        "alias": lane.alias,
        "evidence": lane.evidence.short_path,
        "evidence_json": lane.evidence_json.short_path,
        "lane_dir": lane.lane_dir_short_path,
        "lane_id": lane.lane_id,
        "schema_version": 1,
    }, indent = "  ") + "\n")
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

lane_manifest = rule(
    implementation = _lane_manifest_impl,
    doc = "{alias, lane_id, lane_dir, evidence, evidence_json, schema_version}: runfiles paths (bazel-bin/<path> outside runfiles).",
    attrs = {
        "lane": attr.label(mandatory = True, providers = [LaneInfo], doc = "the lane target"),
    },
)
