"""Metal (Xcode's metal compiler) of the Metal lane, for @lane_sdks."""

load("//toolchains:sdk_result.bzl", "first_line", "run_tool", "sdk_available", "sdk_detector", "sdk_unavailable")

def _metal(rctx):
    if not rctx.os.name.startswith("mac"):
        # No installation changes the host's OS: nothing to re-detect.
        return sdk_unavailable("metal", "Metal needs macOS with Xcode (metal, metallib); this host runs {}".format(rctx.os.name), redetect = "")
    metal = run_tool(rctx, ["xcrun", "-f", "metal"])
    if metal == None:
        return sdk_unavailable("metal", "xcrun cannot find the metal compiler; install Xcode (not only the Command Line Tools)")
    return sdk_available("metal", first_line(run_tool(rctx, ["xcrun", "metal", "--version"])), metal.strip())

METAL_SDK = sdk_detector("metal", _metal)
