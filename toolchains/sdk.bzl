"""Maps a lane to the detected SDK that builds it (detection: sdk_detect.bzl; the SDKs: sdk_table.bzl)."""

load("//toolchains:sdk_table.bzl", "SDK_DETECTORS_BY_NAME")

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

def sdk_for_lane(lane, sdks, host):
    """Returns the SDK dict for a lane: status, reason, name, plus build env and cache entries.

    A lane for another OS or CPU than this host is UNAVAILABLE whatever SDKs are installed.

    Args:
      lane: a lane of the spec (lanes/private/lanes.bzl).
      sdks: SDKS of @lane_sdks//:sdks.bzl.
      host: HOST of @lane_sdks//:sdks.bzl.
    Returns:
      the lane's SDK dict, with env, cache_entries and build_data when it is AVAILABLE.
    """
    host_os = "darwin" if host["os"].startswith("mac") else host["os"].split(" ")[0]
    host_arch = _ARCH_ALIASES.get(host["arch"], host["arch"])
    lane_arch = _ARCH_ALIASES.get(lane["arch"], lane["arch"])
    if (lane["os"], lane_arch) != (host_os, host_arch):
        return {"name": lane["sdk"], "status": "UNAVAILABLE", "reason": "needs a {}-{} host; this host is {}-{}".format(lane["os"], lane["arch"], host_os, host_arch)}
    sdk = dict(sdks[lane["sdk"]])
    if sdk["status"] == "AVAILABLE":
        sdk.update(SDK_DETECTORS_BY_NAME[lane["sdk"]].build(sdk))
    return sdk
