"""`import_results()`: bring a run trained elsewhere back into its run directory, safely.

    dragon.import_results(run, "~/Downloads/dragonfarm-results-<run id>.zip")
    dragon.generate(run, "My thermostat keeps dropping off Wi-Fi.")

The zip is untrusted. It is opened and every member checked (`results_check`), extracted into
a temporary folder inside <run>/bundle/, and what the files hold is checked there: the
manifest names this run, its current bundle and its config; status.json is a finished state;
the JSON files parse; an adapter's shapes fit the base model (`adapter_check`). Only then are
the files moved into the run, each with one rename, status.json last: until that rename the
run is still "bundled", and after a refusal it is byte for byte what it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dragonfarm_core.bundles.adapter_check import AdapterError, adapter_problem
from dragonfarm_core.bundles.archive import BUNDLE_DIR, config_hash, read_manifest
from dragonfarm_core.bundles.results_check import (
    ADAPTER_FILES,
    MANIFEST,
    ResultsRefused,
    checked_members,
    extract,
    open_results,
)
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.rundir.status_schema import parse_status

# Fields of the remote status that describe the remote process, meaningless here (a pid of
# another machine would be taken for a local process).
_REMOTE_ONLY = ("pid", "pid_create_time", "heartbeat", "queue", "queued_ts")
_JSON_FILES = (files.EVAL, files.SAMPLES, files.METRICS)


def _check_manifest(run: Run, folder: Path) -> dict[str, Any]:
    try:
        given = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsRefused(f"The results zip's {MANIFEST} is not JSON ({e}).") from e
    if not isinstance(given, dict):
        raise ResultsRefused(f"The results zip's {MANIFEST} is not a JSON object.")
    current = read_manifest(run.dir) or {}
    if given.get("run_id") != run.id:
        raise ResultsRefused(f"These are the results of run {given.get('run_id')!r:.80}, not "
                             f"of run {run.id}; import them into that run.")  # fmt: skip
    if given.get("config_sha256") != config_hash(run.config):
        raise ResultsRefused(f"These results were trained with a different config than run "
                             f"{run.id}'s; they cannot be imported into it.")  # fmt: skip
    if given.get("bundle_id") != current.get("bundle_id"):
        raise ResultsRefused(f"These results come from an older bundle of run {run.id} (it was "
                             "bundled again since); train with the current bundle "
                             f"{run.id}'s bundle/ folder holds.")  # fmt: skip
    return given


def _check_status(folder: Path) -> dict[str, Any]:
    path = folder / files.STATUS
    if not path.is_file():
        raise ResultsRefused("The results zip has no status.json: the run did not start there.")
    status, problem = parse_status(path.read_bytes())
    if problem:
        raise ResultsRefused(f"The results zip's status.json is refused: {problem}.")
    if status["state"] not in files.TERMINAL_STATES:
        raise ResultsRefused(f"The remote run is {status['state']}, not finished; run the "
                             "notebook to its end, then download the results again.")  # fmt: skip
    return status


def _check_json(folder: Path) -> None:
    for name in _JSON_FILES:
        path = folder / name
        try:
            if path.is_file():
                json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ResultsRefused(f"The results zip's {name} is not JSON ({e}).") from e
    path = folder / files.PROGRESS
    try:
        rows = files.read_jsonl(path) if path.is_file() else []
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsRefused(f"The results zip's {files.PROGRESS} is not JSON lines ({e}).") from e
    if not all(isinstance(row, dict) for row in rows):
        raise ResultsRefused(f"The results zip's {files.PROGRESS} holds a line that is not an "
                             "object.")  # fmt: skip


def _check_adapter(run: Run, folder: Path, state: str) -> None:
    present = [name for name in ADAPTER_FILES[:2] if (folder / name).is_file()]
    if state != "succeeded" and not present:
        return
    if len(present) < 2:
        raise ResultsRefused(f"The results zip's adapter is incomplete: it needs "
                             f"{' and '.join(ADAPTER_FILES[:2])}.")  # fmt: skip
    base = Path(run.config["model"]["base"]) / "config.json"
    try:
        base_config = json.loads(base.read_text(encoding="utf-8"))
        problem = adapter_problem(folder / "adapter", base_config, run.config["lora"]["r"])
    except FileNotFoundError as e:
        raise ResultsRefused(f"The base model's config ({base}) is missing here, so the adapter "
                             "cannot be checked against it.") from e  # fmt: skip
    except (AdapterError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsRefused(f"The results zip's adapter is refused: {e}") from e
    if problem:
        raise ResultsRefused(f"The results zip's adapter does not fit {run.config['model']['name']}"
                             f": {problem}.")  # fmt: skip


def _move_in(run_dir: Path, folder: Path, status: dict[str, Any], trained_on: str) -> None:
    """Each file in with one rename; status.json last, so the run turns finished at once."""
    adapter = folder / files.ADAPTER_DIR
    if adapter.is_dir():
        old = run_dir / f".old-{files.ADAPTER_DIR}"
        shutil.rmtree(old, ignore_errors=True)
        if files.adapter_dir(run_dir).exists():
            os.replace(files.adapter_dir(run_dir), old)
        os.replace(adapter, files.adapter_dir(run_dir))
        shutil.rmtree(old, ignore_errors=True)
    for name in (files.PROGRESS, files.LOG, *_JSON_FILES):
        if (folder / name).is_file():
            os.replace(folder / name, run_dir / name)
    kept = {k: v for k, v in status.items() if k not in _REMOTE_ONLY}
    files.write_status(run_dir, {**kept, "trained_on": trained_on,
                                 "imported_at": files.now_iso()})  # fmt: skip


def import_results(run: Run | str | os.PathLike[str], results_zip: str | os.PathLike[str]) -> Run:
    """Copy a remote run's adapter, status, progress, log, eval and samples into `run`.

    The run must be bundled (dragon.bundle or dragon.remote), and the zip the one its
    notebook made (dragonfarm-results-<run id>.zip). Afterwards status, progress, evaluate,
    generate, chat, merge and export work as on a local run. Anything unexpected in the zip
    refuses it (ResultsRefused, with the reason), and the run is left exactly as it was.
    """
    run = open_run(run)
    state = run.status().get("state")
    if state != "bundled" or read_manifest(run.dir) is None:
        raise ResultsRefused(f"Run {run.id} is {state}, not bundled to train elsewhere: there "
                             "is nothing to import into it.")  # fmt: skip
    path = Path(results_zip).expanduser()
    with open_results(path) as archive:
        infos = checked_members(archive)
        folder = Path(tempfile.mkdtemp(prefix=".import-", dir=run.dir / BUNDLE_DIR))
        try:
            extract(archive, infos, folder)
            manifest = _check_manifest(run, folder)
            status = _check_status(folder)
            _check_json(folder)
            _check_adapter(run, folder, status["state"])
            where = status.get("device") or "another machine"
            files.write_json(run.dir / BUNDLE_DIR / "imported.json",
                             {**manifest, "results": path.name, "at": files.now_iso()})  # fmt: skip
            _move_in(run.dir, folder, status, f"remote ({where})")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return run
