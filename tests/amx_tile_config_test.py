"""The CPU lane's AMX kernels configure their tiles: every `ldtilecfg` in libggml-cpu-sapphirerapids.so
loads a config whose rows/colsb fields were written, and on a host that executes AMX the quantized
MUL_MAT tile paths run and match the x64 baseline.

Why: GCC 12.2's _tile_loadconfig (amxtileintrin.h) is `asm volatile("ldtilecfg %X0" :: "m"
(*(const void **)cfg))`, an operand of 8 bytes, so dead-store elimination drops the stores to the
rest of ggml's local 64-byte config (patch 0005 passes the whole struct). The tiles then stay
unconfigured and the first tile instruction (tilezero) raises SIGILL: every multi-token quantized
batch on an AMX host died that way. The static check runs on any host; the run needs AMX.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
LANE_DIR = RUNFILES / "lanes" / "lanes" / "cpu"
SAPPHIRERAPIDS = LANE_DIR / "bin" / "libggml-cpu-sapphirerapids.so"
LLAMA = RUNFILES / "llama_cpp"
MMQ = "ggml/src/ggml-cpu/amx/mmq.cpp"
# The sapphirerapids variant's flags (ggml-cpu/CMakeLists.txt, GGML_CPU_ALL_VARIANTS) at Release -O3.
VARIANT_FLAGS = ["-O3", "-fPIC", "-DNDEBUG", "-msse4.2", "-mf16c", "-mfma", "-mbmi2", "-mavx", "-mavx2", "-mavx512f",
                 "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw", "-mavx512vbmi", "-mavx512vnni",
                 "-mavx512bf16", "-mamx-tile", "-mamx-int8"]

_FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_MEMORY = re.compile(r"^(-?0x[0-9a-f]+|-?\d+)?\((%\w+)\)$")
_VECTOR = re.compile(r"^%([xyz])mm(\d+)$")
_VECTOR_BYTES = {"x": 16, "y": 32, "z": 64}
# General registers by width, narrowest names first (%al before %ax-like two-letter names).
_GPR_BYTES = ((re.compile(r"^%(?:[a-d]l|[sd]il|[sb]pl|r\d+b)$"), 1), (re.compile(r"^%(?:r\d+d|e[a-z]{2})$"), 4),
              (re.compile(r"^%(?:r\d+w|[a-z]{2})$"), 2), (re.compile(r"^%(?:r\d+|r[a-z]{2})$"), 8))
_SUFFIX_BYTES = {"b": 1, "w": 2, "l": 4, "q": 8}


def _operands(text: str) -> list[str]:
    out, depth, current = [], 0, ""
    for ch in text.split("#")[0].strip():
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    return out + [current.strip()] if current.strip() else out


def _register(operand: str) -> tuple[str, int] | None:
    """(name, bytes) of a register operand; a vector register is named by its number, so that
    %xmm0, %ymm0 and %zmm0 are one register."""
    m = _VECTOR.match(operand)
    if m:
        return f"v{m.group(2)}", _VECTOR_BYTES[m.group(1)]
    return next(((operand, n) for pattern, n in _GPR_BYTES if pattern.match(operand)), None)


def _store(mnemonic: str, operands: list[str]) -> tuple[str, int, int, str] | None:
    """(base register, offset, bytes, source) when the instruction stores to base+offset, else None."""
    if len(operands) != 2 or not mnemonic.startswith(("mov", "vmov")):
        return None
    m = _MEMORY.match(operands[1])
    if not m:
        return None
    source = _register(operands[0])
    size = source[1] if source else _SUFFIX_BYTES.get(mnemonic[-1], 0)
    return (m.group(2), int(m.group(1) or "0", 0), size, source[0] if source else operands[0]) if size else None


_ZEROING = re.compile(r"^v?p?xor[a-z]*$")
# Field bytes whose stores must come first: colsb[0..7] (the eight tiles ggml configures) and rows[0..7].
COLSB_USED, ROWS_USED = (16, 32), (48, 56)


def unconfigured_tile_loads(object_path: pathlib.Path) -> tuple[int, list[str]]:
    """(ldtilecfg count, those whose rows/colsb bytes no store in the same basic block wrote).

    Counted: stores since the last branch, call or return, narrower than the 64-byte struct (its
    zero-initialisation writes rows/colsb, but zeros), and not from a register zeroed in that block.
    """
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(object_path)], capture_output=True,
                          text=True, check=True).stdout
    loads, bad = 0, []
    function, stores, zeroed = "", [], set()
    for line in text.splitlines():
        f = _FUNCTION.match(line)
        if f:
            function, stores, zeroed = f.group(1), [], set()
            continue
        m = _INSN.match(line)
        if not m:
            continue
        address, mnemonic, operands = m.group(1), m.group(2), _operands(m.group(3))
        if mnemonic.startswith(("j", "call", "ret")):
            stores, zeroed = [], set()
            continue
        if _ZEROING.match(mnemonic) and len(operands) >= 2 and len(set(operands)) == 1 and _register(operands[0]):
            zeroed.add(_register(operands[0])[0])
            continue
        if mnemonic == "ldtilecfg":
            loads += 1
            target = _MEMORY.match(operands[0]) if operands else None
            if target is None:
                bad.append(f"{function}+{address}: ldtilecfg {m.group(3)} (operand not read)")
                continue
            base, offset = target.group(2), int(target.group(1) or "0", 0)

            def covered(field: tuple[int, int]) -> bool:
                need = set(range(offset + field[0], offset + field[1]))
                for b, o, s, _ in stores:
                    if b == base:
                        need -= set(range(o, o + s))
                return not need

            if not (covered(COLSB_USED) and covered(ROWS_USED)):
                bad.append(f"{function}+{address}: ldtilecfg {m.group(3)} without its rows/colsb stores")
            stores = []
            continue
        written = _register(operands[-1]) if operands else None
        if written:  # a register written: zero no more
            zeroed.discard(written[0])
        store = _store(mnemonic, operands)
        if store and store[2] < 64 and store[3] != "$0x0" and store[3] not in zeroed:
            stores.append(store)
    return loads, bad


def test_every_tile_config_the_lane_loads_was_written():
    loads, bad = unconfigured_tile_loads(SAPPHIRERAPIDS)
    assert loads >= 1, f"{SAPPHIRERAPIDS.name} has no ldtilecfg: the AMX kernels are not in the variant"
    assert bad == [], f"{SAPPHIRERAPIDS.name} loads unconfigured AMX tiles (SIGILL on the first tile op): {bad}"


def _tile_config_unit(source: pathlib.Path) -> str:
    """ggml's tile_config_t and ggml_tile_config_init, taken from `source`, in a unit of their own."""
    text = source.read_text()
    struct = re.search(r"^struct tile_config_t\s*\{.*?^\};", text, re.S | re.M)
    init = re.search(r"^inline void ggml_tile_config_init\(void\) \{.*?^\}", text, re.S | re.M)
    assert struct and init, f"{source}: tile_config_t or ggml_tile_config_init not found; update this test"
    return ("#include <immintrin.h>\n#include <cstdint>\n" + struct.group(0) + "\n" + init.group(0)
            + "\nvoid lanes_configure_tiles() { ggml_tile_config_init(); }\n")


def _compiler() -> str:
    compiler = shutil.which("g++") or shutil.which("c++")
    assert compiler, "no C++ compiler (the CPU lane is built with the host's)"
    return compiler


def _header_declares_8_bytes() -> bool:
    """The host compiler's _tile_loadconfig is GCC 12.2's asm with an 8-byte operand."""
    header = subprocess.run([_compiler(), "-print-file-name=include/amxtileintrin.h"], capture_output=True,
                            text=True).stdout.strip()
    text = pathlib.Path(header).read_text() if header and pathlib.Path(header).is_file() else ""
    return bool(re.search(r'ldtilecfg\\t%X0"\s*::\s*"m"\s*\(\*\(\(const void \*\*\)', text))


@pytest.mark.parametrize("tree,expect_bad", [("pristine", True), ("src", False)])
def test_the_check_fails_on_the_pristine_tree_and_passes_with_the_patch(tree, expect_bad, tmp_path):
    compiler = _compiler()
    if expect_bad and not _header_declares_8_bytes():
        pytest.skip("this compiler's _tile_loadconfig is not the 8-byte asm: the pristine tree is not broken here")
    unit = tmp_path / "tile_config.cpp"
    unit.write_text(_tile_config_unit(LLAMA / tree / MMQ))
    obj = tmp_path / "tile_config.o"
    subprocess.run([compiler, "-std=c++17", *VARIANT_FLAGS, "-c", str(unit), "-o", str(obj)], check=True)
    loads, bad = unconfigured_tile_loads(obj)
    assert loads == 1
    assert bool(bad) is expect_bad, (tree, bad)


def _host_runs_amx() -> str:
    flags = pathlib.Path("/proc/cpuinfo").read_text() if pathlib.Path("/proc/cpuinfo").exists() else ""
    if not re.search(r"\bamx_tile\b", flags) or not re.search(r"\bamx_int8\b", flags):
        return "this host's CPU has no AMX (amx_tile, amx_int8 not in /proc/cpuinfo)"
    return ""


@pytest.mark.skipif(bool(_host_runs_amx()), reason=_host_runs_amx() or "AMX host")
def test_quantized_batches_run_on_amx_and_match_the_baseline(tmp_path):
    from tools.runner.checks import cpu_variants
    from tools.runner.probes import cpu_variant_probe as probe

    outputs = {}
    for variant in ("x64", "sapphirerapids"):
        out = tmp_path / f"{variant}.npz"
        res = subprocess.run([sys.executable, str(cpu_variants.PROBE), "--lib_dir", str(LANE_DIR / "lib"),
                              "--variant_dir", str(LANE_DIR / "bin"), "--variant", variant, "--out", str(out)],
                             capture_output=True, text=True, timeout=600)
        from tools.runner import exits
        assert res.returncode == 0, f"{variant} probe exited {exits.describe(res.returncode)}: {res.stdout[-2000:]}"
        outputs[variant] = dict(np.load(out))
    amx = [k for k in outputs["sapphirerapids"] if k.endswith(".AMX")]
    assert any(".b37." in k for k in amx), f"no multi-token AMX case computed: {sorted(outputs['sapphirerapids'])}"
    for key in amx:
        base = key.rsplit(".", 1)[0] + "." + probe.DEFAULT_BUFFER
        assert cpu_variants.nmse(outputs["sapphirerapids"][key], outputs["x64"][base]) <= cpu_variants.MAX_NMSE_VARIANT, key


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
