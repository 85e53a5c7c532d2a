"""Writes the lane spec (lanes.bzl) as JSON for the Python tools (and the upstream-default reference
builds' cache entries, which GPU hosts without Bazel configure by hand)."""

load("//lanes:lanes.bzl", "LANES", "UPSTREAM_REFERENCE")

def _lane_spec_json_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.write(out, struct(schema_version = 1, lanes = LANES, upstream_reference = UPSTREAM_REFERENCE).to_json())
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

lane_spec_json = rule(implementation = _lane_spec_json_impl)
