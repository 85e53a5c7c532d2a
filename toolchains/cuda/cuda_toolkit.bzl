"""Repository rule @cuda_toolkit: the CUDA toolkit the CUDA lane builds with.

mode "hermetic" (default): assembled from sha256-pinned NVIDIA wheels (cuda_wheels_lock.txt).
mode "local" (LANES_CUDA_MODE=local): a symlink to an installed toolkit found by @lane_sdks.
Only the CUDA lane's targets reference this repository, so the ~500 MB of wheels are fetched
only when that lane is built.
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "toolkit",
    srcs = glob(["toolkit/**"], exclude = ["toolkit/**/* *"]),
)

exports_files(["toolkit_info.json"])
"""

def _impl(rctx):
    mode = rctx.os.environ.get("LANES_CUDA_MODE", "hermetic")
    if mode == "local":
        root = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
        rctx.symlink(root, "toolkit")
        rctx.file("toolkit_info.json", struct(mode = "local", root = root).to_json())
    elif mode == "hermetic":
        lock = rctx.path(rctx.attr.lock_file)
        res = rctx.execute(
            ["python3", "-m", "pip", "download", "--isolated", "--quiet", "--no-deps", "--only-binary=:all:",
             "--require-hashes", "--disable-pip-version-check", "--python-version", "3.11",
             "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux2014_x86_64",
             "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_12_x86_64",
             "--platform", "manylinux2010_x86_64", "-d", "wheels", "-r", str(lock)],
            timeout = 3600,
            environment = {"PIP_ROOT_USER_ACTION": "ignore"},
        )
        if res.return_code != 0:
            fail("cuda_toolkit: fetching the pinned CUDA wheels failed:\n" + res.stderr)
        res = rctx.execute(["python3", str(rctx.path(rctx.attr._assembler)), "--wheels", "wheels", "--root", "toolkit"], timeout = 1200)
        if res.return_code != 0:
            fail("cuda_toolkit: " + res.stdout + res.stderr)
        rctx.delete("wheels")
        rctx.file("toolkit_info.json", struct(mode = "hermetic", lock = rctx.read(lock)).to_json())
    else:
        fail("LANES_CUDA_MODE must be hermetic or local, not " + mode)
    rctx.file("BUILD.bazel", _BUILD)
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.name))

cuda_toolkit = repository_rule(
    implementation = _impl,
    attrs = {
        "lock_file": attr.label(default = "//toolchains/cuda:cuda_wheels_lock.txt", allow_single_file = True),
        "_assembler": attr.label(default = "//toolchains/cuda:assemble_toolkit.py", allow_single_file = True),
    },
    environ = ["LANES_CUDA_MODE", "CUDA_PATH"],
)
