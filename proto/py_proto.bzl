"""Generates Python protobuf modules with the protoc pinned in @pypi (grpcio-tools)."""

load("@rules_python//python:defs.bzl", "py_library")

def _py_proto_gen_impl(ctx):
    outs = []
    for src in ctx.files.srcs:
        outs.append(ctx.actions.declare_file(src.basename[:-len(".proto")] + "_pb2.py"))
    ctx.actions.run(
        executable = ctx.executable._protoc,
        arguments = ["-I" + (ctx.label.workspace_root or "."), "--python_out=" + ctx.bin_dir.path] + [s.path for s in ctx.files.srcs],
        inputs = ctx.files.srcs + ctx.files.deps,
        outputs = outs,
        mnemonic = "Protoc",
        progress_message = "protoc (python) %s" % ctx.label,
    )
    return [DefaultInfo(files = depset(outs))]

_py_proto_gen = rule(
    implementation = _py_proto_gen_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".proto"]),
        "deps": attr.label_list(allow_files = [".proto"]),
        "_protoc": attr.label(default = "//proto:protoc", executable = True, cfg = "exec"),
    },
)

def py_proto_library(name, srcs, deps = [], visibility = None):
    """A py_library of the *_pb2.py modules generated from srcs."""
    _py_proto_gen(name = name + "_gen", srcs = srcs, deps = native.glob(["*.proto"]))
    py_library(
        name = name,
        srcs = [":" + name + "_gen"],
        deps = deps + ["@pypi//protobuf"],
        visibility = visibility,
    )
