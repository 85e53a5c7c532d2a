# @cuda_toolkit: the CUDA toolkit of the CUDA lane (toolchains/cuda/cuda_toolkit.bzl).
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "toolkit",
    srcs = glob(
        ["toolkit/**"],
        exclude = ["toolkit/**/* *"],
    ),
)

exports_files(["toolkit_info.json"])
