"""The lock file is fully hash-pinned and the installer rejects anything else."""

import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes", "third_party", "python")))
import install_locked  # noqa: E402  (a repository-rule script, not a package)

LOCK = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes", "third_party", "python", "requirements_lock.txt")


def test_every_locked_package_is_pinned_with_a_hash():
    entries = install_locked.parse_lock(LOCK)
    names = {install_locked.canonical(n) for n, _, _ in entries}
    assert {"protobuf", "absl_py", "grpcio_tools", "pytest", "cryptography", "numpy", "gguf"} <= names
    assert len(names) == len(entries), "a package is locked twice"


@pytest.mark.parametrize("line", ["protobuf>=7", "protobuf==7.36.2", "protobuf==7.36.2 --hash=sha256:abc"])
def test_unpinned_or_unhashed_lines_are_rejected(tmp_path, line):
    lock = tmp_path / "lock.txt"
    lock.write_text(line + "\n")
    with pytest.raises(SystemExit, match="lock.txt:1"):
        install_locked.parse_lock(lock)


def test_requires_keeps_runtime_deps_only(tmp_path):
    dist = tmp_path / "x-1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Name: x\nRequires-Dist: numpy>=1.17\nRequires-Dist: PyYAML (>=5)\n"
        "Requires-Dist: pytest ; extra == 'test'\nRequires-Dist: typing_extensions; python_version<'3.13'\n")
    assert install_locked.requires(dist) == ["numpy", "pyyaml", "typing_extensions"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
