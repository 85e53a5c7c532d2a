"""Verifies the patch stack against the exact pinned tree: clean check, apply, and reverse."""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess
import tempfile


class PatchStackError(Exception):
    """A patch of the stack does not check, apply or reverse cleanly; the message names it."""


def read_series(patches_dir: pathlib.Path) -> list[str]:
    series = patches_dir / "series"
    names = [l.strip() for l in series.read_text().splitlines() if l.strip() and not l.startswith("#")]
    on_disk = sorted(p.name for p in patches_dir.glob("*.patch"))
    if sorted(names) != on_disk:
        raise PatchStackError(f"{series} lists {names} but {patches_dir} holds {on_disk}: list every patch once")
    for name in names:
        first = (patches_dir / name).read_text().splitlines()[:1]
        if not first or not first[0].startswith("Purpose: "):
            raise PatchStackError(f"{name}: the first line must state the patch's purpose ('Purpose: ...')")
    return names


def tree_digest(root: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _patch(tree: pathlib.Path, patch: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["patch", "-p1", "--batch", "--fuzz=0", "-d", str(tree), "-i", str(patch), *extra],
                          capture_output=True, text=True, check=False)


def verify(pristine: pathlib.Path, patches_dir: pathlib.Path) -> list[str]:
    """Checks, applies, then reverses every patch in series order; returns the names verified."""
    names = read_series(patches_dir)
    with tempfile.TemporaryDirectory() as scratch:
        tree = pathlib.Path(scratch, "tree")
        shutil.copytree(pristine, tree, symlinks=False)
        before = tree_digest(tree)
        for name in names:
            for step, args in (("check", ("--dry-run",)), ("apply", ())):
                res = _patch(tree, patches_dir / name, "--forward", *args)
                # patch exits 0 but warns on offsets; the stack must match the pinned tree exactly.
                if res.returncode != 0 or "offset" in res.stdout or "fuzz" in res.stdout:
                    raise PatchStackError(f"{name}: {step} failed against the pinned tree:\n{res.stdout}{res.stderr}")
        for name in reversed(names):
            res = _patch(tree, patches_dir / name, "--reverse")
            if res.returncode != 0:
                raise PatchStackError(f"{name}: reverse failed:\n{res.stdout}{res.stderr}")
        if tree_digest(tree) != before:
            raise PatchStackError("applying then reversing the stack did not restore the pinned tree")
    return names
