"""Detection of the Vulkan SDK for @lane_sdks (one detection, called only from sdk_detect.bzl).

mode "hermetic" (default): the pinned Debian packages of vulkan_sdk_lock.txt, unpacked into
@vulkan_sdk when the lane is built; detection reads only the lock and fetches nothing.
mode "local" (LANES_VULKAN_MODE=local): an installed SDK (headers, loader, glslc, SPIR-V headers)
found through $VULKAN_SDK, then /usr and /usr/local.
"""

load("//toolchains:sdk_result.bzl", "sdk_available", "sdk_unavailable")

# Where Debian and the LunarG SDK put the loader library and SPIRV-Headers' CMake package.
_LIB_DIRS = ["lib/x86_64-linux-gnu", "lib64", "lib"]
_SPIRV_CONFIG_DIRS = ["share/cmake/SPIRV-Headers", "lib/cmake/SPIRV-Headers", "lib/x86_64-linux-gnu/cmake/SPIRV-Headers"]

def parse_deb_lock(text):
    """Parses a Debian package lock (fetch_debs.py validates it fully when fetching).

    Args:
      text: `<package> <version> <architecture> <sha256>` lines; '#' starts a comment.
    Returns:
      [{name, version, architecture, sha256}], in lock order.
    """
    entries = []
    for line in text.splitlines():
        fields = [f for f in line.split("#", 1)[0].replace("\t", " ").split(" ") if f]
        if fields:
            if len(fields) != 4:
                fail("Debian package lock line needs 4 fields: " + line)
            entries.append({"name": fields[0], "version": fields[1], "architecture": fields[2], "sha256": fields[3]})
    return entries

def _hermetic(rctx, lock_label):
    lock = parse_deb_lock(rctx.read(lock_label))
    pins = {e["name"]: e["version"] for e in lock}

    # 1.3.239.0-1 -> 1.3.239 (the Vulkan header version the lane builds against).
    version = ".".join(pins["libvulkan-dev"].split("-")[0].split(".")[:3])
    return sdk_available(
        "vulkan",
        version,
        "@vulkan_sdk//:sdk",
        mode = "hermetic",
        reason = "Vulkan {} (pinned Debian packages)".format(version),
        packages = ",".join(["{}={}".format(e["name"], e["version"]) for e in lock]),
        archives = lock,
    )

def _header_version(rctx, header):
    """1.3.239 from vulkan_core.h: VK_HEADER_VERSION_COMPLETE's major.minor, VK_HEADER_VERSION."""
    complete, patch = "", ""
    for line in rctx.read(header).splitlines():
        if line.startswith("#define VK_HEADER_VERSION_COMPLETE"):
            # VK_MAKE_API_VERSION(0, 1, 3, VK_HEADER_VERSION)
            complete = line.split("(", 1)[-1].rstrip(")").replace(" ", "")
        elif line.startswith("#define VK_HEADER_VERSION "):
            patch = line.strip().split(" ")[-1]
    parts = complete.split(",")
    if len(parts) == 4 and patch:
        return "{}.{}.{}".format(parts[1], parts[2], patch)
    return patch

def _local(rctx, redetect):
    roots = ([rctx.os.environ["VULKAN_SDK"]] if rctx.os.environ.get("VULKAN_SDK") else []) + ["/usr", "/usr/local"]
    root = None
    for r in roots:
        if rctx.path(r + "/include/vulkan/vulkan_core.h").exists:
            root = r
            break
    glslc = ([roots[0] + "/bin/glslc"] if rctx.os.environ.get("VULKAN_SDK") and rctx.path(roots[0] + "/bin/glslc").exists else []) + ([str(rctx.which("glslc"))] if rctx.which("glslc") else [])
    missing = []
    if not root:
        missing.append("Vulkan headers (vulkan/vulkan_core.h; Debian: libvulkan-dev)")
    library = None
    spirv = None
    if root:
        library = [root + "/" + d + "/libvulkan.so" for d in _LIB_DIRS if rctx.path(root + "/" + d + "/libvulkan.so").exists]
        spirv = [root + "/" + d for d in _SPIRV_CONFIG_DIRS if rctx.path(root + "/" + d + "/SPIRV-HeadersConfig.cmake").exists]
        if not library:
            missing.append("the Vulkan loader libvulkan.so under " + root + " (Debian: libvulkan-dev)")
        if not spirv:
            missing.append("SPIRV-Headers' CMake package under " + root + " (Debian: spirv-headers)")
    if not glslc:
        missing.append("glslc on PATH or in $VULKAN_SDK/bin (Debian: glslc)")
    if missing:
        return sdk_unavailable("vulkan", "LANES_VULKAN_MODE=local: no " + "; no ".join(missing), redetect, mode = "local")
    header = root + "/include/vulkan/vulkan_core.h"
    out = rctx.execute([glslc[0], "--version"], timeout = 30)
    if out.return_code != 0 or not out.stdout.strip():
        return sdk_unavailable("vulkan", "LANES_VULKAN_MODE=local: {} --version fails: {}".format(glslc[0], (out.stderr.strip() or "no output")[:300]), redetect, after = "fixing it", mode = "local")
    return sdk_available(
        "vulkan",
        _header_version(rctx, header),
        root,
        mode = "local",
        include_dir = root + "/include",
        library = library[0],
        glslc = glslc[0],
        glslc_version = out.stdout.strip().splitlines()[0],
        spirv_headers_dir = spirv[0],
    )

def detect_vulkan(rctx, lock_label, redetect):
    """The Vulkan SDK in the mode LANES_VULKAN_MODE selects (hermetic by default).

    Args:
      rctx: the repository context of @lane_sdks.
      lock_label: the Label of vulkan_sdk_lock.txt.
      redetect: the command that re-runs detection, appended to every UNAVAILABLE reason.
    Returns:
      the SDK dict (status, reason, version, path, mode, and archives in hermetic mode).
    """
    mode = rctx.os.environ.get("LANES_VULKAN_MODE", "hermetic")
    if mode == "hermetic":
        return _hermetic(rctx, lock_label)
    if mode == "local":
        return _local(rctx, redetect)
    return sdk_unavailable("vulkan", "LANES_VULKAN_MODE must be hermetic or local, not " + mode, redetect, after = "fixing it")
