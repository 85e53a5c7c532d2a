"""Repository rule @lane_sdks: detects each lane's SDK and says AVAILABLE or UNAVAILABLE, and why.

Detection only; nothing is installed or fetched. The result is `@lane_sdks//:sdks.bzl` (SDKS, read
by lanes/ to make lanes buildable or to fail with the reason) and `@lane_sdks//:sdks.json` (read by
the matrix and the runner).

When it re-runs: Bazel re-runs this rule when a variable in `environ` changes (PATH, CUDA_PATH,
ROCM_PATH, VULKAN_SDK, the LANES_* modes) or a file it reads by label changes (the locks), on
`bazel sync --configure` (configure = True) and on `bazel sync --only=lane_sdks`. An SDK installed
into a directory already on PATH changes none of these, so every UNAVAILABLE reason ends with the
command that re-detects (sdk_result.REDETECT).
"""

load("//toolchains:sdk_result.bzl", "REDETECT", "sdk_available", "sdk_unavailable")
load("//toolchains/cuda:cuda_detect.bzl", "CUDA_ENVIRON", "cuda_mode", "find_local_cuda", "parse_wheel_lock")
load("//toolchains/vulkan:vulkan_detect.bzl", "detect_vulkan")

# llama.cpp's HIP backend needs HIP >= 6.1 (ggml/src/ggml-hip/CMakeLists.txt).
_MIN_HIP = (6, 1)

def _run(rctx, argv):
    res = rctx.execute(argv, timeout = 30)
    return res.stdout + res.stderr if res.return_code == 0 else None

def _first_line(text):
    return text.strip().splitlines()[0] if text and text.strip() else ""

def _host_cc(rctx):
    missing = [t for t in ["cmake", "ninja", "cc", "c++"] if not rctx.which(t)]
    if missing:
        return sdk_unavailable("host-cc", "not on PATH: " + ", ".join(missing) + " (install cmake, ninja-build and a C/C++ compiler)")
    cxx = str(rctx.which("c++"))
    return sdk_available(
        "host-cc",
        _first_line(_run(rctx, [cxx, "--version"])),
        cxx,
        cmake = _first_line(_run(rctx, ["cmake", "--version"])),
        ninja = _first_line(_run(rctx, ["ninja", "--version"])),
    )

def _cuda(rctx):
    """The CUDA SDK in the mode LANES_CUDA_MODE selects (hermetic by default)."""
    lock = parse_wheel_lock(rctx.read(rctx.attr.cuda_lock))
    nvcc_pin = {e["name"]: e["version"] for e in lock}["nvidia-cuda-nvcc"]
    mode, error = cuda_mode(rctx)
    if error:
        return sdk_unavailable("cuda", error, after = "fixing it")
    if mode == "hermetic":
        sdk = sdk_available("cuda", nvcc_pin, "@cuda_toolkit//:toolkit", mode = "hermetic")
        sdk["wheels"] = ",".join(["{}=={}".format(e["name"], e["version"]) for e in lock])
        sdk["archives"] = lock
        return sdk
    local = find_local_cuda(rctx)
    if local.get("error"):
        return sdk_unavailable("cuda", local["error"], version = local.get("version", ""), path = local.get("root", ""), mode = "local")
    want, got = nvcc_pin.split(".")[:2], local["version"].split(".")[:2]
    extra = {}
    if want != got:
        why = "local nvcc {} at {} is CUDA {}, the lane pins CUDA {} (nvcc {})".format(local["version"], local["root"], ".".join(got), ".".join(want), nvcc_pin)
        if rctx.os.environ.get("LANES_CUDA_ALLOW_VERSION_MISMATCH") != "1":
            return sdk_unavailable("cuda", why + "; set LANES_CUDA_ALLOW_VERSION_MISMATCH=1 to build anyway (recorded in the evidence)", version = local["version"], path = local["root"], after = "installing CUDA " + ".".join(want), mode = "local")
        extra["override"] = "LANES_CUDA_ALLOW_VERSION_MISMATCH=1: " + why
    return sdk_available("cuda", local["version"], local["root"], mode = "local", nvcc = local["nvcc"], cudart = local["cudart"], cublas = local["cublas"], **extra)

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
    out = _run(rctx, [hipcc, "--version"]) or ""
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

def _metal(rctx):
    if not rctx.os.name.startswith("mac"):
        # No installation changes the host's OS: nothing to re-detect.
        return sdk_unavailable("metal", "Metal needs macOS with Xcode (metal, metallib); this host runs {}".format(rctx.os.name), redetect = "")
    metal = _run(rctx, ["xcrun", "-f", "metal"])
    if metal == None:
        return sdk_unavailable("metal", "xcrun cannot find the metal compiler; install Xcode (not only the Command Line Tools)")
    return sdk_available("metal", _first_line(_run(rctx, ["xcrun", "metal", "--version"])), metal.strip())

def _impl(rctx):
    sdks = {
        "host-cc": _host_cc(rctx),
        "cuda": _cuda(rctx),
        "vulkan": detect_vulkan(rctx, rctx.attr.vulkan_lock, REDETECT),
        "rocm": _rocm(rctx),
        "metal": _metal(rctx),
    }

    # Debian's bazel-bootstrap reports no version of its own; its package version is the truth there.
    bazel_version = native.bazel_version or "bazel-bootstrap " + (_run(rctx, ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"]) or "unknown").strip()
    host = struct(os = rctx.os.name, arch = _first_line(_run(rctx, ["uname", "-m"])), bazel_version = bazel_version)
    rctx.file("sdks.json", struct(host = host, sdks = sdks).to_json())
    rctx.template("sdks.bzl", rctx.attr._sdks_template, substitutions = {
        "%{HOST}": repr({"os": host.os, "arch": host.arch, "bazel_version": host.bazel_version}),
        "%{SDKS}": repr(sdks),
    })
    rctx.template("BUILD.bazel", rctx.attr._build_template)
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.name))

lane_sdks = repository_rule(
    implementation = _impl,
    doc = "Detects every lane's SDK (see the module docstring for when it re-runs).",
    attrs = {
        "cuda_lock": attr.label(default = "//toolchains/cuda:cuda_wheels_lock.txt", allow_single_file = True),
        "vulkan_lock": attr.label(default = "//toolchains/vulkan:vulkan_sdk_lock.txt", allow_single_file = True),
        "_build_template": attr.label(default = "//toolchains:BUILD.lane_sdks.bazel.tpl", allow_single_file = True),
        "_sdks_template": attr.label(default = "//toolchains:sdks.bzl.tpl", allow_single_file = True),
    },
    environ = CUDA_ENVIRON + ["ROCM_PATH", "VULKAN_SDK", "LANES_VULKAN_MODE"],
    configure = True,
    local = True,
)
