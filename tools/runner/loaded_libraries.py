"""Which shared objects a running lane process has mapped that are neither the lane's nor the system's.

A clean environment (steps.child_env) keeps LD_PRELOAD, LD_LIBRARY_PATH and GGML_BACKEND_PATH from
reaching a lane process; this is the observation that proves it for a long-running one
(llama-server): /proc/<pid>/maps, read by the runner, lists every file the process has mapped.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import subprocess

SYSTEM_LIBRARY_ROOTS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
_DELETED = " (deleted)"
# `\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1` in `ldconfig -p`.
_CACHE_ENTRY = re.compile(r"^\t\S+ \([^)]*\) => (?P<path>/\S+)$")
_MAX_CACHE_LISTING = 4 << 20
# NVIDIA's GL/Vulkan driver (the Vulkan ICD libGLX_nvidia with libnvidia-glcore) writes dispatch stubs
# it generates into an anonymous memfd named ".glXXXXXX" and maps it executable. No file backs it that
# anyone could swap, and only code already in the process can make it; it is accepted only where the
# driver library that makes it is mapped from the system (root-controlled), and listed in the log.
DRIVER_MEMFD = "/memfd:/.glXXXXXX (deleted)"
_DRIVER_MEMFD_MAKERS = re.compile(r"^lib(?:nvidia-glcore|GLX_nvidia)\.so\.[0-9.]+$")


def sdk_roots(is_accelerator: bool) -> list[str]:
    """Where an accelerator lane's SDK libraries may come from (the CUDA toolkit, ROCm)."""
    return [os.environ.get("CUDA_HOME", "/usr/local/cuda"), "/opt/rocm"] if is_accelerator else []


def parse_loader_cache(text: str) -> set[str]:
    """The paths `ldconfig -p` lists (the system loader's cache: what /etc/ld.so.conf names)."""
    return {m["path"] for m in map(_CACHE_ENTRY.match, text.splitlines()) if m}


def loader_cache_files(listing: str | None = None) -> set[str]:
    """Real paths of the libraries in the system loader's cache. A GPU driver is installed there
    (an NVIDIA container mounts libcuda under /usr/local/nvidia/lib64 and lists it in ld.so.conf):
    root-owned configuration, unlike LD_LIBRARY_PATH, which no lane process gets. Empty when
    ldconfig cannot be run; a listing over 4 MiB is refused as none."""
    if listing is None:
        try:
            proc = subprocess.run(["ldconfig", "-p"], capture_output=True, timeout=30, check=False,
                                  env={"PATH": "/usr/sbin:/sbin:/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired):
            return set()
        if proc.returncode != 0 or len(proc.stdout) > _MAX_CACHE_LISTING:
            return set()
        listing = proc.stdout.decode("utf-8", errors="replace")
    return {real for real in map(_real, parse_loader_cache(listing)) if root_controlled(real)}


def root_controlled(path: str) -> bool:
    """Only root can replace `path`: it and every directory above it are root's and writable by no
    one else (a world-writable directory only with the sticky bit, which keeps root's files root's).
    The loader's cache is root's, but the files it names need not be."""
    try:
        st = os.stat(path)
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not stat.S_ISREG(st.st_mode):
            return False
        parent = os.path.dirname(path)
        while True:
            st = os.stat(parent)
            if st.st_uid != 0 or (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX):
                return False
            if parent == os.path.dirname(parent):
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(path)


def mapped_files(pid: int) -> list[tuple[str, bool]]:
    """(path, executable mapping) of every file-backed mapping of `pid`, from /proc/<pid>/maps.
    Raises OSError when the process is gone or its maps cannot be read."""
    out: list[tuple[str, bool]] = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            # address perms offset dev inode pathname (the pathname may contain spaces)
            fields = line.rstrip("\n").split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/"):
                out.append((fields[5], "x" in fields[1]))
    return out


def _is_library(path: str, executable: bool) -> bool:
    name = path.rsplit("/", 1)[-1].removesuffix(_DELETED)
    return executable or ".so" in name


def foreign_libraries(pid: int, lane_dir: str | os.PathLike, allowed_roots: tuple[str, ...] | list[str] = (),
                      system_files: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The shared objects (a name with `.so`, or any executable file mapping other than the process's
    own executable) that `pid` has mapped from outside `lane_dir`, the system library dirs
    (SYSTEM_LIBRARY_ROOTS), `allowed_roots` (SDK roots, e.g. the CUDA toolkit) and `system_files`
    (real paths the system loader's cache lists, loader_cache_files()): sorted, each once.
    A mapping of a deleted file (`... (deleted)`, including memfd:) is foreign wherever it was: what
    it was can no longer be checked; DRIVER_MEMFD alone is not, beside its maker from the system. Raises OSError when /proc/<pid>/maps cannot be read."""
    roots = [_real(lane_dir)] + [_real(r) for r in (*SYSTEM_LIBRARY_ROOTS, *allowed_roots)]
    roots += list(SYSTEM_LIBRARY_ROOTS)  # /lib may be a link to /usr/lib: both spellings
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    found: set[str] = set()
    maker_mapped = False
    for path, executable in mapped_files(pid):
        if not _is_library(path, executable):
            continue
        if path.endswith(_DELETED) or path.startswith("/memfd:"):
            found.add(path)
            continue
        if path == exe and ".so" not in path.rsplit("/", 1)[-1]:
            continue
        if not _under(_real(path), roots) and _real(path) not in system_files:
            found.add(path)
        elif _DRIVER_MEMFD_MAKERS.match(path.rsplit("/", 1)[-1]) and root_controlled(_real(path)):
            maker_mapped = True
    if maker_mapped:
        found.discard(DRIVER_MEMFD)
    return sorted(found)


# What the dynamic loader would resolve for each of the lane's ELF files, without running them
# (`<interpreter> --list FILE`), in the environment the lane's processes get: the short-lived
# binaries live too briefly for /proc/<pid>/maps, and a library that resolves from outside the lane,
# the system and the SDK (through a RUNPATH, or a variable the environment let through) was never
# hashed. Libraries that ggml loads with dlopen (GGML_BACKEND_DL) are lane files listed themselves.

ELF_MAGIC = b"\x7fELF"
_PT_INTERP = 3
_MAX_INTERP = 4096
# `\tname => /path (0xaddr)`, `\tname => not found`, `\t/abs/name (0xaddr)`, `\tlinux-vdso.so.1 (0xaddr)`
_RESOLVED = re.compile(r"^\t(?P<name>[^\s=]+) => (?P<path>/\S+) \(0x[0-9a-f]+\)$")
_NOT_FOUND = re.compile(r"^\t(?P<name>[^\s=]+) => not found$")
_DIRECT = re.compile(r"^\t(?P<path>/\S+) \(0x[0-9a-f]+\)$")
_VDSO = re.compile(r"^\tlinux-(?:vdso|gate)\.so\.1 \(0x[0-9a-f]+\)$")
_STATIC = re.compile(r"^\tstatically linked$")


class LoaderListError(ValueError):
    """The loader's listing cannot be read as the libraries it resolved."""


def is_elf(path: str | os.PathLike) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == ELF_MAGIC


def elf_interpreter(path: str | os.PathLike) -> str | None:
    """The PT_INTERP path of a 64-bit little-endian ELF (None for a shared library without one)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != ELF_MAGIC or head[4] != 2 or head[5] != 1:
            raise LoaderListError(f"{path}: not a 64-bit little-endian ELF file")
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        if phentsize < 56 or phnum > 4096:
            raise LoaderListError(f"{path}: implausible program header table ({phnum} x {phentsize} bytes)")
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(56)
            if len(ph) < 56:
                raise LoaderListError(f"{path}: program header {i} is truncated")
            p_type, = struct.unpack_from("<I", ph, 0)
            if p_type == _PT_INTERP:
                offset, = struct.unpack_from("<Q", ph, 8)
                size, = struct.unpack_from("<Q", ph, 32)
                if not 1 < size <= _MAX_INTERP:
                    raise LoaderListError(f"{path}: PT_INTERP of {size} bytes")
                f.seek(offset)
                raw = f.read(size)
                return raw.split(b"\0", 1)[0].decode("ascii", errors="strict")
    return None


def parse_loader_list(text: str) -> list[tuple[str, str | None]]:
    """(needed name, resolved path or None when not found) per line of `ld.so --list` output; a line
    naming a path directly (the loader itself, a preloaded object) gives (its file name, the path).
    The vDSO is left out. A line of any other shape is refused: a name the lane chose could
    otherwise hide a resolution."""
    out: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        if not line.strip() or _VDSO.match(line) or _STATIC.match(line):
            continue
        if m := _RESOLVED.match(line):
            out.append((m["name"], m["path"]))
        elif m := _NOT_FOUND.match(line):
            out.append((m["name"], None))
        elif m := _DIRECT.match(line):
            out.append((m["path"].rsplit("/", 1)[-1], m["path"]))
        else:
            raise LoaderListError(f"unreadable loader line {line[:120]!r}")
    return out


def classify(resolved: str, own: dict[str, str], allowed_roots: list[str] | tuple[str, ...],
             system_files: set[str] | frozenset[str] = frozenset()) -> str:
    """`lane:<relative path>` for a lane file (by real path: Bazel's runfiles are links), `system:`
    or `sdk:` + the real path under those roots, `cache:` + the real path of a root-controlled file
    the system loader's cache lists (`system_files`, loader_cache_files(): the GPU driver's libcuda
    where a container mounts it), else `foreign:` + the real path."""
    real = _real(resolved)
    if real in own:
        return "lane:" + own[real]
    system = [_real(r) for r in SYSTEM_LIBRARY_ROOTS] + list(SYSTEM_LIBRARY_ROOTS)
    if _under(real, system):
        return "system:" + real
    if allowed_roots and _under(real, [_real(r) for r in allowed_roots]):
        return "sdk:" + real
    if real in system_files:
        return "cache:" + real
    return "foreign:" + real


# The runner's line per resolution in artifact_integrity.log (outside command blocks).
RESOLUTION_LINE = re.compile(r"^resolves (?P<file>\S+) (?P<name>\S+) => (?P<where>\S+)$", re.MULTILINE)


def resolution_problems(lines: list[tuple[str, str, str]], lane_files_listed: set[str],
                        allowed_roots: list[str], cache_files: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Why the logged resolutions (file, needed name, classification) are not all the lane's own
    files, the system's, the SDK's or the loader cache's (`cache_files`: the root-controlled files the
    run found in it, as its step config lists them): re-derived from the classification's real path,
    not its label."""
    out = []
    for file, name, where in lines:
        kind, _, path = where.partition(":")
        if kind == "lane" and path in lane_files_listed:
            continue
        if kind == "system" and _under(path, list(SYSTEM_LIBRARY_ROOTS) + [_real(r) for r in SYSTEM_LIBRARY_ROOTS]):
            continue
        if kind == "sdk" and allowed_roots and _under(path, allowed_roots):
            continue
        if kind == "cache" and path in cache_files:
            continue
        if kind == "missing":
            out.append(f"{file}: {name} is not found by the loader")
        else:
            out.append(f"{file}: {name} resolves to {path or where} (outside the lane, the system and the SDK)")
    return out
