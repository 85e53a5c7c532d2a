# @lane_sdks: what toolchains/sdk_detect.bzl found on this host (sdks.bzl for lanes/, sdks.json for
# the matrix and the runner). Re-detect with: bazel sync --only=lane_sdks
package(default_visibility = ["//visibility:public"])

exports_files([
    "sdks.bzl",
    "sdks.json",
])
