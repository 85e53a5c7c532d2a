"""The CUDA lane links ggml-cuda's VMM pool against the toolkit's libcuda link stub
(toolchains/cuda/libcuda_stub.c): the stub must define exactly the driver API functions the pinned
ggml-cuda sources call, so an upstream bump that adds a driver call fails here, not at link or load
time on a GPU host; and the pinned CMakeLists must still link CUDA::cuda_driver, the target the SDK
points at the stub, whenever VMM is on, as every CUDA lane now builds it."""

import json
import os
import pathlib
import re
import sys

import pytest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
STUB = RUNFILES / "lanes" / "toolchains" / "cuda" / "libcuda_stub.c"
SPEC = RUNFILES / "lanes" / "lanes" / "spec.json"
GGML_CUDA = RUNFILES / "llama_cpp" / "src" / "ggml" / "src" / "ggml-cuda"

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)
# Driver API entry points are cuXxx(...); the runtime's are cudaXxx, cuBLAS's cublasXxx.
_DRIVER_CALL = re.compile(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(")
_STUB_DEFINITION = re.compile(r"^CUresult\s+CUDAAPI\s+(cu[A-Z][A-Za-z0-9_]*)\s*\(", re.MULTILINE)
# An if (GGML_CUDA_NO_VMM) block up to its endif (the blocks hold no nested if), split at its else().
_NO_VMM_BLOCK = re.compile(r"if\s*\(\s*GGML_CUDA_NO_VMM\s*\)(?P<body>(?:(?!\bif\s*\().)*?)endif\s*\(", re.DOTALL)
_ELSE = re.compile(r"\belse\s*\(\s*\)")


def code_only(text: str) -> str:
    return _COMMENT_OR_STRING.sub(" ", text)


def driver_calls(sources: dict[str, str]) -> dict[str, str]:
    """Driver API function -> the first source file that calls it (comments and strings left out)."""
    calls: dict[str, str] = {}
    for name, text in sorted(sources.items()):
        for fn in _DRIVER_CALL.findall(code_only(text)):
            calls.setdefault(fn, name)
    return calls


def stub_functions(stub_source: str) -> set[str]:
    return set(_STUB_DEFINITION.findall(stub_source))


def problems(sources: dict[str, str], stub_source: str, cmakelists: str, spec: dict) -> list[str]:
    calls, defined = driver_calls(sources), stub_functions(stub_source)
    out = [f"{src} calls {fn}, which toolchains/cuda/libcuda_stub.c does not define: add it with cuda.h's signature"
           for fn, src in sorted(calls.items()) if fn not in defined]
    out += [f"libcuda_stub.c defines {fn}, which the pinned ggml-cuda never calls: remove it"
            for fn in sorted(defined - set(calls))]
    linking = [_ELSE.split(m.group("body")) for m in _NO_VMM_BLOCK.finditer(cmakelists)]
    if not any(len(parts) == 2 and "CUDA::cuda_driver" in parts[1] and "CUDA::cuda_driver" not in parts[0]
               for parts in linking):
        out.append("ggml-cuda's CMakeLists.txt no longer links CUDA::cuda_driver exactly when VMM is on: "
                   "the SDK's CUDA_cuda_driver_LIBRARY (cuda_detect.bzl) may no longer be what it links")
    for lane_id, lane in sorted(spec["lanes"].items()):
        if lane["backend"] == "cuda" and "GGML_CUDA_NO_VMM" in lane["ggml_cache_entries"]:
            out.append(f"{lane_id} sets GGML_CUDA_NO_VMM: the lanes build VMM on, as upstream does, through the stub")
    return out


def _pinned_sources() -> dict[str, str]:
    files = [p for p in sorted(GGML_CUDA.rglob("*")) if p.suffix in (".cu", ".cuh", ".cpp", ".h")]
    assert files, f"no ggml-cuda sources under {GGML_CUDA}"
    return {str(p.relative_to(GGML_CUDA)): p.read_text(errors="replace") for p in files}


def test_the_stub_defines_exactly_the_driver_calls_of_the_pinned_ggml_cuda():
    found = problems(_pinned_sources(), STUB.read_text(), (GGML_CUDA / "CMakeLists.txt").read_text(),
                     json.loads(SPEC.read_text()))
    assert found == []


def test_the_pinned_ggml_cuda_calls_the_vmm_driver_functions():
    calls = driver_calls(_pinned_sources())
    assert {"cuMemCreate", "cuMemMap", "cuMemAddressReserve", "cuGetErrorString"} <= set(calls), sorted(calls)


_STUB = "CUresult CUDAAPI cuMemMap(CUdeviceptr p) {}\nCUresult CUDAAPI cuGetErrorString(CUresult e) {}\n"
_CMAKE = ("if (GGML_CUDA_NO_VMM)\n  # no driver\nelse()\n  target_link_libraries(ggml-cuda PRIVATE CUDA::cuda_driver)\n"
          "endif()\n")
_SPEC = {"lanes": {"linux-x86_64-cuda": {"backend": "cuda", "ggml_cache_entries": {"GGML_CUDA": "ON"}}}}
_SOURCES = {"vmm.cu": "CU_CHECK(cuMemMap(ptr, 0, 0, h, 0)); // cuMemCreate( in a comment\n"
                      "printf(\"cuCtxCreate(\"); cuGetErrorString(err, &s);\n"}


def test_the_fixture_passes():
    assert problems(_SOURCES, _STUB, _CMAKE, _SPEC) == []


def test_a_new_driver_call_upstream_is_found():
    sources = dict(_SOURCES, **{"pool.cu": "CU_CHECK(cuMemCreate(&h, size, &prop, 0));"})
    assert problems(sources, _STUB, _CMAKE, _SPEC) == [
        "pool.cu calls cuMemCreate, which toolchains/cuda/libcuda_stub.c does not define: add it with cuda.h's signature"]


def test_a_stub_function_nobody_calls_is_found():
    stub = _STUB + "CUresult CUDAAPI cuCtxCreate(CUcontext *c) {}\n"
    assert problems(_SOURCES, stub, _CMAKE, _SPEC) == [
        "libcuda_stub.c defines cuCtxCreate, which the pinned ggml-cuda never calls: remove it"]


def test_cmake_linking_the_driver_otherwise_is_found():
    cmake = _CMAKE.replace("CUDA::cuda_driver", "CUDA::cudart")
    assert len(problems(_SOURCES, _STUB, cmake, _SPEC)) == 1


def test_a_cuda_lane_with_vmm_off_is_found():
    spec = {"lanes": {"x": {"backend": "cuda", "ggml_cache_entries": {"GGML_CUDA_NO_VMM": "ON"}}}}
    assert problems(_SOURCES, _STUB, _CMAKE, spec) == [
        "x sets GGML_CUDA_NO_VMM: the lanes build VMM on, as upstream does, through the stub"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
