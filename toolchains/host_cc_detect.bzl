"""The host C/C++ toolchain (cmake, ninja, cc, c++) of the CPU lanes, for @lane_sdks."""

load("//toolchains:sdk_result.bzl", "first_line", "run_tool", "sdk_available", "sdk_detector", "sdk_unavailable")

def _host_cc(rctx):
    missing = [t for t in ["cmake", "ninja", "cc", "c++"] if not rctx.which(t)]
    if missing:
        return sdk_unavailable("host-cc", "not on PATH: " + ", ".join(missing) + " (install cmake, ninja-build and a C/C++ compiler)")
    cxx = str(rctx.which("c++"))
    return sdk_available(
        "host-cc",
        first_line(run_tool(rctx, [cxx, "--version"])),
        cxx,
        cmake = first_line(run_tool(rctx, ["cmake", "--version"])),
        ninja = first_line(run_tool(rctx, ["ninja", "--version"])),
    )

HOST_CC_SDK = sdk_detector("host-cc", _host_cc, environ = ["PATH"])
