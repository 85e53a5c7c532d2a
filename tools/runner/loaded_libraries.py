"""Which shared objects a running lane process has mapped that are neither the lane's nor the system's.

A clean environment (steps.child_env) keeps LD_PRELOAD, LD_LIBRARY_PATH and GGML_BACKEND_PATH from
reaching a lane process; this is the observation that proves it for a long-running one
(llama-server): /proc/<pid>/maps, read by the runner, lists every file the process has mapped.
"""

from __future__ import annotations

import os

SYSTEM_LIBRARY_ROOTS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
_DELETED = " (deleted)"


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


def foreign_libraries(pid: int, lane_dir: str | os.PathLike, allowed_roots: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The shared objects (a name with `.so`, or any executable file mapping other than the process's
    own executable) that `pid` has mapped from outside `lane_dir`, the system library dirs
    (SYSTEM_LIBRARY_ROOTS) and `allowed_roots` (SDK roots, e.g. the CUDA toolkit): sorted, each once.
    A mapping of a deleted file (`... (deleted)`, including memfd:) is foreign wherever it was: what
    it was can no longer be checked. Raises OSError when /proc/<pid>/maps cannot be read."""
    roots = [_real(lane_dir)] + [_real(r) for r in (*SYSTEM_LIBRARY_ROOTS, *allowed_roots)]
    roots += list(SYSTEM_LIBRARY_ROOTS)  # /lib may be a link to /usr/lib: both spellings
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    found: set[str] = set()
    for path, executable in mapped_files(pid):
        if not _is_library(path, executable):
            continue
        if path.endswith(_DELETED) or path.startswith("/memfd:"):
            found.add(path)
            continue
        if path == exe and ".so" not in path.rsplit("/", 1)[-1]:
            continue
        if not _under(_real(path), roots):
            found.add(path)
    return sorted(found)
