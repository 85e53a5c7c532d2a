"""The one CUDA detection: the mode, the pinned wheels, and a local toolkit's nvcc.

Called by both repository rules that need CUDA: @lane_sdks (CUDA_SDK, its entry of
//toolchains:sdk_table.bzl: AVAILABLE or UNAVAILABLE and why, and what the CUDA lane builds with)
and @cuda_toolkit (cuda_toolkit.bzl: links or assembles the toolkit), so both read LANES_CUDA_MODE
the same way and find the same local toolkit in the same order.
"""

load("//toolchains:sdk_result.bzl", "sdk_available", "sdk_detector", "sdk_unavailable")

# Read by label, so @lane_sdks re-runs when the pinned wheels change.
_WHEEL_LOCK = Label("//toolchains/cuda:cuda_wheels_lock.txt")

CUDA_MODES = ["hermetic", "local"]

# Every variable the detection reads: both rules declare these in `environ`.
CUDA_ENVIRON = ["CUDA_PATH", "PATH", "LANES_CUDA_MODE", "LANES_CUDA_ALLOW_VERSION_MISMATCH"]

def cuda_mode(rctx):
    """Reads LANES_CUDA_MODE (default hermetic).

    Args:
      rctx: a repository context.
    Returns:
      (mode, error): error is "" when the mode is one of CUDA_MODES.
    """
    mode = rctx.os.environ.get("LANES_CUDA_MODE", "hermetic")
    if mode not in CUDA_MODES:
        return mode, "LANES_CUDA_MODE must be {}, not {}".format(" or ".join(CUDA_MODES), mode)
    return mode, ""

def parse_wheel_lock(text):
    """Parses the CUDA wheel lock.

    Args:
      text: `name==version --hash=sha256:<hex>` lines; '#' lines are comments.
    Returns:
      [{name, version, sha256}], in lock order.
    """
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            spec, digest = line.split(" --hash=sha256:")
            name, version = spec.split("==")
            entries.append({"name": name, "version": version, "sha256": digest})
    return entries

def _nvcc_candidates(rctx):
    """$CUDA_PATH/bin/nvcc, then /usr/local/cuda/bin/nvcc, then nvcc on PATH."""
    candidates = []
    if rctx.os.environ.get("CUDA_PATH"):
        candidates.append(rctx.os.environ["CUDA_PATH"] + "/bin/nvcc")
    candidates.append("/usr/local/cuda/bin/nvcc")
    on_path = rctx.which("nvcc")
    if on_path:
        candidates.append(str(on_path))
    return candidates

def _nvcc_version(out):
    """`Cuda compilation tools, release 13.0, V13.0.88` -> 13.0.88."""
    for line in out.splitlines():
        if "release" in line:
            return line.split(", V")[-1].strip() if ", V" in line else line.split("release")[1].split(",")[0].strip()
    return ""

def _first_lib(rctx, root, pattern):
    res = rctx.execute(["sh", "-c", "ls {r}/lib*/{p} {r}/targets/*/lib/{p} 2>/dev/null | head -1".format(r = root, p = pattern)], timeout = 30)
    return res.stdout.strip().rsplit("/", 1)[-1]

def find_local_cuda(rctx):
    """Finds the first working local toolkit ($CUDA_PATH, /usr/local/cuda, PATH).

    Args:
      rctx: a repository context.
    Returns:
      {root, nvcc, version, cudart, cublas}, or a dict with `error` (what is missing).
    """
    for nvcc in _nvcc_candidates(rctx):
        if not rctx.path(nvcc).exists:
            continue
        res = rctx.execute([nvcc, "--version"], timeout = 30)
        if res.return_code != 0:
            continue
        version = _nvcc_version(res.stdout + res.stderr)
        root = str(rctx.path(nvcc).dirname.dirname)
        found = {"root": root, "nvcc": nvcc, "version": version}
        if not [d for d in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"] if rctx.path("{}/{}/libcublas.so".format(root, d)).exists]:
            found["error"] = "nvcc {} at {} but no cuBLAS (libcublas.so) in that toolkit; install cuBLAS for it".format(version, root)
            return found
        found["cudart"] = _first_lib(rctx, root, "libcudart.so.*.*")
        found["cublas"] = _first_lib(rctx, root, "libcublas.so.*.*")
        return found
    return {"error": "no nvcc in $CUDA_PATH/bin, /usr/local/cuda/bin or on PATH"}

def _detect(rctx):
    """The CUDA SDK in the mode LANES_CUDA_MODE selects (hermetic by default)."""
    lock = parse_wheel_lock(rctx.read(_WHEEL_LOCK))
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

def _build(_sdk):
    # Both modes go through @cuda_toolkit (wheels assembled, or a link to the local toolkit),
    # which only the CUDA lane references: nothing is fetched unless that lane is built.
    root = "$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit"
    return {
        # The toolkit first, then the action's own PATH (cmake, ninja, the host compiler).
        "env": {"PATH": root + "/bin:$PATH", "CUDAToolkit_ROOT": root, "CUDA_PATH": root},
        "cache_entries": {
            "CMAKE_CUDA_COMPILER": root + "/bin/nvcc",
            # Every CUDA compile through it, so no build path or process id reaches an object (the
            # upstream reference's too; the llama stage compiles no CUDA and leaves it unused).
            "CMAKE_CUDA_COMPILER_LAUNCHER": "$EXT_BUILD_ROOT/toolchains/cuda/nvcc_reproducible.sh",
            # libggml-cuda's cudart/cuBLAS are found at link time here, at run time via RUNPATH
            # or the host's CUDA install (the runner records which were loaded); libcuda.so.1 at
            # link time is the toolkit's stub, at run time the host driver's.
            "CMAKE_EXE_LINKER_FLAGS": "-Wl,-rpath-link," + root + "/lib -Wl,-rpath-link," + root + "/lib64/stubs",
            "CMAKE_SHARED_LINKER_FLAGS": "-Wl,-rpath-link," + root + "/lib -Wl,-rpath-link," + root + "/lib64/stubs",
            # ggml-cuda's VMM pool links the driver API (CUDA::cuda_driver): the toolkit's stub,
            # named, so that no libcuda.so of the build host is ever picked up instead.
            "CUDA_cuda_driver_LIBRARY": root + "/lib64/stubs/libcuda.so",
        },
        "build_data": ["@cuda_toolkit//:toolkit", "@//toolchains/cuda:nvcc_reproducible.sh"],
    }

CUDA_SDK = sdk_detector("cuda", _detect, _build, environ = CUDA_ENVIRON)
