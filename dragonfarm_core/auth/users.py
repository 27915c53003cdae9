"""The lab profile's users file: who may log in to a shared workstation's app, and who is admin.

    dragonfarm users add NAME [--admin]     # prompts for the password twice
    dragonfarm users list | remove NAME

`<lab root>/users.json` holds, per user, a salted scrypt hash of the password (never the
password), whether they are an admin and when they were added. scrypt's cost (n=2**17, r=8,
p=1, OWASP's figure: 128 MiB and some hundreds of milliseconds per check) makes guessing from a
stolen file slow; each hash records its parameters, so older, cheaper hashes (n=2**14 before
December 2026) still check, and a right password checked against one is hashed again at the
current cost (`verify` upgrades it). The file
is written atomically (a reader sees the old file or the new one), mode 0600, under a lock so
two `users add` at once lose neither user. Pure standard library.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import hmac
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir.atomic import read_json, write_json

USERS_FILE = "users.json"
FORMAT_VERSION = 1
# scrypt's cost: n (CPU/memory), r (block size), p (parallelism); 128*n*r bytes = 128 MiB.
SCRYPT_COST = {"n": 2**17, "r": 8, "p": 1}
SALT_BYTES = 16
HASH_BYTES = 32
MIN_PASSWORD = 8
# A user name is a folder name (<lab root>/users/<name>/) and appears in the queue: letters,
# digits, - _ and ., 1-32 characters, not starting with a dot (no ".", "..", hidden folders).
NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,31}")


def check_name(name: str) -> str:
    """`name` if it is a valid user name, else a ValueError saying what a name may be."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"{str(name)[:40]!r} is not a user name: use 1-32 letters, digits, '-', '_' or "
            "'.', not starting with '.'."
        )
    return name


def hash_password(password: str, salt: bytes | None = None) -> dict[str, Any]:
    """A salted scrypt hash of `password`, with the parameters that check it."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = _scrypt(password, salt, SCRYPT_COST)
    return {"kdf": "scrypt", **SCRYPT_COST, "salt": salt.hex(), "hash": digest.hex()}


def _scrypt(password: str, salt: bytes, cost: dict[str, Any]) -> bytes:
    n, r, p = int(cost["n"]), int(cost["r"]), int(cost["p"])
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r, dklen=HASH_BYTES
    )


def password_matches(password: str, record: dict[str, Any]) -> bool:
    """Whether `password` hashes to the record's hash (a constant-time comparison)."""
    if record.get("kdf") != "scrypt":
        return False
    digest = _scrypt(password, bytes.fromhex(record["salt"]), record)
    return hmac.compare_digest(digest, bytes.fromhex(record["hash"]))


def outdated(record: dict[str, Any]) -> bool:
    """Whether a record's hash was made at another cost than today's (to hash again)."""
    return any(int(record.get(k, 0)) != v for k, v in SCRYPT_COST.items())


@functools.cache
def decoy() -> dict[str, Any]:
    """A record checked when the name is unknown, so an unknown name takes as long as a wrong
    password (the time would otherwise say which names exist). Made once, when the login
    starts (`login_guard.launch_options`), not at import: it costs as much as a login."""
    return hash_password(secrets.token_urlsafe(16))


def _read(path: Path) -> dict[str, dict[str, Any]]:
    data = read_json(path, default=None)
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("users"), dict):
        raise ValueError(
            f"{path} is not a dragonfarm users file (no 'users' table); fix or remove it."
        )
    return data["users"]


def _write(path: Path, table: dict[str, dict[str, Any]]) -> None:
    # write_json's temp file comes from mkstemp (mode 0600), and os.replace keeps its mode.
    write_json(path, {"version": FORMAT_VERSION, "users": table})
    os.chmod(path, 0o600)


@contextmanager
def _locked(path: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The users table, read and then written back under an exclusive lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            table = _read(path)
            yield table
            _write(path, table)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def add_user(
    path: str | os.PathLike[str], name: str, password: str, admin: bool = False,
    replace: bool = False,
) -> None:  # fmt: skip
    """Add `name` with `password` (hashed); `replace` changes an existing user's password."""
    check_name(name)
    if len(password) < MIN_PASSWORD:
        raise ValueError(f"The password is too short: use at least {MIN_PASSWORD} characters.")
    with _locked(Path(path)) as table:
        same = [n for n in table if n.lower() == name.lower()]
        if same and not replace:
            raise ValueError(
                f"There is already a user {same[0]!r} in {path}; remove them first, or "
                "give --replace to set a new password."
            )
        for old in same:
            del table[old]
        table[name] = {**hash_password(password), "admin": admin, "added": int(time.time())}


def remove_user(path: str | os.PathLike[str], name: str) -> None:
    """Remove `name` (their runs stay in their folder)."""
    with _locked(Path(path)) as table:
        if name not in table:
            raise LookupError(f"No user {name!r} in {path}; `dragonfarm users list` names them.")
        del table[name]


def list_users(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Each user's name, admin flag and when they were added (no hashes), by name."""
    table = _read(Path(path))
    return [
        {"name": n, "admin": bool(r.get("admin")), "added": r.get("added")}
        for n, r in sorted(table.items())
    ]


def verify(path: str | os.PathLike[str], name: str, password: str) -> bool:
    """Whether `name` is a user and `password` is theirs. An unknown name costs the same. A
    right password whose hash is at an older cost is hashed again at today's."""
    record = _read(Path(path)).get(name) if NAME_RE.fullmatch(name or "") else None
    matches = password_matches(password, record or decoy())
    if record is not None and matches and outdated(record):
        _upgrade(Path(path), name, password, record)
    return record is not None and matches


def _upgrade(path: Path, name: str, password: str, checked: dict[str, Any]) -> None:
    """Replace `name`'s hash with one at today's cost, unless the record changed meanwhile
    (a new password or a removal since it was checked)."""
    fresh = hash_password(password)  # outside the lock: it takes a while
    with _locked(path) as table:
        if table.get(name, {}).get("hash") == checked.get("hash"):
            table[name] = {**table[name], **fresh}


def is_admin(path: str | os.PathLike[str], name: str) -> bool:
    return bool(_cached(Path(path)).get(name))


def exists(path: str | os.PathLike[str], name: str) -> bool:
    """Whether `name` is in the users file now (a removed user's open sessions end)."""
    return name in _cached(Path(path))


# Per file: (inode, mtime_ns, size) -> {name: admin}. The app asks on every request; the file
# is read again only when it changed (each write replaces it: a new inode).
_seen: dict[Path, tuple[tuple[int, int, int], dict[str, bool]]] = {}


def _cached(path: Path) -> dict[str, bool]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    if path not in _seen or _seen[path][0] != key:
        _seen[path] = (key, {n: bool(r.get("admin")) for n, r in _read(path).items()})
    return _seen[path][1]
