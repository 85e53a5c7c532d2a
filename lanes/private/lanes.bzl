"""The lane spec: the single source of truth for every lane.

Bazel rules (lanes/BUILD.bazel via lane_targets.bzl), the runner and the matrix read this (Python reads
//lanes:spec.json, generated from it); admission reads only signed records and the policy. Nothing repeats these cache entries by hand.

Each lane is built as two cmake() stages: `ggml` (the backend libraries; for CUDA the expensive
kernels) and `llama` (libllama + tools) on top of the installed ggml package, so a patch that only
touches llama never recompiles the kernels and a remote cache shares the heavy stage.
"""

# Values are expanded by the cmake() rule's `set -u` build script: `\\$ORIGIN` reaches CMake as
# $ORIGIN, `$EXT_BUILD_ROOT` is the action's exec root.
# Paths of the action's sandbox must not reach the artifacts (__FILE__ in ggml's asserts): the
# exec root is mapped to ".", so identical sources give identical bytes wherever they are built.
_NO_SANDBOX_PATHS = {
    "CMAKE_CXX_FLAGS": "-ffile-prefix-map=$EXT_BUILD_ROOT=.",
    "CMAKE_C_FLAGS": "-ffile-prefix-map=$EXT_BUILD_ROOT=.",
}

# Every lane: release build, shared libraries, relocatable (RUNPATH relative to $ORIGIN).
_GGML_COMMON = {
    "BUILD_SHARED_LIBS": "ON",
    "CMAKE_BUILD_TYPE": "Release",
    # Link with the install RPATH from the start: otherwise the linker's build-id hashes the
    # build tree's absolute RPATH (a fresh temp dir per build), which `cmake --install` rewrites
    # afterwards but the build-id keeps, so identical code got different bytes on every build.
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    "CMAKE_INSTALL_LIBDIR": "lib",
    "CMAKE_INSTALL_RPATH": "\\$ORIGIN",
    "GGML_BUILD_EXAMPLES": "OFF",
    "GGML_BUILD_TESTS": "OFF",
}

# Deterministic CPU code: no -march=native; a fixed x86-64-v3 baseline (AVX2, FMA, F16C, BMI2).
_X86_64_V3 = {
    "GGML_AVX": "ON",
    "GGML_AVX2": "ON",
    "GGML_BMI2": "ON",
    "GGML_F16C": "ON",
    "GGML_FMA": "ON",
    "GGML_NATIVE": "OFF",
}

# CPU lane: ggml's own runtime-selected CPU backends (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS).
# Each variant is built for one fixed ISA level; the set is this list (ggml's x86 list at the pin),
# not the build host, so the build stays deterministic; at run time ggml loads the best variant the
# host supports (libggml-cpu-<variant>.so beside the binaries, so the lane stays relocatable). The
# runner records the variant ggml loaded as the device class's compute_capability: a record made
# where zen4 ran does not admit a host that loads haswell.
X86_64_CPU_VARIANTS = [
    "x64",
    "sse42",
    "sandybridge",
    "ivybridge",
    "piledriver",
    "haswell",
    "skylakex",
    "cannonlake",
    "cascadelake",
    "icelake",
    "cooperlake",
    "zen4",
    "alderlake",
    "sapphirerapids",
]

_CPU_ALL_VARIANTS = {
    "GGML_BACKEND_DL": "ON",
    "GGML_CPU_ALL_VARIANTS": "ON",
    "GGML_NATIVE": "OFF",
}

# What llama.cpp's top-level CMakeLists.txt sets for ggml before add_subdirectory(ggml), at the pin:
# a ggml stage configured on its own (as the lanes build it) misses every one of them. Each with the
# lanes' decision: `cache_entry` set to `value` in every lane of `backends`, or the reason it needs
# none. //tests:upstream_ggml_options_test compares the names and values with the pinned file and
# checks the lanes, so an upstream bump that adds or changes one fails until it is decided here.
UPSTREAM_GGML_OPTIONS = {
    "GGML_LLAMAFILE_DEFAULT": {
        "upstream": "ON",
        "cache_entry": "GGML_LLAMAFILE",
        "value": "ON",
        # Every backend's lane carries ggml-cpu (it runs what is not offloaded).
        "backends": ["cpu", "cuda", "rocm", "vulkan", "metal"],
        "why": "llamafile's sgemm in ggml-cpu; without it the CPU lane's pp128 on a 0.67 GB F16 model was x0.41 of upstream's build",
    },
    "GGML_CUDA_GRAPHS_DEFAULT": {
        "upstream": "ON",
        "cache_entry": "GGML_CUDA_GRAPHS",
        "value": "ON",
        # Only ggml-cuda's CMakeLists.txt reads it at the pin.
        "backends": ["cuda"],
        "why": "one graph launch per token instead of one kernel launch per node; without it the CUDA lane's tg128 was x0.62 (270M model) to x0.88 (7B Q4_0) of upstream's build on the H200",
    },
    "GGML_ALL_WARNINGS": {
        "upstream": "${LLAMA_ALL_WARNINGS}",
        "cache_entry": "",
        "why": "LLAMA_ALL_WARNINGS defaults to ON, ggml's own default; warnings change no code",
    },
    "GGML_FATAL_WARNINGS": {
        "upstream": "${LLAMA_FATAL_WARNINGS}",
        "cache_entry": "",
        "why": "LLAMA_FATAL_WARNINGS defaults to OFF, ggml's own default",
    },
    "GGML_BUILD_NUMBER": {
        "upstream": "${LLAMA_BUILD_NUMBER}",
        "cache_entry": "",
        "why": "ggml's CMake files never read it at the pin",
    },
    "GGML_BUILD_COMMIT": {
        "upstream": "${LLAMA_BUILD_COMMIT}",
        "cache_entry": "",
        "why": "lane.bzl sets it on every ggml stage from the pin's short commit (pin.bzl), as LLAMA_BUILD_COMMIT on the llama stage",
    },
}

def _upstream_ggml_entries(backend):
    return {
        option["cache_entry"]: option["value"]
        for option in UPSTREAM_GGML_OPTIONS.values()
        if option["cache_entry"] and backend in option["backends"]
    }

# The CPU lane's explicit copy (its certified spec entry keeps its key order; _lane merges the same).
_LLAMA_CPP_GGML_DEFAULTS = {
    "GGML_LLAMAFILE": "ON",
}

_LLAMA_COMMON = {
    "BUILD_SHARED_LIBS": "ON",
    "CMAKE_BUILD_TYPE": "Release",
    # Tests (test-backend-ops) are not installed, so the build tree gets the install RPATH too.
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    "CMAKE_INSTALL_LIBDIR": "lib",
    "CMAKE_INSTALL_RPATH": "\\$ORIGIN/../lib;\\$ORIGIN",
    "LLAMA_BUILD_EXAMPLES": "ON",
    "LLAMA_BUILD_SERVER": "ON",
    "LLAMA_BUILD_TESTS": "ON",
    "LLAMA_BUILD_TOOLS": "ON",
    # Offline and reproducible: no HTTPS client, no web UI fetched at build time.
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_OPENSSL": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
    "LLAMA_USE_SYSTEM_GGML": "ON",
}

# What every lane ships; llama-cli links the server here, llama-completion is the CLI to use.
TOOLS = [
    "llama-completion",
    "llama-simple",
    "llama-bench",
    "llama-server",
    "llama-logits",
    "test-backend-ops",
    # Prints every graph node's output: the CPU lane's per-op oracle compares it with NumPy.
    "llama-eval-callback",
    # Corpus-level parity and upstream's quality floor (perplexity, --kl-divergence).
    "llama-perplexity",
]

# Runtime names (SONAMEs) of the llama stage's libraries the TOOLS load.
_LLAMA_LIBS = [
    "libllama.so.0",
    "libllama-common.so.0",
    "libmtmd.so.0",
    "libllama-completion-impl.so",
    "libllama-server-impl.so",
    "libllama-bench-impl.so",
    "libllama-perplexity-impl.so",
]

def merge_dicts(*dicts):
    """Merges dicts, later ones winning; shared by the lane spec and lane.bzl.

    Args:
      *dicts: the dicts, in increasing precedence.

    Returns:
      A new dict.
    """
    out = {}
    for d in dicts:
        out.update(d)
    return out

# Ops a llama graph runs on an accelerator: what fixture parity checks against the CPU backend.
LLAMA_GRAPH_OPS = [
    "GET_ROWS",
    "RMS_NORM",
    "MUL",
    "ADD",
    "MUL_MAT",
    "ROPE",
    "SET_ROWS",
    "CPY",
    "CONT",
    "SCALE",
    "SOFT_MAX",
    "FLASH_ATTN_EXT",
    "SILU",
    "SWIGLU",
]

# CPU lane: the llama-graph ops that test-backend-ops grad mode (the CPU lane's fixture parity)
# cannot evaluate on the pinned llama.cpp, and the check that covers them instead. Measured with
# `test-backend-ops grad -b CPU -o <op>`: FLASH_ATTN_EXT, MUL and SET_ROWS print only "not
# supported"; RMS_NORM, ROPE and SOFT_MAX abort (GGML_ASSERT in the backward graph); MUL_MAT and CPY
# fail on finite-difference precision. The per-op oracle compares each of them, node by node of the
# real llama graph, against the float64 reference (tools/runner/op_oracle.py). ADD, CONT, GET_ROWS,
# SILU and SWIGLU are evaluated by grad mode (the oracle checks ADD, CONT, GET_ROWS, SWIGLU too);
# SCALE and SILU never occur in a llama-architecture graph, so the oracle cannot see them.
_CPU_OP_COVERAGE = {op: "op_oracle" for op in [
    "RMS_NORM",
    "MUL",
    "MUL_MAT",
    "ROPE",
    "SET_ROWS",
    "CPY",
    "SOFT_MAX",
    "FLASH_ATTN_EXT",
    # Not in this graph at the pinned commit (scales are fused into SOFT_MAX / FLASH_ATTN_EXT);
    # grad mode aborts on it. op_oracle verifies the absence on every run (0 nodes) and says so.
    "SCALE",
]}

# Required ops the CPU lane's graph never runs; each run must confirm it (op_oracle, 0 nodes).
_CPU_OPS_ABSENT_FROM_GRAPH = ["SCALE"]

# llama.cpp's RPC backend: lanes that can serve layers of a mixed-backend route (one
# `ggml-rpc-server` per node, the client splitting layers across them) build it in both stages
# (the llama stage builds the server tool only when GGML_RPC is set).
_RPC = {"GGML_RPC": "ON"}

# llama.cpp's own CTest suite (issue 14), built by the lane's llama stage (<lane>_llama) in its exact
# configuration. Every executable the pinned tests/CMakeLists.txt registers as a CTest test for this
# configuration: LLAMA_USE_SYSTEM_GGML=ON drops test-gguf and test-alloc (they need ggml's private
# headers), LLAMA_OPENSSL=OFF drops the gguf-model-data tests. test-backend-ops is built but not
# registered at this commit; the runner's fixture_parity step runs the lane's own copy on the device.
CTEST_TARGETS = [
    "test-tokenizer-0",
    "test-tokenizer-1-spm",
    "test-unicode",
    "test-sampling",
    "test-reasoning-budget",
    "test-grammar-parser",
    "test-grammar-integration",
    "test-llama-grammar",
    "test-batch-alloc",
    "test-chat",
    "test-json-schema-to-grammar",
    "test-llama-archs",
    "test-recurrent-state-rollback",
    "test-save-load-state",
    "test-chat-peg-parser",
    "test-jinja",
    "test-json-schema",
    "test-chat-auto-parser",
    "test-chat-template",
    "test-log",
    "test-peg-parser",
    "test-thread-safety",
    "test-arg-parser",
    "test-model-resolution",
    "test-opt",
    "test-tiled-mulmat",
    "test-model-load-cancel",
    "test-autorelease",
    "test-backend-sampler",
    "test-state-restore-fragmented",
    "test-barrier",
    "test-quantize-fns",
    "test-quantize-perf",
    "test-rope",
    "test-col2im-1d",
    "test-mtmd-c-api",
    "test-mtmd-impl",
]

# CTest tests never run, each with its reason: they need a network or a model file absent from the
# pinned tree. An excluded test is reported as EXCLUDED with this reason, never as passed.
_STORIES_MODEL = "needs tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned tree"
_CTEST_EXCLUDED = {
    "test-arg-parser": "network: makes HTTP requests to ggml.ai (cannot make GET request offline)",
    "test-download-model": "network: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Face",
    "test-state-restore-fragmented": _STORIES_MODEL,
    "test-thread-safety": _STORIES_MODEL,
    # Without network `git clone` fails and the script still exits 0 having tested nothing.
    "test-tokenizers-ggml-vocabs": "network: git-clones huggingface.co/ggml-org/vocabs",
    # examples/eval-callback registers these two (with LLAMA_BUILD_TESTS=ON).
    "test-eval-callback-download-model": "network: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Face",
    "test-eval-callback": _STORIES_MODEL,
    # Upstream runs it on stories15M. With the embedded random-weight model every case passes but
    # logit_bias (`--test logit_bias`: a +10 bias does not outweigh random logits; sampled 12363,
    # expected 2787), and CTest runs all cases as one test.
    "test-backend-sampler": "its logit_bias case needs a trained model (" + _STORIES_MODEL + "); the embedded random-weight model's logits outweigh the +10 bias",
    # Renders every template with Python's jinja2 as the reference: not a lane dependency, not in
    # the Python lock, and absent from the hosts' /usr/bin/python3.
    "test-jinja-py": "needs Python's jinja2 as the reference renderer (not a lane dependency, not in the Python lock)",
}

# tools/rpc registers test-rpc-multi-server when the RPC backend is on. Upstream links it with
# `ggml-rpc` by bare name, which a build against the installed ggml package
# (LLAMA_USE_SYSTEM_GGML=ON, the lanes' llama stage) cannot resolve (`ld: cannot find -lggml-rpc`).
_CTEST_EXCLUDED_RPC = {
    "test-rpc-multi-server": "does not link against the installed ggml package (upstream links ggml-rpc by bare name: ld cannot find -lggml-rpc); mixed RPC routes are measured by tools/compat",
}

# Upstream's tests/CMakeLists.txt builds these only without GGML_BACKEND_DL (they call the CPU
# backend directly): a lane whose CPU backend is loaded at run time has no such test (its op_oracle
# and fixture parity cover the CPU ops).
_CTEST_CPU_BACKEND_DIRECT = ["test-barrier", "test-quantize-fns", "test-quantize-perf", "test-rope", "test-col2im-1d"]

# With the CPU backend loaded at run time (GGML_BACKEND_DL), upstream's model generator calls no
# ggml_backend_load_all() and finds no backend; the two tests that need its models go with it.
_GENERATED_MODELS = "needs test-generate-models' models (CTest FIXTURES_REQUIRED generate-models)"
_CTEST_EXCLUDED_BACKEND_DL = {
    "test-generate-models": "loads no backend under GGML_BACKEND_DL (upstream's generator calls no ggml_backend_load_all(): 'no backends are loaded')",
    "test-recurrent-state-rollback": _GENERATED_MODELS,
    "test-save-load-state": _GENERATED_MODELS,
}

def _ctest(backend, rpc, backend_dl = False):
    return {
        "targets": [t for t in CTEST_TARGETS if not (backend_dl and t in _CTEST_CPU_BACKEND_DIRECT)],
        # The build-tree directories whose CTestTestfile.cmake registers tests.
        "test_dirs": ["tests", "examples/eval-callback"] + (["tools/rpc"] if rpc else []),
        "excluded": merge_dicts(_CTEST_EXCLUDED, _CTEST_EXCLUDED_RPC if rpc else {}, _CTEST_EXCLUDED_BACKEND_DL if backend_dl else {}),
        # Source data tests read by relative path, not named in their CTest commands (test-chat and
        # test-chat-auto-parser run in the source root and read these templates).
        # The embedded model's vocabulary too: a GPU host regenerates the model from it.
        "source_data": ["models/templates", "models/ggml-vocab-llama-spm.gguf"],
        # The CTest labels whose tests run; a test with another label must be excluded with a reason
        # (upstream's "python" label: test-jinja-py). "model" tests get the embedded tiny model
        # through LLAMACPP_TEST_MODELFILE (without it they print a warning and exit 0).
        "labels": ["main", "model"],
        # Where the suite gates: accelerator lanes' certification runs it on their hardware (the
        # runner's upstream_ctest step); the CPU lane's gates every change in CI (//tests:cpu_ctest_test).
        "in_certification": backend != "cpu",
        # Upstream tests that exercise the backend, run by another certification step instead.
        "covered_elsewhere": {} if backend == "cpu" else {
            "test-backend-ops": "built but not a CTest test at the pinned commit; the runner's fixture_parity step runs it on the device against the CPU backend",
        },
    }

def _lane(alias, os, arch, backend, sdk, ggml_libs, ggml_cache_entries = {}, log_evidence = [], notes = "", rpc = False, cpu_variants = []):
    # Only a lane with CPU variants carries the key: the other lanes' spec entries stay as certified.
    variants = {"cpu_variants": cpu_variants} if cpu_variants else {}
    return merge_dicts(variants, {
        "alias": alias,
        "os": os,
        "arch": arch,
        "backend": backend,
        "sdk": sdk,
        "ggml_cache_entries": merge_dicts(_GGML_COMMON, _NO_SANDBOX_PATHS, ggml_cache_entries, _RPC if rpc else {}, _upstream_ggml_entries(backend)),
        "ggml_libs": ggml_libs + (["ggml-rpc"] if rpc else []),
        "llama_cache_entries": merge_dicts(_LLAMA_COMMON, _NO_SANDBOX_PATHS, _RPC if rpc else {}),
        "llama_libs": _LLAMA_LIBS,
        "targets": TOOLS + (["ggml-rpc-server"] if rpc else []),
        # Whether the lane can take part in a mixed-backend route over llama.cpp's RPC backend.
        "rpc": rpc,
        # Lines the backend itself logs when it really ran the graph (checked by the runner).
        "log_evidence": log_evidence,
        "fixture_ops": LLAMA_GRAPH_OPS,
        # op -> the check that covers it where fixture parity cannot evaluate it (reported per op).
        "op_coverage": _CPU_OP_COVERAGE if backend == "cpu" else {},
        "ops_absent_from_graph": _CPU_OPS_ABSENT_FROM_GRAPH if backend == "cpu" else [],
        "notes": notes,
        "ctest": _ctest(backend, rpc, backend_dl = bool(cpu_variants)),
    })

# Upstream-default reference builds (tools/bench measures each lane against one, same host, same
# pinned and patched tree): what `cmake -B build && cmake --build build` gives a user, i.e.
# upstream's own defaults (Release, shared libraries, GGML_NATIVE=ON: -march=native on the build
# host; CUDA: the build host's GPU arch and VMM as upstream ships it). Only llama-bench is built.
# Offline and relocatable like the lanes; nothing else is pinned, on purpose.
_UPSTREAM_DEFAULTS = {
    "BUILD_SHARED_LIBS": "ON",
    "CMAKE_BUILD_TYPE": "Release",
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    "CMAKE_INSTALL_RPATH": "\\$ORIGIN/../lib;\\$ORIGIN",
    "GGML_NATIVE": "ON",
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_OPENSSL": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
}

UPSTREAM_REFERENCE = {
    "linux-x86_64-cpu": {"cache_entries": _UPSTREAM_DEFAULTS, "ggml_libs": ["ggml-base", "ggml", "ggml-cpu"]},
    "linux-x86_64-cuda": {
        "cache_entries": merge_dicts(_UPSTREAM_DEFAULTS, {"GGML_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "native"}),
        "ggml_libs": ["ggml-base", "ggml", "ggml-cpu", "ggml-cuda"],
    },
    "linux-x86_64-vulkan": {
        "cache_entries": merge_dicts(_UPSTREAM_DEFAULTS, {"GGML_VULKAN": "ON"}),
        "ggml_libs": ["ggml-base", "ggml", "ggml-cpu", "ggml-vulkan"],
    },
}

LANES = {
    "linux-x86_64-cpu": _lane(
        alias = "cpu",
        os = "linux",
        arch = "x86_64",
        backend = "cpu",
        sdk = "host-cc",
        ggml_libs = ["ggml-base", "ggml"],
        ggml_cache_entries = merge_dicts(_CPU_ALL_VARIANTS, _LLAMA_CPP_GGML_DEFAULTS),
        cpu_variants = X86_64_CPU_VARIANTS,
        # Printed at -lv 4; "_Mapped" disappears with --no-mmap.
        log_evidence = ["load_tensors: +CPU(_Mapped)? model buffer size", "llama_kv_cache: +CPU KV buffer size"],
        notes = "GGML_NATIVE=OFF; ggml's CPU variants (x64 ... sapphirerapids) chosen at run time",
    ),
    "linux-x86_64-cuda": _lane(
        alias = "cuda",
        os = "linux",
        arch = "x86_64",
        backend = "cuda",
        sdk = "cuda",
        ggml_libs = ["ggml-base", "ggml", "ggml-cpu", "ggml-cuda"],
        ggml_cache_entries = merge_dicts(_X86_64_V3, {
            "GGML_CUDA": "ON",
            # 90a: Hopper (H100/H200) with its arch-specific instructions. Portable default for
            # other fleets: "75-virtual;80-virtual;86-real;89-real;90-real" (PTX JIT covers newer).
            "CMAKE_CUDA_ARCHITECTURES": "90a",
            # VMM on, upstream's default: ggml-cuda links the driver API through the toolkit's
            # libcuda link stub (toolchains/cuda/libcuda_stub.c); the host's driver serves it.
        }),
        log_evidence = [
            "ggml_cuda_init: found [1-9][0-9]* CUDA devices",
            "offloaded ([0-9]+)/\\1 layers to GPU",
            "load_tensors: +CUDA0 model buffer size",
            "llama_kv_cache: +CUDA0 KV buffer size",
        ],
        notes = "CUDA 13.0, arch 90a, VMM on",
        rpc = True,
    ),
    "linux-aarch64-cuda": _lane(
        alias = "",
        os = "linux",
        arch = "aarch64",
        backend = "cuda",
        sdk = "cuda",
        ggml_libs = ["ggml-base", "ggml", "ggml-cpu", "ggml-cuda"],
        ggml_cache_entries = {"GGML_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "90a", "GGML_NATIVE": "OFF"},
        log_evidence = ["ggml_cuda_init: found [1-9]", "offloaded ([0-9]+)/\\1 layers to GPU"],
        notes = "GH200 class; needs an aarch64 host",
    ),
    "linux-x86_64-rocm": _lane(
        alias = "rocm",
        os = "linux",
        arch = "x86_64",
        backend = "rocm",
        sdk = "rocm",
        ggml_libs = ["ggml-base", "ggml", "ggml-cpu", "ggml-hip"],
        ggml_cache_entries = merge_dicts(_X86_64_V3, {"GGML_HIP": "ON", "GPU_TARGETS": "gfx90a;gfx942;gfx1100"}),
        log_evidence = ["ggml_cuda_init: found [1-9] ROCm", "offloaded ([0-9]+)/\\1 layers to GPU"],
        notes = "gfx targets pinned: MI210/MI250 (gfx90a), MI300 (gfx942), RDNA3 (gfx1100)",
    ),
    "linux-x86_64-vulkan": _lane(
        alias = "vulkan",
        os = "linux",
        arch = "x86_64",
        backend = "vulkan",
        sdk = "vulkan",
        ggml_libs = ["ggml-base", "ggml", "ggml-cpu", "ggml-vulkan"],
        ggml_cache_entries = merge_dicts(_X86_64_V3, {"GGML_VULKAN": "ON"}),
        # ggml-vulkan logs its device list at DEBUG level, before llama's logger is set up, so
        # the backend's own evidence is llama's device choice and the Vulkan0 buffers.
        log_evidence = [
            "llama_prepare_model_devices: using device Vulkan0 ",
            "offloaded ([0-9]+)/\\1 layers to GPU",
            "load_tensors: +Vulkan0 model buffer size",
            "llama_kv_cache: +Vulkan0 KV buffer size",
        ],
        notes = "Vulkan 1.3.239 (pinned Debian packages); software ICDs (llvmpipe, lavapipe, SwiftShader) never certify",
        rpc = True,
    ),
    "darwin-arm64-metal": _lane(
        alias = "metal",
        os = "darwin",
        arch = "arm64",
        backend = "metal",
        sdk = "metal",
        ggml_libs = ["ggml-base", "ggml", "ggml-cpu", "ggml-metal", "ggml-blas"],
        ggml_cache_entries = {"GGML_METAL": "ON", "GGML_METAL_EMBED_LIBRARY": "ON", "GGML_NATIVE": "OFF"},
        log_evidence = ["ggml_metal_init: found device", "offloaded ([0-9]+)/\\1 layers to GPU"],
        notes = "needs macOS with Xcode",
    ),
    "windows-x86_64-cuda": _lane("", "windows", "x86_64", "cuda", "cuda", ["ggml-base", "ggml", "ggml-cpu", "ggml-cuda"], notes = "registered; needs a Windows host"),
    "windows-x86_64-vulkan": _lane("", "windows", "x86_64", "vulkan", "vulkan", ["ggml-base", "ggml", "ggml-cpu", "ggml-vulkan"], notes = "registered; needs a Windows host"),
    "android-arm64-vulkan": _lane("", "android", "arm64", "vulkan", "vulkan", ["ggml-base", "ggml", "ggml-cpu", "ggml-vulkan"], notes = "registered; needs an Android NDK cross toolchain"),
}
