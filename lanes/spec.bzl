"""Writes the lane spec (lanes.bzl) as JSON for the Python tools."""

load("//lanes:lanes.bzl", "LANES")

def _lane_spec_json_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.write(out, struct(schema_version = 1, lanes = LANES).to_json())
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

lane_spec_json = rule(implementation = _lane_spec_json_impl)
