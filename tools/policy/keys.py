"""Ed25519 signing keys: generate them outside any git work tree, load them back.

A private key inside a repository is one `git add -A` away from being published, so writing one
there is refused. Files: <name>.key (PKCS#8 PEM, 0600), <name>.pub (PEM), <name>.pub.raw (32 bytes).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tools.policy import dsse
from tools.policy.errors import KeyFileError, KeyLocationError


@dataclasses.dataclass(frozen=True)
class KeyFiles:
    keyid: str
    private_key: pathlib.Path
    public_pem: pathlib.Path
    public_raw: pathlib.Path


def default_key_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return pathlib.Path(base) / "lanes" / "keys"


def git_work_tree_containing(path: pathlib.Path) -> pathlib.Path | None:
    """The nearest directory at or above `path` that holds a .git (dir or file), if any."""
    p = path.resolve()
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


def generate(name: str, key_dir: pathlib.Path | str | None = None) -> KeyFiles:
    """Writes a fresh Ed25519 key pair as <key_dir>/<name>.{key,pub,pub.raw}; never overwrites."""
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"key name {name!r} must be a plain file name such as 'lanes-ci'")
    directory = pathlib.Path(key_dir).expanduser() if key_dir else default_key_dir()
    repo = git_work_tree_containing(directory)
    if repo is not None:
        raise KeyLocationError(
            f"{directory} is inside the git work tree {repo}; a private key there could be committed. "
            f"Use a directory outside any repository (default {default_key_dir()}) via --key_dir"
        )
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    files = KeyFiles(
        keyid="",
        private_key=directory / f"{name}.key",
        public_pem=directory / f"{name}.pub",
        public_raw=directory / f"{name}.pub.raw",
    )
    for p in (files.private_key, files.public_pem, files.public_raw):
        if p.exists():
            raise KeyFileError(f"{p} already exists; pick another --name or remove the old key deliberately")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # O_EXCL + 0600 at creation: the key is never, even briefly, readable by others.
    fd = os.open(files.private_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = key.public_key()
    files.public_pem.write_bytes(
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    files.public_raw.write_bytes(dsse.raw_public_key(public))
    return dataclasses.replace(files, keyid=dsse.keyid_for(public))


def load_private_key(path: pathlib.Path | str) -> Ed25519PrivateKey:
    path = pathlib.Path(path).expanduser()
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as err:
        raise KeyFileError(
            f"{path}: cannot read private key ({err.strerror}); generate one with certify_cli --mode=keygen"
        ) from err
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"{path} is readable by group/others (mode {oct(mode & 0o777)}); run chmod 600 {path}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise KeyFileError(f"{path}: not an unencrypted PEM private key ({err})") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: a {type(key).__name__}, but records are signed with Ed25519 keys")
    return key


def public_key_from_bytes(data: bytes, source: str = "public key") -> Ed25519PublicKey:
    """Raw 32 bytes or PEM SubjectPublicKeyInfo."""
    if len(data) == 32:
        return Ed25519PublicKey.from_public_bytes(data)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as err:
        raise KeyFileError(f"{source}: neither 32 raw bytes nor a PEM public key ({err})") from err
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{source}: a {type(key).__name__}, but Lanes trusts only Ed25519 keys")
    return key


def load_public_key(path: pathlib.Path | str) -> Ed25519PublicKey:
    path = pathlib.Path(path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as err:
        raise KeyFileError(f"{path}: cannot read public key ({err.strerror})") from err
    return public_key_from_bytes(data, str(path))
