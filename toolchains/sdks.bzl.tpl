"""Written by @lane_sdks (toolchains/sdk_detect.bzl); re-detect with: bazel sync --only=lane_sdks"""

# {sdk name: {name, status AVAILABLE|UNAVAILABLE, reason, version, path, ...}}
SDKS = %{SDKS}

# {os, arch, bazel_version} of the host that detected them.
HOST = %{HOST}
