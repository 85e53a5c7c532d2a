"""Repository rule @cuda_toolkit: the CUDA toolkit the CUDA lane builds with.

mode "hermetic" (default): assembled from sha256-pinned NVIDIA wheels (cuda_wheels_lock.txt).
mode "local" (LANES_CUDA_MODE=local): a symlink to the installed toolkit that @lane_sdks found
(the one CUDA detection, cuda_detect.bzl; this rule reads its result, it does not detect again).
Only the CUDA lane's targets reference this repository, so the ~500 MB of wheels are fetched
only when that lane is built.
"""

load("//toolchains/cuda:cuda_detect.bzl", "cuda_mode")

def _libcuda_stub(rctx):
    """Compiles lib/stubs/libcuda.so (SONAME libcuda.so.1), where a toolkit installer puts it.

    The wheels carry no driver library, and ggml-cuda's VMM pool links the driver API. The host's C
    compiler (the lanes' own) builds it against the pinned cuda.h; it is a link input only.

    Args:
      rctx: the repository context.

    Returns:
      The stub's path under the toolkit root.
    """
    cc = rctx.which("cc") or rctx.which("gcc")
    if not cc:
        fail("cuda_toolkit: no C compiler (cc or gcc on PATH) to build the libcuda link stub; install gcc")
    rctx.execute(["mkdir", "-p", "toolkit/lib/stubs"])
    res = rctx.execute([
        str(cc),
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Itoolkit/include",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        "toolkit/lib/stubs/libcuda.so",
        str(rctx.path(rctx.attr._libcuda_stub_source)),
    ], timeout = 300)
    if res.return_code != 0:
        fail("cuda_toolkit: building the libcuda link stub with {} failed:\n{}{}".format(cc, res.stdout, res.stderr))

    # The linker follows libggml-cuda's NEEDED libcuda.so.1 through -rpath-link when it links the tools.
    res = rctx.execute(["ln", "-s", "libcuda.so", "toolkit/lib/stubs/libcuda.so.1"])  # relative, as the toolkit's other links
    if res.return_code != 0:
        fail("cuda_toolkit: linking libcuda.so.1 to the stub failed: " + res.stderr)
    return "lib/stubs/libcuda.so"

def _impl(rctx):
    mode, error = cuda_mode(rctx)
    if error:
        fail("cuda_toolkit: " + error)
    if mode == "local":
        # Not a second detection: the toolkit @lane_sdks found. Reading its result by label also
        # re-runs this rule whenever that detection changes (CUDA_PATH, PATH, a re-detect).
        cuda = json.decode(rctx.read(Label("@lane_sdks//:sdks.json")))["sdks"]["cuda"]
        if cuda["status"] != "AVAILABLE":
            fail("cuda_toolkit: LANES_CUDA_MODE=local: " + cuda["reason"])
        rctx.symlink(cuda["path"], "toolkit")
        rctx.file("toolkit_info.json", struct(mode = "local", root = cuda["path"], nvcc = cuda["nvcc"], version = cuda["version"]).to_json())
    else:
        lock = rctx.path(rctx.attr.lock_file)
        res = rctx.execute(
            [
                "python3",
                "-m",
                "pip",
                "download",
                "--isolated",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "--disable-pip-version-check",
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_27_x86_64",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_17_x86_64",
                "--platform",
                "manylinux_2_12_x86_64",
                "--platform",
                "manylinux2010_x86_64",
                "-d",
                "wheels",
                "-r",
                str(lock),
            ],
            timeout = 3600,
            environment = {"PIP_ROOT_USER_ACTION": "ignore"},
        )
        if res.return_code != 0:
            fail("cuda_toolkit: fetching the pinned CUDA wheels failed:\n" + res.stderr)
        res = rctx.execute(["python3", str(rctx.path(rctx.attr._assembler)), "--wheels", "wheels", "--root", "toolkit"], timeout = 1200)
        if res.return_code != 0:
            fail("cuda_toolkit: " + res.stdout + res.stderr)
        rctx.delete("wheels")
        stub = _libcuda_stub(rctx)
        rctx.file("toolkit_info.json", struct(mode = "hermetic", lock = rctx.read(lock), libcuda_stub = stub).to_json())
    rctx.template("BUILD.bazel", rctx.attr._build_template)
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.name))

cuda_toolkit = repository_rule(
    implementation = _impl,
    attrs = {
        "lock_file": attr.label(default = "//toolchains/cuda:cuda_wheels_lock.txt", allow_single_file = True),
        "_assembler": attr.label(default = "//toolchains/cuda:assemble_toolkit.py", allow_single_file = True),
        "_build_template": attr.label(default = "//toolchains/cuda:BUILD.cuda_toolkit.bazel.tpl", allow_single_file = True),
        "_libcuda_stub_source": attr.label(default = "//toolchains/cuda:libcuda_stub.c", allow_single_file = True),
    },
    # Only the mode: in hermetic mode nothing on the host matters (a PATH change must not re-fetch
    # ~500 MB of wheels; the host's cc builds only the link stub, whose code no lane ships); in local mode reading @lane_sdks's result carries every change. (A label
    # attribute would be resolved in hermetic mode too, so the label is built in _impl instead.)
    environ = ["LANES_CUDA_MODE"],
)
