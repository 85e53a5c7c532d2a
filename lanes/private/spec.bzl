"""Writes the lane spec (lanes.bzl) as JSON for the Python tools (and the upstream-default reference
builds' cache entries, which GPU hosts without Bazel configure by hand), with the LaneSpec schema
(spec_schema.bzl) as `lane_schema`, which tools/runner/lane_spec.py validates the lanes against."""

load("//lanes/private:lanes.bzl", "LANES", "UPSTREAM_GGML_OPTIONS", "UPSTREAM_REFERENCE")
load("//lanes/private:spec_schema.bzl", "LANE_SPEC_FIELDS", "check_lane_spec")

def _lane_spec_json_impl(ctx):
    check_lane_spec(LANES)
    out = ctx.actions.declare_file(ctx.label.name)
    spec = struct(schema_version = 1, lane_schema = LANE_SPEC_FIELDS, lanes = LANES, upstream_reference = UPSTREAM_REFERENCE, upstream_ggml_options = UPSTREAM_GGML_OPTIONS)
    ctx.actions.write(out, spec.to_json())
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

lane_spec_json = rule(
    implementation = _lane_spec_json_impl,
    doc = "spec.json: {schema_version, lane_schema, lanes, upstream_reference, upstream_ggml_options}.",
)
