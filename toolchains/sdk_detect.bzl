"""Repository rule @lane_sdks: detects each lane's SDK and says AVAILABLE or UNAVAILABLE, and why.

Detection only; nothing is installed. The result is `@lane_sdks//:sdks.bzl` (SDKS, read by lanes/
to make lanes buildable or to fail with the reason) and `@lane_sdks//:sdks.json` (read by the
matrix and the runner). Re-run when the variables in `environ` change or with `bazel sync`.
"""

# llama.cpp's HIP backend needs HIP >= 6.1 (ggml/src/ggml-hip/CMakeLists.txt).
_MIN_HIP = (6, 1)

def _run(rctx, argv):
    res = rctx.execute(argv, timeout = 30)
    return res.stdout + res.stderr if res.return_code == 0 else None

def _first_line(text):
    return text.strip().splitlines()[0] if text and text.strip() else ""

def _available(name, version, path, **extra):
    return dict(name = name, status = "AVAILABLE", version = version, path = path, reason = "", **extra)

def _unavailable(name, reason, version = "", path = ""):
    return dict(name = name, status = "UNAVAILABLE", version = version, path = path, reason = reason)

def _host_cc(rctx):
    missing = [t for t in ["cmake", "ninja", "cc", "c++"] if not rctx.which(t)]
    if missing:
        return _unavailable("host-cc", "not on PATH: " + ", ".join(missing) + " (install cmake, ninja-build and a C/C++ compiler)")
    cxx = str(rctx.which("c++"))
    return _available(
        "host-cc",
        _first_line(_run(rctx, [cxx, "--version"])),
        cxx,
        cmake = _first_line(_run(rctx, ["cmake", "--version"])),
        ninja = _first_line(_run(rctx, ["ninja", "--version"])),
    )

def _cuda_local(rctx):
    candidates = []
    if rctx.os.environ.get("CUDA_PATH"):
        candidates.append(rctx.os.environ["CUDA_PATH"] + "/bin/nvcc")
    candidates.append("/usr/local/cuda/bin/nvcc")
    on_path = rctx.which("nvcc")
    if on_path:
        candidates.append(str(on_path))
    for nvcc in candidates:
        if rctx.path(nvcc).exists:
            out = _run(rctx, [nvcc, "--version"])
            if out == None:
                continue
            version = ""
            for line in out.splitlines():
                if "release" in line:
                    version = line.split("release")[1].split(",")[0].strip()
                    full = line.split(", V")[-1].strip() if ", V" in line else version
                    version = full
            root = str(rctx.path(nvcc).dirname.dirname)
            cublas = [d for d in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"] if rctx.path("{}/{}/libcublas.so".format(root, d)).exists]
            if not cublas:
                return _unavailable("cuda-local", "nvcc {} at {} but no cuBLAS (libcublas.so) in that toolkit; install cuBLAS for it".format(version, root), version, root)
            cudart = _first_line(_run(rctx, ["sh", "-c", "ls {}/lib*/libcudart.so.*.* {}/targets/*/lib/libcudart.so.*.* 2>/dev/null | head -1".format(root, root)]))
            cublas = _first_line(_run(rctx, ["sh", "-c", "ls {}/lib*/libcublas.so.*.* {}/targets/*/lib/libcublas.so.*.* 2>/dev/null | head -1".format(root, root)]))
            return _available("cuda-local", version, root, nvcc = nvcc, cudart = cudart.rsplit("/", 1)[-1], cublas = cublas.rsplit("/", 1)[-1])
    return _unavailable("cuda-local", "no nvcc in $CUDA_PATH/bin, /usr/local/cuda/bin or on PATH")

def _lock_entries(text):
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            spec, digest = line.split(" --hash=sha256:")
            name, version = spec.split("==")
            entries.append({"name": name, "version": version, "sha256": digest})
    return entries

def _cuda(rctx):
    """The CUDA SDK in the mode LANES_CUDA_MODE selects (hermetic by default)."""
    lock = _lock_entries(rctx.read(rctx.attr.cuda_lock))
    pinned = {e["name"]: e["version"] for e in lock}
    nvcc_pin = pinned["nvidia-cuda-nvcc"]
    mode = rctx.os.environ.get("LANES_CUDA_MODE", "hermetic")
    if mode == "hermetic":
        sdk = _available("cuda", nvcc_pin, "@cuda_toolkit//:toolkit", mode = "hermetic")
        sdk["wheels"] = ",".join(["{}=={}".format(e["name"], e["version"]) for e in lock])
        sdk["archives"] = lock
        return sdk
    if mode != "local":
        return _unavailable("cuda", "LANES_CUDA_MODE must be hermetic or local, not " + mode)
    local = _cuda_local(rctx)
    local["name"], local["mode"] = "cuda", "local"
    if local["status"] != "AVAILABLE":
        return local
    want, got = nvcc_pin.split(".")[:2], local["version"].split(".")[:2]
    if want != got:
        why = "local nvcc {} at {} is CUDA {}, the lane pins CUDA {} (nvcc {})".format(local["version"], local["path"], ".".join(got), ".".join(want), nvcc_pin)
        if rctx.os.environ.get("LANES_CUDA_ALLOW_VERSION_MISMATCH") != "1":
            return _unavailable("cuda", why + "; set LANES_CUDA_ALLOW_VERSION_MISMATCH=1 to build anyway (recorded in the evidence)", local["version"], local["path"])
        local["override"] = "LANES_CUDA_ALLOW_VERSION_MISMATCH=1: " + why
    return local

def _vulkan(rctx):
    header = None
    for d in ([rctx.os.environ["VULKAN_SDK"] + "/include"] if rctx.os.environ.get("VULKAN_SDK") else []) + ["/usr/include", "/usr/local/include"]:
        if rctx.path(d + "/vulkan/vulkan_core.h").exists:
            header = d + "/vulkan/vulkan_core.h"
            break
    glslc = rctx.which("glslc")
    if not header and not glslc:
        return _unavailable("vulkan", "no Vulkan headers (vulkan/vulkan_core.h) and no glslc; install libvulkan-dev, glslc and spirv-headers")
    if not header:
        return _unavailable("vulkan", "no Vulkan headers (vulkan/vulkan_core.h); install libvulkan-dev")
    if not glslc:
        return _unavailable("vulkan", "no glslc shader compiler on PATH; install glslc")
    version = ""
    for line in rctx.read(header).splitlines():
        if line.startswith("#define VK_HEADER_VERSION_COMPLETE"):
            version = line.split("VK_MAKE_API_VERSION(")[-1].rstrip(")").replace(" ", "")
        elif line.startswith("#define VK_HEADER_VERSION ") and not version:
            version = line.split()[-1]
    return _available("vulkan", "headers " + version, header, glslc = str(glslc), glslc_version = _first_line(_run(rctx, [str(glslc), "--version"])))

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
        return _unavailable("rocm", "no hipcc in $ROCM_PATH/bin, /opt/rocm/bin or on PATH (ROCm/HIP >= 6.1 with rocBLAS and hipBLAS is required)")
    out = _run(rctx, [hipcc, "--version"]) or ""
    version = ""
    for line in out.splitlines():
        if line.startswith("HIP version:"):
            version = line.split(":", 1)[1].strip()
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return _unavailable("rocm", "cannot read the HIP version from `{} --version`".format(hipcc), path = hipcc)
    if (int(parts[0]), int(parts[1])) < _MIN_HIP:
        return _unavailable("rocm", "hipcc {} is HIP {}; llama.cpp needs HIP >= {}.{}".format(hipcc, version, _MIN_HIP[0], _MIN_HIP[1]), version, hipcc)
    return _available("rocm", version, hipcc)

def _metal(rctx):
    if not rctx.os.name.startswith("mac"):
        return _unavailable("metal", "Metal needs macOS with Xcode (metal, metallib); this host runs {}".format(rctx.os.name))
    metal = _run(rctx, ["xcrun", "-f", "metal"])
    if metal == None:
        return _unavailable("metal", "xcrun cannot find the metal compiler; install Xcode (not only the Command Line Tools)")
    return _available("metal", _first_line(_run(rctx, ["xcrun", "metal", "--version"])), metal.strip())

def _impl(rctx):
    sdks = {
        "host-cc": _host_cc(rctx),
        "cuda": _cuda(rctx),
        "vulkan": _vulkan(rctx),
        "rocm": _rocm(rctx),
        "metal": _metal(rctx),
    }
    # Debian's bazel-bootstrap reports no version of its own; its package version is the truth there.
    bazel_version = native.bazel_version or "bazel-bootstrap " + (_run(rctx, ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"]) or "unknown").strip()
    host = struct(os = rctx.os.name, arch = _first_line(_run(rctx, ["uname", "-m"])), bazel_version = bazel_version)
    rctx.file("sdks.json", struct(host = host, sdks = sdks).to_json())
    rctx.file("sdks.bzl", "SDKS = {}\nHOST = {}\n".format(repr(sdks), repr({"os": host.os, "arch": host.arch, "bazel_version": host.bazel_version})))
    rctx.file("BUILD.bazel", 'package(default_visibility = ["//visibility:public"])\n\nexports_files(["sdks.json", "sdks.bzl"])\n')
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.name))

lane_sdks = repository_rule(
    implementation = _impl,
    attrs = {"cuda_lock": attr.label(default = "//toolchains/cuda:cuda_wheels_lock.txt", allow_single_file = True)},
    environ = ["CUDA_PATH", "PATH", "ROCM_PATH", "VULKAN_SDK", "LANES_CUDA_MODE", "LANES_CUDA_ALLOW_VERSION_MISMATCH"],
    local = True,
)
