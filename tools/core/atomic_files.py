"""Crash-safe writes for everything that lands under evidence/ (issue 15: nothing half-written).

A file is written to a temporary sibling (same directory, so same filesystem), fsynced, renamed over
the target with os.replace (atomic on POSIX), and the directory is fsynced so the rename survives a
power loss. A reader sees the old file or the new one, never a prefix. A whole directory (a run:
report + logs) is copied into a temporary sibling and renamed into place; an existing one is swapped
atomically with renameat2(RENAME_EXCHANGE) on Linux, elsewhere moved aside first (a kill between the
two renames is repaired by sweep_leftovers() at the next start).

Temporary names carry their owner (pid and process start time), so sweep_leftovers() removes only
what a dead process left: `.<name>.lanes-tmp-p<pid>s<start>-<random>`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import pathlib
import re
import shutil
import sys
import tempfile
from collections.abc import Callable

from tools.core import process_identity as proc_info  # pid + start time
from tools.core.errors import UnwritableOutputError

_TMP_MARK = ".lanes-tmp-"
_OLD_MARK = ".lanes-old-"
_LEFTOVER_RE = re.compile(r"^\.(?P<name>.+)\.lanes-(?P<kind>tmp|old)-p(?P<pid>\d+)s(?P<start>\d+)-")

# Errors that mean "this location cannot take the file"; reported naming the file, no traceback.
_CLEAR_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "read-only file system",
                 errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
                 errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file too large for this file system",
                 errno.ENOTDIR: "a path component is not a directory"}

# Test-only: called as hook(stage, path) at commit points ("file-staged", "dir-staged") so the
# fault-injection test can kill the process exactly between staging and rename. None in production.
test_hook: Callable[[str, pathlib.Path], None] | None = None


class AtomicWriteError(UnwritableOutputError, OSError):
    """A file or directory under evidence/ could not be written; nothing partial was left."""

    def __init__(self, path: os.PathLike | str, err: OSError):
        reason = _CLEAR_ERRNOS.get(err.errno or 0, err.strerror or str(err))
        super().__init__(err.errno, f"cannot write {path}: {reason}"
                         + (f" ({errno.errorcode.get(err.errno, '')})" if err.errno else ""))
        self.path = pathlib.Path(path)

    def __str__(self) -> str:
        return self.strerror


def _owner_tag() -> str:
    return f"p{os.getpid()}s{proc_info.start_time(os.getpid()) or 0}-"


def _fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # some platforms cannot open a directory; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _hook(stage: str, path: pathlib.Path) -> None:
    if test_hook is not None:
        test_hook(stage, path)


def write_bytes_atomic(path: os.PathLike | str, data: bytes, mode: int = 0o644) -> pathlib.Path:
    """Writes `data` to `path` atomically (old content or new, never a prefix); returns the path."""
    path = pathlib.Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{_TMP_MARK}{_owner_tag()}")
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked (and is what ENOSPC/EFBIG surface from)
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode & ~_umask())
            os.fsync(fd)
        finally:
            os.close(fd)
        _hook("file-staged", path)
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    except OSError as err:
        if isinstance(err, AtomicWriteError):
            raise
        raise AtomicWriteError(path, err) from err
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def write_text_atomic(path: os.PathLike | str, text: str, mode: int = 0o644) -> pathlib.Path:
    return write_bytes_atomic(path, text.encode("utf-8"), mode)


def copy_file_atomic(src: os.PathLike | str, dst: os.PathLike | str) -> pathlib.Path:
    return write_bytes_atomic(dst, pathlib.Path(src).read_bytes())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _copy_tree_synced(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Copies src into the (existing, empty) dst and fsyncs every file and directory."""
    for root, dirs, files in os.walk(src):
        rel = pathlib.Path(root).relative_to(src)
        target = dst / rel
        for d in dirs:
            (target / d).mkdir()
        for f in files:
            with open(pathlib.Path(root) / f, "rb") as fin, open(target / f, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fout.fileno())
        _fsync_dir(target)


_RENAME_EXCHANGE = 2
_libc = None


def _exchange(a: pathlib.Path, b: pathlib.Path) -> bool:
    """Atomically swaps two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fn = getattr(_libc, "renameat2", None)
    if fn is None:  # glibc < 2.28
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # file system without exchange support
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish_dir(src: os.PathLike | str, final: os.PathLike | str) -> pathlib.Path:
    """Makes `final` a complete copy of directory `src`: copied into a temporary sibling first, then
    renamed into place; an existing `final` is replaced only once the new copy is complete."""
    src, final = pathlib.Path(src), pathlib.Path(final)
    tmp: pathlib.Path | None = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}{_TMP_MARK}{_owner_tag()}"))
        _copy_tree_synced(src, tmp)
        os.chmod(tmp, 0o755 & ~_umask())
        _hook("dir-staged", final)
        if not final.exists():
            os.rename(tmp, final)
            tmp = None
        elif _exchange(tmp, final):
            pass  # tmp now holds the old run; removed below
        else:
            old = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}{_OLD_MARK}{_owner_tag()}"))
            os.rmdir(old)
            os.rename(final, old)  # a kill here: sweep_leftovers() renames `old` back
            os.rename(tmp, final)
            tmp = old
        _fsync_dir(final.parent)
    except OSError as err:
        if isinstance(err, AtomicWriteError):
            raise
        raise AtomicWriteError(final, err) from err
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def sweep_leftovers(root: os.PathLike | str) -> list[str]:
    """Removes temporary files/dirs under `root` left by dead writers (a moved-aside old directory
    whose replacement never arrived is put back). Returns what was done, one line each."""
    root = pathlib.Path(root)
    done: list[str] = []
    if not root.is_dir():
        return done
    for dirpath, dirnames, filenames in os.walk(root):
        for name in list(dirnames) + filenames:
            m = _LEFTOVER_RE.match(name)
            if not m:
                continue
            if proc_info.same_process(int(m["pid"]), int(m["start"])):
                continue  # its writer is still running
            path = pathlib.Path(dirpath) / name
            target = pathlib.Path(dirpath) / m["name"]
            if m["kind"] == "old" and not target.exists():
                os.rename(path, target)
                done.append(f"restored {target} (its replacement was interrupted)")
            else:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                done.append(f"removed {path} (left by dead process {m['pid']})")
            if name in dirnames:
                dirnames.remove(name)
    return done
