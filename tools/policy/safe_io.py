"""Reading untrusted input files and printing what came from them, safely.

Every file admission, the publisher and a Tracker read (records, policy, nodes, route, keys, a
file:// mirror, a Tracker's state) goes through open_regular_file: it is opened only if it is a
regular file (never a FIFO, device or socket, which can block or never end), without blocking, and
read only up to a size limit (MAX_INPUT_BYTES unless the caller names another). Every name or
value from a file that reaches a terminal goes through escape(): control characters (newline,
ESC, ...) cannot forge output lines.
"""

from __future__ import annotations

import errno
import os
import pathlib
import stat
from collections.abc import Iterator

from tools.policy import dsse
from tools.policy.errors import InputTooLargeError, MalformedInputError, NotRegularFileError, UnreadableInputError

# 1 MiB: a signed record is a few KB, a policy with a thousand keys a few hundred KB.
MAX_INPUT_BYTES = 1 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular_file(path: pathlib.Path | str, *, follow_symlinks: bool = True,
                      limit: int | None = MAX_INPUT_BYTES) -> tuple[int, os.stat_result]:
    """(open file descriptor, its fstat) of `path`, a regular file of at most `limit` bytes (None:
    no size check); raises a TrustError otherwise. The caller closes the descriptor.

    The open never blocks: O_NONBLOCK makes a FIFO open return at once (even one swapped in after
    the stat), and the fstat of the opened descriptor is what decides, so a FIFO, a device such as
    /dev/zero (or a link to one) or a socket is refused before a byte is read.
    follow_symlinks=False (record directories) refuses symlinks outright: a record is a file in the
    directory, not a pointer to anything on the host (and a link loop must not be followed).
    """
    path = pathlib.Path(path)
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except OSError as err:
        raise UnreadableInputError(f"cannot stat ({err.strerror or err})") from err
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(f"{_kind(st.st_mode)}, not a regular file; not opened")
    if limit is not None and st.st_size > limit:
        raise InputTooLargeError(f"{st.st_size} bytes, over the {limit}-byte limit; not read")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRegularFileError("a symlink, not a regular file; not opened") from err
        raise UnreadableInputError(f"cannot open ({err.strerror or err})") from err
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{_kind(st.st_mode)}, not a regular file; not read")
        if limit is not None and st.st_size > limit:
            raise InputTooLargeError(f"{st.st_size} bytes, over the {limit}-byte limit; not read")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def iter_regular_file(path: pathlib.Path | str, *, limit: int | None = MAX_INPUT_BYTES,
                      chunk: int = 1 << 16) -> Iterator[bytes]:
    """The bytes of a regular file in chunks (open_regular_file's checks; the file is opened when
    this is called, not on the first iteration, so a refusal is raised here). Raises
    InputTooLargeError if it grows past `limit` while being read."""
    fd, _ = open_regular_file(path, limit=limit)
    return _chunks(fd, limit, chunk)


def _chunks(fd: int, limit: int | None, chunk: int) -> Iterator[bytes]:
    total = 0
    try:
        while True:
            want = chunk if limit is None else min(chunk, limit + 1 - total)
            try:
                data = os.read(fd, want)
            except OSError as err:
                raise UnreadableInputError(f"cannot read ({err.strerror or err})") from err
            if not data:
                return
            total += len(data)
            if limit is not None and total > limit:  # grew after the stat
                raise InputTooLargeError(f"over the {limit}-byte limit; not read")
            yield data
    finally:
        os.close(fd)


def read_regular_file_and_stat(path: pathlib.Path | str, *, follow_symlinks: bool = True,
                               limit: int = MAX_INPUT_BYTES) -> tuple[bytes, os.stat_result]:
    """read_regular_file, with the fstat of the descriptor the bytes came from (its mode, owner)."""
    fd, st = open_regular_file(path, follow_symlinks=follow_symlinks, limit=limit)
    return b"".join(_chunks(fd, limit, 1 << 16)), st


def read_regular_file(path: pathlib.Path | str, *, follow_symlinks: bool = True, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; raises a TrustError otherwise
    (open_regular_file: never a FIFO, device or socket, never a blocking open)."""
    return read_regular_file_and_stat(path, follow_symlinks=follow_symlinks, limit=limit)[0]


def load_json_object(path: pathlib.Path | str, what: str) -> dict:
    """A JSON object from a regular file: UTF-8, no duplicate keys, bounded depth (dsse.loads_strict)."""
    obj = dsse.loads_strict(read_regular_file(path))
    if not isinstance(obj, dict):
        raise MalformedInputError(f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


def escape(value: object) -> str:
    """`value` as one printable line: control and other non-printable characters and backslashes
    become \\xNN / \\uNNNN escapes, so a file name or reason cannot start a new output line or move
    the cursor."""
    out = []
    for ch in str(value):
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)
