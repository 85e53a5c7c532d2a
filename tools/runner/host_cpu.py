"""Which ggml x86 CPU variant this host should load, from the host's own CPU flags.

The runner records the variant ggml loaded as the device class's ISA level. ggml says which one it
loaded in its own log, and a lane's log is untrusted: a lane that prints another variant's loader
line (a replay of another host's run) would record an Intel host as zen4. So preflight derives the
variant the pinned ggml must choose on this host from /proc/cpuinfo (the kernel's cpuid view, which
also hides what the OS has not enabled) and refuses a lane that says it loaded another.

The tables are the pinned tree's: the features of each variant are ggml/src/CMakeLists.txt's
ggml_add_cpu_backend_variant() lines, and the scores ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp's
ggml_backend_cpu_x86_score() (a variant scores 0 when the host lacks one of its features, otherwise
1 plus one bit per feature; ggml loads the highest score).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# ggml_add_cpu_backend_variant(<name> <features...>) at the pin.
VARIANT_FEATURES: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("SSE42",),
    "sandybridge": ("SSE42", "AVX"),
    "ivybridge": ("SSE42", "AVX", "F16C"),
    "piledriver": ("SSE42", "AVX", "F16C", "FMA"),
    "haswell": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"),
    "skylakex": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"),
    "cannonlake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI"),
    "cascadelake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI"),
    "icelake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI"),
    "cooperlake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI", "AVX512_BF16"),
    "zen4": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
    "alderlake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI"),
    "sapphirerapids": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
                       "AVX512_BF16", "AMX_TILE", "AMX_INT8"),
}

# cpu-feats.cpp: the score bit of each feature (AMX_TILE is built but not scored) and the cpuid
# bits it tests, named as Linux's /proc/cpuinfo names them.
FEATURE_SCORE_BIT: dict[str, int | None] = {
    "FMA": 0, "F16C": 1, "SSE42": 2, "BMI2": 3, "AVX": 4, "AVX2": 5, "AVX_VNNI": 6, "AVX512": 7,
    "AVX512_VBMI": 8, "AVX512_BF16": 9, "AVX512_VNNI": 10, "AMX_INT8": 11, "AMX_TILE": None,
}
FEATURE_CPUINFO_FLAGS: dict[str, tuple[str, ...]] = {
    "FMA": ("fma",), "F16C": ("f16c",), "SSE42": ("sse4_2",), "BMI2": ("bmi2",), "AVX": ("avx",),
    "AVX2": ("avx2",), "AVX_VNNI": ("avx_vnni",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",), "AVX512_BF16": ("avx512_bf16",), "AVX512_VNNI": ("avx512_vnni",),
    "AMX_INT8": ("amx_int8",), "AMX_TILE": ("amx_tile",),
}


class HostCpuError(ValueError):
    """The lane's variants cannot be judged against this host (a variant the table does not know)."""


def cpuinfo_flags(cpuinfo_text: str) -> set[str]:
    """The flags of the first processor in /proc/cpuinfo."""
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return set(value.split())
    return set()


def score(variant: str, flags: set[str]) -> int:
    """ggml_backend_cpu_x86_score() of `variant` on a host with these cpuinfo flags."""
    if variant not in VARIANT_FEATURES:
        raise HostCpuError(f"CPU variant {variant!r} is not in the pinned tree's table (tools/runner/host_cpu.py)")
    total = 1
    for feature in VARIANT_FEATURES[variant]:
        if not all(f in flags for f in FEATURE_CPUINFO_FLAGS[feature]):
            return 0
        bit = FEATURE_SCORE_BIT[feature]
        if bit is not None:
            total += 1 << bit
    return total


def expected_variant(variants: Sequence[str], flags: set[str]) -> str | None:
    """The variant ggml loads on this host among the lane's `variants` (None: none scores above 0).
    Two with the same best score would make the choice depend on load order: refused."""
    scored = sorted(((score(v, flags), v) for v in variants), reverse=True)
    if not scored or scored[0][0] == 0:
        return None
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        raise HostCpuError(f"CPU variants {scored[0][1]} and {scored[1][1]} score the same ({scored[0][0]}) on this host")
    return scored[0][1]


def missing_flags(variant: str, flags: Iterable[str]) -> list[str]:
    have = set(flags)
    return [f for feature in VARIANT_FEATURES.get(variant, ()) for f in FEATURE_CPUINFO_FLAGS[feature] if f not in have]
