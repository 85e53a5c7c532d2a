"""The CUDA lanes' nvcc launcher makes a CUDA object the same bytes wherever and whenever it is built.

Without toolchains/cuda/nvcc_reproducible.sh (the CUDA SDK's CMAKE_CUDA_COMPILER_LAUNCHER) two
compiles of one source from two build roots differ: nvcc's process id names its intermediate files,
__FILE__ holds the root, and CCCL's internal-linkage entities are named after a hash of the absolute
source path; each of the three alone keeps them apart (shown here, so the test can fail). Through
the launcher they are identical. Uses the pinned toolkit (@cuda_toolkit), hence manual:
`bazel test //tests:cuda_reproducible_test`.
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
# Where the cmake() action's exec root holds the launcher and a ggml-cuda source.
LAUNCHER_UNDER_ROOT = "toolchains/cuda/nvcc_reproducible.sh"
SOURCE_UNDER_ROOT = "external/llama_cpp/src/ggml/src/ggml-cuda/scale.cu"
LAUNCHER = RUNFILES / "lanes" / LAUNCHER_UNDER_ROOT
NVCC = RUNFILES / "cuda_toolkit" / "toolkit" / "bin" / "nvcc"

# What ggml-cuda does that leaks a build's circumstances: CCCL headers (cub, as argsort.cu), an
# anonymous namespace, __FILE__ in device code, a static kernel and its host stub.
SOURCE = r"""
#include <cub/cub.cuh>
#include <cstdio>
namespace { __device__ int calls; }
static __global__ void scale(float * x, float factor) {
    atomicAdd(&calls, 1);
    if (factor <= 0.0f) { printf("%s:%d: bad factor\n", __FILE__, __LINE__); }
    x[threadIdx.x] *= factor;
}
void launch_scale(float * x) { scale<<<1, 32>>>(x, 2.0f); }
"""


def build_root(parent: pathlib.Path) -> pathlib.Path:
    """A build root laid out as the cmake() action's exec root: the launcher and the source in it."""
    launcher = parent / LAUNCHER_UNDER_ROOT
    launcher.parent.mkdir(parents=True)
    shutil.copy(LAUNCHER, launcher)
    source = parent / SOURCE_UNDER_ROOT
    source.parent.mkdir(parents=True)
    source.write_text(SOURCE)
    (parent / "build" / "CMakeFiles").mkdir(parents=True)
    return parent


def compile_in(root: pathlib.Path, through_launcher: bool, obj: str = "CMakeFiles/scale.cu.o",
               extra: tuple[str, ...] = ()) -> bytes:
    """Compiles as CMake's CUDA rule for ggml-cuda does (Ninja, nvcc dependency files):
    `[launcher] nvcc DEFINES INCLUDES FLAGS -MD -MT OBJECT -MF DEPFILE -x cu -c SOURCE -o OBJECT`."""
    source = root / SOURCE_UNDER_ROOT
    command = [str(NVCC), "-DGGML_CUDA_GRAPHS", f"-I{source.parent}", "-O3", "-DNDEBUG", "--generate-code=arch=compute_90a,code=[compute_90a,sm_90a]",
               "-Xcompiler=-fPIC", "-use_fast_math", "-extended-lambda", "-compress-mode=size", "-Xcompiler", "-Wno-pedantic",
               *extra, "-MD", "-MT", obj, "-MF", obj + ".d", "-x", "cu", "-c", str(source), "-o", obj]
    if through_launcher:
        command.insert(0, str(root / LAUNCHER_UNDER_ROOT))
    subprocess.run(command, cwd=root / "build", check=True, timeout=600, capture_output=True)
    return (root / "build" / obj).read_bytes()


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    if not NVCC.exists():
        pytest.fail(f"{NVCC}: the pinned CUDA toolkit is missing; run `bazel test //tests:cuda_reproducible_test`")
    return (build_root(tmp_path_factory.mktemp("first-root")),
            build_root(tmp_path_factory.mktemp("second-root") / "deeper" / "elsewhere"))


def test_through_the_launcher_two_build_roots_give_identical_objects(roots):
    first, second = (compile_in(root, through_launcher=True) for root in roots)
    assert first == second, "nvcc_reproducible.sh no longer makes the object independent of where it is built"


def test_without_it_they_differ(roots):
    first, second = (compile_in(root, through_launcher=False, obj="CMakeFiles/bare.cu.o") for root in roots)
    assert first != second, "nvcc became reproducible on its own: the launcher may be dropped"


def launcher_flags(root: pathlib.Path) -> dict[str, tuple[str, ...]]:
    """The launcher's three additions for a compile of SOURCE_UNDER_ROOT, by the leak each closes."""
    return {"pid-named intermediate files": ("-objtemp",),
            "__FILE__": (f"-Xcompiler=-ffile-prefix-map={root}=.",),
            "absolute-path hash of internal names": ("-Xcudafe", f"--orig_src_path_name={SOURCE_UNDER_ROOT}")}


# Each of the launcher's three additions is needed: with the other two only, the objects differ.
@pytest.mark.parametrize("leak", ["pid-named intermediate files", "__FILE__", "absolute-path hash of internal names"])
def test_each_of_its_flags_is_needed(roots, leak):
    def other_two(root: pathlib.Path) -> tuple[str, ...]:
        return tuple(flag for name, flags in launcher_flags(root).items() if name != leak for flag in flags)
    first, second = (compile_in(root, through_launcher=False, obj="CMakeFiles/partial.cu.o", extra=other_two(root))
                     for root in roots)
    assert first != second, f"without the launcher's fix for {leak} the objects are still identical: that fix may be dropped"


def test_a_source_outside_the_root_is_refused(roots, tmp_path):
    outside = tmp_path / "outside.cu"
    outside.write_text(SOURCE)
    run = subprocess.run([str(roots[0] / LAUNCHER_UNDER_ROOT), str(NVCC), "-x", "cu", "-c", str(outside), "-o", "CMakeFiles/x.o"],
                         cwd=roots[0] / "build", timeout=60, capture_output=True, text=True)
    assert run.returncode == 2 and "is not under the build's exec root" in run.stderr, run.stderr


def test_a_source_named_relative_to_the_build_directory_is_placed_under_the_root(roots):
    objects = []
    for root in roots:
        run = subprocess.run([str(root / LAUNCHER_UNDER_ROOT), str(NVCC), "-O3", "-arch=sm_90a",
                              "-x", "cu", "-c", f"../{SOURCE_UNDER_ROOT}", "-o", "CMakeFiles/rel.cu.o"],
                             cwd=root / "build", timeout=600, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        objects.append((root / "build" / "CMakeFiles" / "rel.cu.o").read_bytes())
    assert objects[0] == objects[1]


def test_a_cuda_compile_without_a_source_it_can_find_is_refused(roots):
    run = subprocess.run([str(roots[0] / LAUNCHER_UNDER_ROOT), str(NVCC), "-x", "cu", "--some-future-compile-flag", "scale.cu"],
                         cwd=roots[0] / "build", timeout=60, capture_output=True, text=True)
    assert run.returncode == 2 and "without -c/-dc SOURCE" in run.stderr, run.stderr


def test_a_launcher_called_by_another_path_is_refused(tmp_path):
    elsewhere = tmp_path / "launcher.sh"
    shutil.copy(LAUNCHER, elsewhere)
    run = subprocess.run([str(elsewhere), str(NVCC), "--version"], timeout=60, capture_output=True, text=True)
    assert run.returncode == 2 and f"must name it as <exec root>/{LAUNCHER_UNDER_ROOT}" in run.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
