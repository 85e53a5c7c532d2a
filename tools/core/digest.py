"""sha256 of files and bytes, hex: the one digest helper every package uses."""

from __future__ import annotations

import hashlib
import os

_BLOCK = 1 << 20


def sha256_file(path: os.PathLike | str) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks (model files are gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
