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

from tools.policy import dsse, safe_io
from tools.policy.errors import KeyFileError, KeyLocationError, TrustError

# A PEM Ed25519 key is about 120 bytes; anything much larger is not a key file.
MAX_KEY_FILE_BYTES = 64 << 10


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


def _make_private_dirs(directory: pathlib.Path) -> None:
    """Creates `directory` and each missing parent as 0700 (not as the umask says): a key directory
    others can enter or write is one where they can plant names."""
    missing = []
    for d in (directory, *directory.parents):
        if d.exists():
            break
        missing.append(d)
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
            os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
        except FileExistsError:
            continue
        except OSError as err:
            raise KeyFileError(f"{d}: cannot create key directory ({err.strerror})") from err
    if not directory.is_dir():
        raise KeyFileError(f"{directory} is not a directory")


def _create_new(path: pathlib.Path, data: bytes, mode: int) -> None:
    """Writes a new file: O_EXCL | O_NOFOLLOW, so an existing name, including a planted (even
    dangling) symlink, is refused instead of written through."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except FileExistsError as err:
        raise KeyFileError(f"{path} already exists (a file or a symlink); pick another --name or remove it "
                           "deliberately") from err
    except OSError as err:
        raise KeyFileError(f"{path}: cannot create ({err.strerror})") from err
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate(name: str, key_dir: pathlib.Path | str | None = None) -> KeyFiles:
    """Writes a fresh Ed25519 key pair as <key_dir>/<name>.{key,pub,pub.raw}; never overwrites,
    never writes through a symlink, creates missing directories 0700."""
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"key name {name!r} must be a plain file name such as 'lanes-ci'")
    directory = pathlib.Path(key_dir).expanduser() if key_dir else default_key_dir()
    repo = git_work_tree_containing(directory)
    if repo is not None:
        raise KeyLocationError(
            f"{directory} is inside the git work tree {repo}; a private key there could be committed. "
            f"Use a directory outside any repository (default {default_key_dir()}) via --key_dir"
        )
    _make_private_dirs(directory)
    files = KeyFiles(
        keyid="",
        private_key=directory / f"{name}.key",
        public_pem=directory / f"{name}.pub",
        public_raw=directory / f"{name}.pub.raw",
    )
    for p in (files.private_key, files.public_pem, files.public_raw):
        if os.path.lexists(p):
            raise KeyFileError(f"{p} already exists; pick another --name or remove the old key deliberately")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # O_EXCL + 0600 at creation: the key is never, even briefly, readable by others.
    _create_new(files.private_key, pem, 0o600)
    public = key.public_key()
    _create_new(files.public_pem,
                public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    _create_new(files.public_raw, dsse.raw_public_key(public), 0o644)
    return dataclasses.replace(files, keyid=dsse.keyid_for(public))


def load_private_key(path: pathlib.Path | str) -> Ed25519PrivateKey:
    path = pathlib.Path(path).expanduser()
    try:
        data, st = safe_io.read_regular_file_and_stat(path, limit=MAX_KEY_FILE_BYTES)
    except TrustError as err:
        raise KeyFileError(
            f"{path}: cannot read private key ({err}); generate one with certify_cli --mode=keygen"
        ) from err
    mode = st.st_mode
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
        data = safe_io.read_regular_file(path, limit=MAX_KEY_FILE_BYTES)
    except TrustError as err:
        raise KeyFileError(f"{path}: cannot read public key ({err})") from err
    return public_key_from_bytes(data, str(path))
