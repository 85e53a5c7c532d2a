"""ROCm/HIP (hipcc) of the HIP lane, for @lane_sdks."""

load("//toolchains:sdk_result.bzl", "run_tool", "sdk_available", "sdk_detector", "sdk_unavailable")

# llama.cpp's HIP backend needs HIP >= 6.1 (ggml/src/ggml-hip/CMakeLists.txt).
_MIN_HIP = (6, 1)

def _rocm(rctx):
    roots = [rctx.os.environ.get("ROCM_PATH", ""), "/opt/rocm"]
    hipcc = None
    for r in roots:
        if r and rctx.path(r + "/bin/hipcc").exists:
            hipcc = r + "/bin/hipcc"
            break
    if not hipcc and rctx.which("hipcc"):
        hipcc = str(rctx.which("hipcc"))
    if not hipcc:
        return sdk_unavailable("rocm", "no hipcc in $ROCM_PATH/bin, /opt/rocm/bin or on PATH (ROCm/HIP >= 6.1 with rocBLAS and hipBLAS is required)")
    out = run_tool(rctx, [hipcc, "--version"]) or ""
    version = ""
    for line in out.splitlines():
        if line.startswith("HIP version:"):
            version = line.split(":", 1)[1].strip()
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return sdk_unavailable("rocm", "cannot read the HIP version from `{} --version`".format(hipcc), path = hipcc, after = "fixing it")
    if (int(parts[0]), int(parts[1])) < _MIN_HIP:
        return sdk_unavailable("rocm", "hipcc {} is HIP {}; llama.cpp needs HIP >= {}.{}".format(hipcc, version, _MIN_HIP[0], _MIN_HIP[1]), version = version, path = hipcc, after = "installing a newer HIP")
    return sdk_available("rocm", version, hipcc)

ROCM_SDK = sdk_detector("rocm", _rocm, environ = ["ROCM_PATH", "PATH"])
