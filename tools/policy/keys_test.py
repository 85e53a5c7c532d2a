"""Keys are written 0600 outside git work trees and load back; in-repo writes are refused."""

import stat

import pytest

from tools.policy import dsse, keys
from tools.policy.errors import KeyFileError, KeyLocationError


def test_generate_and_load(tmp_path):
    files = keys.generate("ci", tmp_path / "keys")
    assert stat.S_IMODE(files.private_key.stat().st_mode) == 0o600
    private = keys.load_private_key(files.private_key)
    assert dsse.keyid_for(private) == files.keyid
    assert dsse.keyid_for(keys.load_public_key(files.public_pem)) == files.keyid
    assert dsse.keyid_for(keys.load_public_key(files.public_raw)) == files.keyid
    assert len(files.public_raw.read_bytes()) == 32


def test_refuses_inside_git_work_tree(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    with pytest.raises(KeyLocationError, match="git work tree"):
        keys.generate("ci", tmp_path / "repo" / "secrets")
    assert not (tmp_path / "repo" / "secrets").exists()


def test_refuses_git_worktree_file_marker(tmp_path):
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text("gitdir: /elsewhere\n")
    with pytest.raises(KeyLocationError):
        keys.generate("ci", tmp_path / "wt")


def test_never_overwrites(tmp_path):
    keys.generate("ci", tmp_path)
    with pytest.raises(KeyFileError, match="already exists"):
        keys.generate("ci", tmp_path)


def test_widely_readable_private_key_refused(tmp_path):
    files = keys.generate("ci", tmp_path)
    files.private_key.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        keys.load_private_key(files.private_key)


def test_default_dir_honours_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert keys.default_key_dir() == tmp_path / "lanes" / "keys"


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
