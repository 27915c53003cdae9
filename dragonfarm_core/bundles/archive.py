"""The bundle zip: everything a GPU machine needs to train a run, no path of this one needed.

    <run>/bundle/dragonfarm-<run id>.zip
        bundle.json             run id, bundle id, the config's hash (import_results checks them)
        requirements-cuda.txt   python_requirements(), pinned
        dragonfarm-<id>.ipynb   the notebook, filled for this run
        dragonfarm_core/...     the installed package's files as they are (the trainer and what
                                it imports), so the remote trainer cannot drift from this one
        run/                    the run directory: config.json, status.json, data/, rewards/
        model/                  the base model, when it is a folder here (not a Hub id)
        adapters/<n>/           the adapters of the runs this one continues from

The run's own config.json is not changed: the zip's copy points at model/ and adapters/ by
paths relative to run/ (the notebook trains with run/ as its working directory), or at the Hub
id. Its other fields stay as they are (the dataset's source path and continued_from are only
read here, by code(run) and runs()). The notebook is also written next to the zip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dragonfarm_core.bundles.notebook import notebook_text
from dragonfarm_core.bundles.remote import python_requirements
from dragonfarm_core.rundir import files

BUNDLE_DIR = "bundle"
MANIFEST = "bundle.json"
REQUIREMENTS = "requirements-cuda.txt"
RUN_FOLDER, MODEL_FOLDER, ADAPTERS_FOLDER = "run", "model", "adapters"
# Run files that travel: what the trainer reads. Not the log, progress or checkpoints of an
# earlier local attempt, nor this folder itself.
# status.json travels as a fresh "queued" (here the run is "bundled", which no trainer starts).
_RUN_ITEMS = (files.DATA_DIR, files.REWARDS_DIR)
# Programs a notebook machine (a Linux image with Python) has, for the command-reward check.
COMMON_PROGRAMS = frozenset({"python", "python3", "bash", "sh", "pytest", "grep", "test"})


def bundle_paths(run_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(zip, notebook) paths of a run's bundle."""
    run_id = files.read_config(run_dir).get("id") or Path(run_dir).name
    folder = Path(run_dir) / BUNDLE_DIR
    return folder / f"dragonfarm-{run_id}.zip", folder / f"dragonfarm-{run_id}.ipynb"


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The current bundle's bundle.json, or None when the run was never bundled."""
    path = Path(run_dir) / BUNDLE_DIR / MANIFEST
    return files.read_json(path) if path.is_file() else None


def config_hash(config: dict[str, Any]) -> str:
    """The run config's fingerprint: results trained with another config are refused."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _tree(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def _package_folder() -> Path:
    """The installed dragonfarm_core's folder (the files this process imports)."""
    return Path(__file__).resolve().parents[1]


def _remote_model(config: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """The zip's model block, and (folder here, folder in the zip) pairs to copy.

    A Hub model stays a Hub id (the GPU machine downloads it); a folder here travels as model/.
    """
    model = dict(config["model"])
    copies: list[tuple[Path, str]] = []
    base, name = Path(model["base"]), str(model.get("name") or "")
    if _is_hub_snapshot(base, name):
        model["base"] = name
    else:
        copies.append((base, MODEL_FOLDER))
        model["base"] = f"../{MODEL_FOLDER}"
    adapters = []
    for n, adapter in enumerate(model.get("adapters") or []):
        copies.append((Path(adapter), f"{ADAPTERS_FOLDER}/{n}"))
        adapters.append(f"../{ADAPTERS_FOLDER}/{n}")
    model["adapters"] = adapters
    return model, copies


def _is_hub_snapshot(base: Path, name: str) -> bool:
    """Whether `base` is huggingface_hub's cached download of the Hub model `name`."""
    from huggingface_hub.constants import HF_HUB_CACHE

    cache = Path(HF_HUB_CACHE).resolve()
    return "/" in name and not Path(name).exists() and base.resolve().is_relative_to(cache)


def command_warnings(config: dict[str, Any]) -> list[str]:
    """A `command` reward whose program (or a file it names) exists only on this machine."""
    out = []
    for reward in (config.get("method_args") or {}).get("rewards") or []:
        argv = reward.get("command") or []
        if reward.get("type") != "command" or not argv:
            continue
        name, program = reward.get("name") or "command", str(argv[0])
        if "/" in program or "\\" in program:
            out.append(f"Reward {name!r} runs {program}, a path on this machine: the GPU "
                       "machine will not have it. Use a program it has, or a custom reward "
                       "(its file travels in the bundle).")  # fmt: skip
        elif program not in COMMON_PROGRAMS:
            out.append(f"Reward {name!r} runs {program!r}, which a notebook machine may not "
                       "have; install it there in a cell before training.")  # fmt: skip
        local = [a for a in argv[1:] if ("/" in a or "." in a) and Path(a).exists()]
        if local:
            out.append(f"Reward {name!r} names {shlex.join(local)}, file(s) on this machine "
                       "that the GPU machine will not have.")  # fmt: skip
    return out


def _write_zip(target: Path, run_dir: Path, entries: dict[str, bytes],
               copies: list[tuple[Path, str]]) -> None:  # fmt: skip
    package = _package_folder()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        for path in _tree(package):
            z.write(path, f"{package.name}/{path.relative_to(package).as_posix()}")
        for item in _RUN_ITEMS:
            path = run_dir / item
            for file in [path] if path.is_file() else _tree(path) if path.is_dir() else []:
                z.write(file, f"{RUN_FOLDER}/{file.relative_to(run_dir).as_posix()}")
        for folder, inside in copies:
            for file in _tree(folder):
                z.write(file, f"{inside}/{file.relative_to(folder).as_posix()}")


def write_bundle(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Write <run>/bundle/ (the zip, the notebook, bundle.json) for a run; returns the
    manifest. A new bundle gets a new bundle id, so results of an older one are refused."""
    run_dir = Path(run_dir)
    config = files.read_config(run_dir)
    model, copies = _remote_model(config)
    remote_config = {**config, "model": model}
    manifest = {"run_id": config["id"], "bundle_id": uuid.uuid4().hex,
                "config_sha256": config_hash(config), "created_at": files.now_iso(),
                "warnings": command_warnings(config)}  # fmt: skip
    zip_path, notebook_path = bundle_paths(run_dir)
    notebook = notebook_text(config["id"], zip_path.name)
    requirements = "".join(f"{line}\n" for line in python_requirements()["packages"])
    queued = {"state": "queued", "queued_at": files.now_iso()}
    folder = run_dir / BUNDLE_DIR
    tmp = run_dir / f".tmp-{BUNDLE_DIR}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _write_zip(tmp / zip_path.name, run_dir, {
            MANIFEST: json.dumps(manifest, indent=2).encode(),
            REQUIREMENTS: requirements.encode(),
            notebook_path.name: notebook.encode(),
            f"{RUN_FOLDER}/{files.CONFIG}": json.dumps(remote_config, indent=2).encode(),
            f"{RUN_FOLDER}/{files.STATUS}": json.dumps(queued).encode(),
        }, copies)  # fmt: skip
        (tmp / notebook_path.name).write_text(notebook, encoding="utf-8")
        files.write_json(tmp / MANIFEST, manifest)
        # Replaced as a whole: an import never sees the manifest of one bundle with another's zip.
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest
