"""Random secrets of one installation kept under `var/secrets/`, for a checkout run without them.

`make run` sets neither MAAS_SECRET_KEY nor a router admin password: each is then made once,
at random, and kept in a file only its owner can read, so every process of the platform (web,
worker, beat, router) agrees on it and a restart keeps it. Nothing is derived from a constant.
Production sets them (MAAS_PRODUCTION refuses to start otherwise); see docs/security.md for what
to do when `var/` is lost.
"""
import os
import secrets
from pathlib import Path


def installation_secret(directory: Path, name: str, nbytes: int = 48) -> str:
    """The secret kept in `directory/name`, made at random on first use.

    Several processes start together: the first one to link its file in place wins, the others
    read what it wrote (a hard link never replaces an existing file)."""
    path = Path(directory) / name
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    tmp = _write_private(path, secrets.token_urlsafe(nbytes))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process was first: use its secret
    finally:
        tmp.unlink()
    return _read(path)


def replace_installation_secret(directory: Path, name: str, nbytes: int = 48) -> str:
    """A new random secret in `directory/name` (rotation); running processes keep the old one
    until they restart."""
    path = Path(directory) / name
    value = secrets.token_urlsafe(nbytes)
    os.replace(_write_private(path, value), path)
    return value


def _write_private(path: Path, value: str) -> Path:
    """`value` in a new file beside `path` that only the owner can read; returns its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(value + "\n")
    return tmp


def _read(path: Path) -> str:
    value = path.read_text(encoding="ascii").strip()
    if not value:  # files are complete before they are linked in place: someone emptied it
        raise RuntimeError(f"{path} is empty; delete it to have a new secret made")
    return value
