"""The Vulkan SDK for @lane_sdks (VULKAN_SDK, its entry of //toolchains:sdk_table.bzl).

mode "hermetic" (default): the pinned Debian packages of vulkan_sdk_lock.txt, unpacked into
@vulkan_sdk when the lane is built; detection reads only the lock and fetches nothing.
mode "local" (LANES_VULKAN_MODE=local): an installed SDK (headers, loader, glslc, SPIR-V headers)
found through $VULKAN_SDK, then /usr and /usr/local.
"""

load("//toolchains:sdk_result.bzl", "REDETECT", "sdk_available", "sdk_detector", "sdk_unavailable")

# Read by label, so @lane_sdks re-runs when the pinned packages change.
_SDK_LOCK = Label("//toolchains/vulkan:vulkan_sdk_lock.txt")

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

def _build(sdk):
    """env, cache_entries and build_data of a Vulkan lane, hermetic (@vulkan_sdk) or local."""
    if sdk.get("mode") == "local":
        include, library, glslc, spirv = sdk["include_dir"], sdk["library"], sdk["glslc"], sdk["spirv_headers_dir"]
        env, build_data = {}, []
    else:
        # Only the Vulkan lane references @vulkan_sdk: nothing is fetched unless that lane is built.
        root = "$EXT_BUILD_ROOT/external/vulkan_sdk"
        include = root + "/usr/include"
        library = root + "/usr/lib/x86_64-linux-gnu/libvulkan.so"

        # bin/glslc runs usr/bin/glslc with the unpacked libshaderc.so.1 (the host has none).
        glslc = root + "/bin/glslc"
        spirv = root + "/usr/share/cmake/SPIRV-Headers"
        env = {"PATH": root + "/bin:$PATH"}
        build_data = ["@vulkan_sdk//:sdk"]
    lib_dir = library.rsplit("/", 1)[0]
    return {
        "env": env,
        "cache_entries": {
            "Vulkan_INCLUDE_DIR": include,
            "Vulkan_LIBRARY": library,
            "Vulkan_GLSLC_EXECUTABLE": glslc,
            # find_package(SPIRV-Headers CONFIG) in ggml-vulkan's CMakeLists.txt.
            "SPIRV-Headers_DIR": spirv,
            # Tools link libggml-vulkan, whose libvulkan.so.1 the linker must find; at run time
            # the runner supplies the loader (the host's, or @vulkan_sdk//:loader).
            "CMAKE_EXE_LINKER_FLAGS": "-Wl,-rpath-link," + lib_dir,
            "CMAKE_SHARED_LINKER_FLAGS": "-Wl,-rpath-link," + lib_dir,
        },
        "build_data": build_data,
    }

def _detect(rctx):
    return detect_vulkan(rctx, _SDK_LOCK, REDETECT)

VULKAN_SDK = sdk_detector(
    "vulkan",
    _detect,
    _build,
    environ = ["VULKAN_SDK", "LANES_VULKAN_MODE", "PATH"],
)
