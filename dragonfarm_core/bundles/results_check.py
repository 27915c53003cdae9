"""A results zip is untrusted input: check every member before one byte of it is extracted.

    with open_results(path) as archive:
        extract(archive, checked_members(archive), temp_folder)   # ResultsRefused says why

Refused, each with its reason: a file that is not a zip or is truncated; a member whose name
could land outside the folder (`..`, absolute, a drive letter, backslashes, control
characters), a symlink or any other non-regular file (hard links, devices), a duplicate name (also
differing only in case, as on Windows and macOS), a name outside the expected set (pickled
weights named as such), an encrypted member, a compression other than stored or deflate, a
member or a total over the size caps or compressed more than MAX_RATIO times (zip bombs).
Extraction streams each member and stops at its declared size, so a lying header cannot
write more than the caps allow. What the files hold is checked afterwards (`results_import`).
"""

from __future__ import annotations

import re
import stat
import zipfile
import zlib
from pathlib import Path

MANIFEST = "bundle.json"
ADAPTER_FILES = ("adapter/adapter_config.json", "adapter/adapter_model.safetensors",
                 "adapter/README.md")  # fmt: skip
# The run files a remote run brings back (relative to the run), and the bundle's manifest.
RESULT_FILES = frozenset({"status.json", "progress.jsonl", "train.log", "eval.json",
                          "samples.json", "metrics.json", *ADAPTER_FILES})  # fmt: skip
ALLOWED = RESULT_FILES | {MANIFEST}
ALLOWED_DIRS = frozenset({"adapter/"})
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".npy", ".joblib")
WEIGHTS = "adapter/adapter_model.safetensors"

MAX_MEMBERS = 32
MAX_WEIGHTS_BYTES = 4 * 1024**3  # a rank-64 adapter of a 7B model is well under 1 GiB
MAX_FILE_BYTES = 256 * 1024**2  # logs, progress, samples
MAX_TOTAL_BYTES = 5 * 1024**3
MAX_RATIO = 200  # real logs compress ~10-50x; a bomb of zeros ~1000x
RATIO_FROM_BYTES = 1024**2  # tiny files may compress well without being bombs
_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1024 * 1024


class ResultsRefused(ValueError):
    """The results zip was refused; nothing of it was written to the run."""


def open_results(path: Path) -> zipfile.ZipFile:
    """The zip, opened; a file that is not one, or is cut short, is refused."""
    if not path.is_file():
        raise ResultsRefused(f"{path} is not a file; pass the dragonfarm-results-<run id>.zip "
                             "the notebook downloaded.")  # fmt: skip
    if not zipfile.is_zipfile(path):
        raise ResultsRefused(f"{path.name} is not a zip file (or it is cut short: download it "
                             "again from the notebook).")  # fmt: skip
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise ResultsRefused(f"{path.name} is a damaged or truncated zip ({e}); download it "
                             "again.") from e  # fmt: skip


def name_problem(name: str) -> str | None:
    """Why a member name is unsafe to extract (zip slip and friends), or None."""
    if "\\" in name:
        return "it has a backslash (a Windows path separator)"
    if name.startswith("/") or _DRIVE.match(name):
        return "it is an absolute path"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it has control characters"
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "it has an empty, '.' or '..' part"
    return None


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.orig_filename  # zipfile cuts a name at a NUL byte: judge what was stored
    problem = name_problem(name)
    if problem:
        return problem
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "it is not a regular file (a hard link, device or pipe)"
    if info.flag_bits & 0x41:  # traditional or strong encryption
        return "it is encrypted"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return f"it uses compression method {info.compress_type} (only stored and deflate)"
    if info.is_dir():
        return None if name in ALLOWED_DIRS else "it is an unexpected folder"
    if name.lower().endswith(PICKLE_SUFFIXES):
        return "it is pickled weights, which can run code when loaded: only safetensors"
    if name not in ALLOWED:
        return "it is not one of the files a run's results hold"
    return _size_problem(info)


def _size_problem(info: zipfile.ZipInfo) -> str | None:
    cap = MAX_WEIGHTS_BYTES if info.filename == WEIGHTS else MAX_FILE_BYTES
    if info.file_size > cap:
        return f"it unpacks to {info.file_size} bytes, over the cap of {cap}"
    if info.file_size > RATIO_FROM_BYTES and info.file_size > MAX_RATIO * max(
        info.compress_size, 1
    ):
        return (
            f"it is compressed {info.file_size // max(info.compress_size, 1)} times (a zip bomb?)"
        )
    return None


def checked_members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """Every member, each found safe and expected; ResultsRefused names the first that is not."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ResultsRefused(f"The results zip has {len(infos)} members; a run's results have "
                             f"at most {len(ALLOWED)}.")  # fmt: skip
    seen: set[str] = set()
    for info in infos:
        problem = _member_problem(info)
        if problem:
            raise ResultsRefused(f"The results zip's member {info.orig_filename!r:.120} is "
                                 f"refused: {problem}.")  # fmt: skip
        key = info.filename.rstrip("/").lower()
        if key in seen:
            raise ResultsRefused(f"The results zip holds {info.filename!r} twice; it was not "
                                 "made by the dragonfarm notebook.")  # fmt: skip
        seen.add(key)
    total = sum(i.file_size for i in infos)
    if total > MAX_TOTAL_BYTES:
        raise ResultsRefused(f"The results zip unpacks to {total} bytes, over the cap of "
                             f"{MAX_TOTAL_BYTES}.")  # fmt: skip
    if MANIFEST not in seen:
        raise ResultsRefused(f"The results zip has no {MANIFEST}; it was not made by the "
                             "dragonfarm notebook of a bundled run.")  # fmt: skip
    return infos


def extract(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], dest: Path) -> None:
    """Write the checked members under `dest`, each cut off at its declared size."""
    for info in infos:
        target = dest / info.filename
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        try:
            with archive.open(info) as source, target.open("xb") as out:
                while chunk := source.read(_CHUNK):
                    written += len(chunk)
                    if written > info.file_size:
                        raise ResultsRefused(f"{info.filename} unpacks to more than the "
                                             "size its header declares.")  # fmt: skip
                    out.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
            if isinstance(e, ResultsRefused):
                raise
            raise ResultsRefused(f"The results zip is damaged or truncated at {info.filename} "
                                 f"({e}); download it again.") from e  # fmt: skip
