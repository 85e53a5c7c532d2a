"""Fetches sha256-pinned Debian packages and unpacks them into one directory (stdlib only).

Run by the `debian_packages` repository rule (debian_packages.bzl). The lock names each package by
exact version and the sha256 of its .deb; a .deb comes from $LANES_DEB_DIR (offline machines) or
from the host's own apt configuration (`apt-get download`), so no mirror's name lives in the repo.
Every .deb is checked before it is unpacked; a mismatch stops the fetch and names the package.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
# Debian versions: [epoch:]upstream[-revision]
_VERSION = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
_ARCHITECTURES = {"all", "amd64", "arm64", "i386", "armhf", "ppc64el", "s390x", "riscv64"}


class DebError(Exception):
    """Base of every failure this script reports (one line to the user, what to do included)."""


class LockError(DebError):
    """The lock file is malformed."""


class FetchError(DebError):
    """A pinned .deb could not be obtained."""


class DigestMismatch(DebError):
    """A .deb's sha256 is not the one the lock pins."""


class UnpackError(DebError):
    """A .deb could not be unpacked (no tool, or a broken archive)."""


@dataclasses.dataclass(frozen=True)
class LockEntry:
    package: str
    version: str
    architecture: str
    sha256: str

    @property
    def spec(self) -> str:
        return f"{self.package}={self.version}"

    def filenames(self) -> list[str]:
        """Names a .deb of this entry may have: apt-get writes the epoch as %3a, the pool drops it."""
        upstream = self.version.split(":", 1)[-1]
        names = [f"{self.package}_{self.version.replace(':', '%3a')}_{self.architecture}.deb",
                 f"{self.package}_{upstream}_{self.architecture}.deb"]
        return list(dict.fromkeys(names))


def parse_lock(text: str, source: str = "lock") -> list[LockEntry]:
    """Parses `<package> <version> <architecture> <sha256>` lines; '#' starts a comment."""
    entries: list[LockEntry] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{source}:{number}"
        if len(fields) != 4:
            raise LockError(f"{where}: expected '<package> <version> <architecture> <sha256>', got {raw.strip()!r}")
        package, version, arch, digest = fields
        if not _PACKAGE.match(package):
            raise LockError(f"{where}: {package!r} is not a Debian package name")
        if not _VERSION.match(version):
            raise LockError(f"{where}: {version!r} is not an exact Debian version of {package}")
        if arch not in _ARCHITECTURES:
            raise LockError(f"{where}: unknown architecture {arch!r} for {package}")
        if not _SHA256.match(digest):
            raise LockError(f"{where}: sha256 of {package} must be 64 lowercase hex digits, got {digest!r}")
        if package in seen:
            raise LockError(f"{where}: {package} is pinned twice")
        seen.add(package)
        entries.append(LockEntry(package, version, arch, digest))
    if not entries:
        raise LockError(f"{source}: no packages")
    return entries


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(entry: LockEntry, deb: pathlib.Path) -> None:
    """Refuses a .deb whose sha256 is not the pinned one."""
    got = sha256_of(deb)
    if got != entry.sha256:
        raise DigestMismatch(
            f"sha256 mismatch for Debian package {entry.package} {entry.version} ({deb.name}): "
            f"the lock pins {entry.sha256}, the file has {got}; refusing to unpack it "
            "(a different build of that version, or a corrupted download)")


def find_in_dir(entry: LockEntry, deb_dir: pathlib.Path) -> pathlib.Path:
    for name in entry.filenames():
        if (deb_dir / name).is_file():
            return deb_dir / name
    raise FetchError(
        f"LANES_DEB_DIR={deb_dir} has no .deb for {entry.package} {entry.version} "
        f"({' or '.join(entry.filenames())}); put it there (`apt-get download {entry.spec}` on a "
        "machine with apt) or unset LANES_DEB_DIR to fetch it with this host's apt")


Runner = Callable[..., subprocess.CompletedProcess]


def apt_download(entries: Sequence[LockEntry], into: pathlib.Path, run: Runner = subprocess.run) -> dict[str, pathlib.Path]:
    """Downloads the exact versions with the host's apt configuration into `into`."""
    if not shutil.which("apt-get"):
        raise FetchError("no apt-get on this host: set LANES_DEB_DIR to a directory holding the pinned .deb files "
                         f"({', '.join(e.spec for e in entries)})")
    into.mkdir(parents=True, exist_ok=True)
    # As root, apt would try to drop to the _apt user, which cannot write into Bazel's output base.
    argv = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root"] + [e.spec for e in entries]
    proc = run(argv, cwd=into, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise FetchError(
            f"`{' '.join(argv)}` failed (exit {proc.returncode}):\n{proc.stderr.strip()}\n"
            "Run `apt-get update` (as root) so apt knows these exact versions, then build again; "
            "offline, set LANES_DEB_DIR to a directory holding the pinned .deb files")
    return {e.package: find_in_dir(e, into) for e in entries}


def unpack(deb: pathlib.Path, dest: pathlib.Path, which: Callable[[str], str | None] = shutil.which) -> None:
    """Extracts a .deb's data into dest: dpkg-deb -x, or ar + tar where dpkg is absent."""
    dest.mkdir(parents=True, exist_ok=True)
    if which("dpkg-deb"):
        proc = subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise UnpackError(f"dpkg-deb -x {deb.name} failed: {proc.stderr.strip()}")
        return
    if not (which("ar") and which("tar")):
        raise UnpackError(f"cannot unpack {deb.name}: neither dpkg-deb nor ar + tar is on PATH "
                          "(install dpkg, or binutils and tar)")
    with tempfile.TemporaryDirectory() as tmp:
        members = subprocess.run(["ar", "t", str(deb)], capture_output=True, text=True, check=False).stdout.split()
        data = [m for m in members if m.startswith("data.tar")]
        if len(data) != 1:
            raise UnpackError(f"{deb.name} is not a Debian package (ar members: {members})")
        subprocess.run(["ar", "x", str(deb), data[0]], cwd=tmp, check=True)
        proc = subprocess.run(["tar", "-xf", str(pathlib.Path(tmp) / data[0]), "-C", str(dest)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise UnpackError(f"tar cannot extract {data[0]} of {deb.name}: {proc.stderr.strip()}")


def relocate_icd(dest: pathlib.Path, manifest: str, out: str) -> str:
    """Writes a copy of a shipped ICD manifest whose library_path is relative to the copy.

    The Vulkan loader resolves a library_path that contains a slash relative to the manifest's
    directory, so the unpacked tree works wherever Bazel puts it.
    """
    data = json.loads((dest / manifest).read_text())
    library = data["ICD"]["library_path"]
    relative = pathlib.PurePosixPath(library.lstrip("/"))
    if not (dest / relative).is_file():
        raise UnpackError(f"{manifest} names {library}, which no pinned package provides")
    target = dest / out
    data["ICD"]["library_path"] = os.path.relpath(dest / relative, target.parent)
    if "/" not in data["ICD"]["library_path"]:
        data["ICD"]["library_path"] = "./" + data["ICD"]["library_path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")
    return data["ICD"]["library_path"]


def ldd_report(dest: pathlib.Path, library: str, lib_dirs: Sequence[str]) -> tuple[str, list[str]]:
    """ldd of an unpacked library with the unpacked lib dirs first; returns (text, unresolved names)."""
    if not shutil.which("ldd"):
        return "ldd not available on this host\n", []
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(str(dest / d) for d in lib_dirs))
    proc = subprocess.run(["ldd", str(dest / library)], capture_output=True, text=True, env=env, check=False)
    # Load addresses change every run; the report should not.
    text = re.sub(r" \(0x[0-9a-f]+\)", "", proc.stdout.replace(str(dest) + "/", "<repo>/"))
    missing = [line.split()[0] for line in text.splitlines() if "not found" in line]
    return text, missing


def fetch(entries: Sequence[LockEntry], dest: pathlib.Path, deb_dir: pathlib.Path | None,
          run: Runner = subprocess.run) -> list[dict[str, str]]:
    """Obtains, verifies (all before any is unpacked) and unpacks every pinned package."""
    staging = dest / "_debs"
    if deb_dir is not None:
        debs = {e.package: find_in_dir(e, deb_dir) for e in entries}
    else:
        debs = apt_download(entries, staging, run)
    for entry in entries:
        verify(entry, debs[entry.package])
    for entry in entries:
        unpack(debs[entry.package], dest)
    shutil.rmtree(staging, ignore_errors=True)
    return [{"name": e.package, "version": e.version, "architecture": e.architecture, "sha256": e.sha256}
            for e in entries]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lock", type=pathlib.Path, required=True)
    parser.add_argument("--dest", type=pathlib.Path, required=True)
    parser.add_argument("--deb_dir", default=os.environ.get("LANES_DEB_DIR", ""),
                        help="directory of .deb files (default $LANES_DEB_DIR); empty: apt-get download")
    parser.add_argument("--icd", action="append", default=[], metavar="SHIPPED=OUT",
                        help="relocate a shipped ICD manifest to OUT with a relative library_path")
    parser.add_argument("--ldd", action="append", default=[], metavar="LIB",
                        help="record ldd of an unpacked library in ldd.txt")
    parser.add_argument("--lib_dir", action="append", default=[], help="unpacked library dirs, for --ldd")
    parser.add_argument("--manifest", default="packages.json")
    args = parser.parse_args(argv)
    try:
        entries = parse_lock(args.lock.read_text(), str(args.lock.name))
        archives = fetch(entries, args.dest, pathlib.Path(args.deb_dir) if args.deb_dir else None)
        icds = {}
        for spec in args.icd:
            shipped, out = spec.split("=", 1)
            icds[out] = relocate_icd(args.dest, shipped, out)
        unresolved: list[str] = []
        if args.ldd:
            reports = []
            for lib in args.ldd:
                text, missing = ldd_report(args.dest, lib, args.lib_dir)
                reports.append(f"# ldd {lib} (LD_LIBRARY_PATH = unpacked {', '.join(args.lib_dir)})\n{text}")
                unresolved += missing
            (args.dest / "ldd.txt").write_text("\n".join(reports))
            if unresolved:
                print(f"libraries found neither in the pinned packages nor on this host: {', '.join(sorted(set(unresolved)))} (ldd.txt)")
    except DebError as err:
        print(f"fetch_debs: {err}", file=sys.stderr)
        return 1
    (args.dest / args.manifest).write_text(json.dumps(
        {"archives": archives, "icds": icds, "unresolved": sorted(set(unresolved))}, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
