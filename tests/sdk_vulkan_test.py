"""The Vulkan SDK's Debian package locks and fetch_debs.py: parse, verify, refuse, unpack.

Fake .deb files are built here (ar + tar, the Debian format), so nothing is downloaded.
"""

import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

import pytest

from toolchains.vulkan import fetch_debs

_VULKAN = pathlib.Path(fetch_debs.__file__).resolve().parent


def _ar(members: dict[str, bytes]) -> bytes:
    """A System V ar archive, the container of a .deb."""
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, data in members.items():
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n"
        out.write(header.encode())
        out.write(data)
        if len(data) % 2:
            out.write(b"\n")
    return out.getvalue()


def _tar_gz(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            info.mode = 0o755 if "/bin/" in name else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def make_deb(path: pathlib.Path, package: str, version: str, files: dict[str, bytes]) -> str:
    """Writes a minimal .deb holding `files`; returns its sha256."""
    control = f"Package: {package}\nVersion: {version}\nArchitecture: amd64\nMaintainer: t <t@t>\nDescription: fake\n"
    path.write_bytes(_ar({
        "debian-binary": b"2.0\n",
        "control.tar.gz": _tar_gz({"control": control.encode()}),
        "data.tar.gz": _tar_gz(files),
    }))
    return fetch_debs.sha256_of(path)


@pytest.fixture
def deb_dir(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[fetch_debs.LockEntry]]:
    debs = tmp_path / "debs"
    debs.mkdir()
    entries = []
    for package, version, files in [
        ("libfake1", "1.0-1", {"usr/lib/x86_64-linux-gnu/libfake.so.1": b"\x7fELF fake"}),
        ("fake-tools", "1:2.0-3", {"usr/bin/fakec": b"#!/bin/sh\necho fakec 2.0\n"}),
    ]:
        filename = f"{package}_{version.replace(':', '%3a')}_amd64.deb"
        sha = make_deb(debs / filename, package, version, files)
        entries.append(fetch_debs.LockEntry(package, version, "amd64", sha))
    return debs, entries


def _lock_text(entries: list[fetch_debs.LockEntry]) -> str:
    return "# test lock\n" + "".join(f"{e.package} {e.version} {e.architecture} {e.sha256}\n" for e in entries)


@pytest.mark.parametrize("lock, required", [
    ("vulkan_sdk_lock.txt", {"libvulkan-dev", "libvulkan1", "glslc", "libshaderc1", "spirv-headers"}),
    ("vulkan_lavapipe_lock.txt", {"mesa-vulkan-drivers", "libllvm15"}),
])
def test_committed_locks_parse_with_a_sha256_for_every_package(lock: str, required: set[str]) -> None:
    entries = fetch_debs.parse_lock((_VULKAN / lock).read_text(), lock)
    assert required <= {e.package for e in entries}
    for entry in entries:
        assert len(entry.sha256) == 64 and int(entry.sha256, 16) >= 0, entry
        assert entry.architecture in {"amd64", "all"}, entry


def test_sdk_lock_pins_the_versions_the_lane_names() -> None:
    pins = {e.package: e.version for e in fetch_debs.parse_lock((_VULKAN / "vulkan_sdk_lock.txt").read_text())}
    assert pins["libvulkan-dev"] == pins["libvulkan1"] == "1.3.239.0-1"
    assert pins["glslc"] == pins["libshaderc1"] == "2023.2-1"
    assert pins["spirv-headers"] == "1.6.1+1.3.239.0-1"


@pytest.mark.parametrize("line, message", [
    ("glslc 2023.2-1 amd64", "expected '<package> <version> <architecture> <sha256>'"),
    ("glslc 2023.2-1 amd64 " + "ab" * 31, "64 lowercase hex"),
    ("glslc 2023.2-1 amd64 " + "AB" * 32, "64 lowercase hex"),
    ("glslc 2023.2-1 sparc " + "ab" * 32, "unknown architecture"),
    ("glslc >=2023 amd64 " + "ab" * 32, "not an exact Debian version"),
    ("Glslc 2023.2-1 amd64 " + "ab" * 32, "not a Debian package name"),
    ("glslc 2023.2-1 amd64 " + "ab" * 32 + "\nglslc 2023.2-1 amd64 " + "cd" * 32, "pinned twice"),
    ("# only a comment", "no packages"),
])
def test_malformed_lock_is_refused(line: str, message: str) -> None:
    with pytest.raises(fetch_debs.LockError, match=message):
        fetch_debs.parse_lock(line + "\n", "test.lock")


def test_epoch_versions_match_apt_and_pool_file_names() -> None:
    entry = fetch_debs.LockEntry("libllvm15", "1:15.0.6-4+b1", "amd64", "0" * 64)
    assert entry.filenames() == ["libllvm15_1%3a15.0.6-4+b1_amd64.deb", "libllvm15_15.0.6-4+b1_amd64.deb"]


def test_pinned_debs_are_verified_and_unpacked(tmp_path: pathlib.Path, deb_dir) -> None:
    debs, entries = deb_dir
    dest = tmp_path / "repo"
    archives = fetch_debs.fetch(entries, dest, debs)
    assert (dest / "usr/lib/x86_64-linux-gnu/libfake.so.1").read_bytes() == b"\x7fELF fake"
    assert os.access(dest / "usr/bin/fakec", os.X_OK)
    assert [(a["name"], a["sha256"]) for a in archives] == [(e.package, e.sha256) for e in entries]
    assert not (dest / "_debs").exists()


def test_wrong_sha256_is_refused_naming_the_package_and_nothing_is_unpacked(tmp_path: pathlib.Path, deb_dir) -> None:
    debs, entries = deb_dir
    # Same name and version, different bytes: what a corrupted or substituted download looks like.
    make_deb(debs / "fake-tools_1%3a2.0-3_amd64.deb", "fake-tools", "1:2.0-3", {"usr/bin/fakec": b"#!/bin/sh\necho evil\n"})
    dest = tmp_path / "repo"
    with pytest.raises(fetch_debs.DigestMismatch, match=r"sha256 mismatch for Debian package fake-tools 1:2.0-3") as err:
        fetch_debs.fetch(entries, dest, debs)
    assert entries[1].sha256 in str(err.value)
    assert not (dest / "usr").exists()


def test_main_exits_nonzero_with_the_package_named(tmp_path: pathlib.Path, deb_dir, capsys) -> None:
    debs, entries = deb_dir
    lock = tmp_path / "lock.txt"
    bad = fetch_debs.LockEntry(entries[0].package, entries[0].version, "amd64", "0" * 64)
    lock.write_text(_lock_text([bad, entries[1]]))
    assert fetch_debs.main(["--lock", str(lock), "--dest", str(tmp_path / "repo"), "--deb_dir", str(debs)]) == 1
    assert "sha256 mismatch for Debian package libfake1 1.0-1" in capsys.readouterr().err
    lock.write_text(_lock_text(entries))
    assert fetch_debs.main(["--lock", str(lock), "--dest", str(tmp_path / "repo"), "--deb_dir", str(debs)]) == 0
    manifest = json.loads((tmp_path / "repo/packages.json").read_text())
    assert [a["name"] for a in manifest["archives"]] == ["libfake1", "fake-tools"]


def test_missing_deb_in_deb_dir_names_the_package(tmp_path: pathlib.Path, deb_dir) -> None:
    debs, entries = deb_dir
    (debs / "libfake1_1.0-1_amd64.deb").unlink()
    with pytest.raises(fetch_debs.FetchError, match=r"LANES_DEB_DIR=.* has no \.deb for libfake1 1\.0-1"):
        fetch_debs.fetch(entries, tmp_path / "repo", debs)


def test_failed_apt_download_says_to_run_apt_get_update(tmp_path: pathlib.Path, deb_dir, monkeypatch) -> None:
    _, entries = deb_dir
    monkeypatch.setattr(fetch_debs.shutil, "which", lambda tool: "/usr/bin/" + tool)

    def apt_without_lists(argv, **kwargs):
        assert argv[:2] == ["apt-get", "download"] and "libfake1=1.0-1" in argv
        return subprocess.CompletedProcess(argv, 100, "", "E: Can't find a source to download version '1.0-1' of 'libfake1:amd64'")

    with pytest.raises(fetch_debs.FetchError, match=r"Run `apt-get update`") as err:
        fetch_debs.fetch(entries, tmp_path / "repo", None, run=apt_without_lists)
    assert "libfake1" in str(err.value)


def test_apt_download_result_is_still_verified(tmp_path: pathlib.Path, deb_dir, monkeypatch) -> None:
    debs, entries = deb_dir
    monkeypatch.setattr(fetch_debs.shutil, "which", lambda tool: "/usr/bin/" + tool)
    tampered = fetch_debs.LockEntry(entries[0].package, entries[0].version, "amd64", "f" * 64)

    def fake_apt(argv, cwd, **kwargs):
        for deb in debs.iterdir():
            shutil.copy(deb, cwd)
        return subprocess.CompletedProcess(argv, 0, "", "")

    with pytest.raises(fetch_debs.DigestMismatch, match="libfake1"):
        fetch_debs.fetch([tampered, entries[1]], tmp_path / "repo", None, run=fake_apt)


def test_no_apt_get_and_no_deb_dir_is_a_clear_error(tmp_path: pathlib.Path, deb_dir, monkeypatch) -> None:
    _, entries = deb_dir
    monkeypatch.setattr(fetch_debs.shutil, "which", lambda tool: None)
    with pytest.raises(fetch_debs.FetchError, match="no apt-get on this host: set LANES_DEB_DIR"):
        fetch_debs.fetch(entries, tmp_path / "repo", None)


@pytest.mark.skipif(not (shutil.which("ar") and shutil.which("tar")), reason="needs ar and tar")
def test_unpack_without_dpkg_uses_ar_and_tar(tmp_path: pathlib.Path, deb_dir) -> None:
    debs, _ = deb_dir
    no_dpkg = lambda tool: None if tool == "dpkg-deb" else shutil.which(tool)  # noqa: E731
    fetch_debs.unpack(debs / "libfake1_1.0-1_amd64.deb", tmp_path / "out", which=no_dpkg)
    assert (tmp_path / "out/usr/lib/x86_64-linux-gnu/libfake.so.1").exists()


def test_unpack_without_any_tool_says_what_to_install(tmp_path: pathlib.Path, deb_dir) -> None:
    debs, _ = deb_dir
    with pytest.raises(fetch_debs.UnpackError, match="neither dpkg-deb nor ar \\+ tar"):
        fetch_debs.unpack(debs / "libfake1_1.0-1_amd64.deb", tmp_path / "out", which=lambda tool: None)


def test_not_a_deb_is_refused(tmp_path: pathlib.Path) -> None:
    junk = tmp_path / "junk_1.0_amd64.deb"
    junk.write_bytes(b"not an archive")
    with pytest.raises(fetch_debs.UnpackError):
        fetch_debs.unpack(junk, tmp_path / "out")


def test_icd_manifest_is_relocated_relative_to_itself(tmp_path: pathlib.Path) -> None:
    lib = tmp_path / "usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    shipped = tmp_path / "usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
    shipped.parent.mkdir(parents=True)
    shipped.write_text(json.dumps({"file_format_version": "1.0.0",
                                   "ICD": {"library_path": "/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so", "api_version": "1.1.230"}}))
    assert fetch_debs.relocate_icd(tmp_path, "usr/share/vulkan/icd.d/lvp_icd.x86_64.json", "lvp_icd.x86_64.json") \
        == "usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
    relocated = json.loads((tmp_path / "lvp_icd.x86_64.json").read_text())
    assert (tmp_path / relocated["ICD"]["library_path"]).resolve() == lib.resolve()
    assert relocated["ICD"]["api_version"] == "1.1.230"
    lib.unlink()
    with pytest.raises(fetch_debs.UnpackError, match="no pinned package provides"):
        fetch_debs.relocate_icd(tmp_path, "usr/share/vulkan/icd.d/lvp_icd.x86_64.json", "lvp_icd.x86_64.json")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
