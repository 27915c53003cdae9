"""Runs, the data they trained on, their parents, the pipelines that ran them and synthesized
sets, read into a `Graph` from the files that already exist.

    graph = Graph()
    add_runs(graph, runs_dir)         # every run (archived/ too), its dataset and its parent
    add_pipelines(graph, runs_dir)    # pipelines/<id>.json: the runs of each step
    add_synthesized(graph, runs_dir)  # synthetic/*.jsonl with its .synthesis.json record

config.json's `dataset.source` is the file a run trained on (a Hub id for a Hub dataset),
`continued_from` the run it started from. A parent that is no longer where the config says is
looked for under <runs_dir>/archived/ (archive_run moved it) and otherwise shown as deleted.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dragonfarm_core.lineage.graph import ARCHIVED, DELETED, PRESENT, REMOTE, Graph, Node
from dragonfarm_core.rundir import files, pipeline_record, store
from dragonfarm_core.synthesis import files as synthesis_files


def mtime(path: Path) -> str | None:
    """When a file or folder was last written, as the run files write times."""
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def real(path: str | os.PathLike[str]) -> Path:
    """One spelling per file, so two records naming it meet in one node."""
    return Path(path).expanduser().resolve()


def run_key(run_dir: Path) -> str:
    return f"run:{run_dir}"


def file_key(kind: str, path: Path) -> str:
    return f"{kind}:{path}"


def run_dirs(runs_dir: Path) -> list[tuple[Path, str]]:
    """(folder, state) of every run in the runs dir and in its archived/."""
    found = [(d, PRESENT) for d in store.run_dirs(runs_dir)]
    return found + [(d, ARCHIVED) for d in store.run_dirs(runs_dir / files.ARCHIVED_DIR)]


def _config(run_dir: Path) -> dict[str, Any]:
    try:
        return files.read_config(run_dir)
    except (OSError, ValueError):  # damaged: the run is shown, its links cannot be read
        return {}


def run_node(run_dir: Path, state: str) -> Node:
    config = _config(run_dir)
    status = files.read_status(run_dir)
    detail = ", ".join(str(v) for v in (config.get("method"), status.get("state")) if v)
    return Node(run_key(run_dir), "run", str(config.get("id") or run_dir.name), str(run_dir),
                config.get("created_at") or mtime(run_dir), state, detail)  # fmt: skip


def named_run(graph: Graph, recorded: str, runs_dir: Path) -> str:
    """The node of a run a record names by its folder: that run, the same run under archived/
    (it was archived since), or a deleted run."""
    path = real(recorded)
    if files.is_run_dir(path):
        state = ARCHIVED if path.parent.name == files.ARCHIVED_DIR else PRESENT
        return graph.add(run_node(path, state))
    moved = runs_dir / files.ARCHIVED_DIR / path.name
    if files.is_run_dir(moved):
        return graph.add(run_node(moved, ARCHIVED))
    key = run_key(path)
    if key not in graph.nodes:
        graph.add(Node(key, "run", path.name, str(path), None, DELETED, "its folder is gone"))
    return key


def dataset_node(graph: Graph, spec: dict[str, Any], run_dir: Path) -> str | None:
    """The node of the data a run's config names (`Dataset.spec()`), or None without one."""
    source = spec.get("source")
    if not isinstance(source, str) or not source:
        return None
    if spec.get("format") == "hub":
        return graph.add(Node(f"dataset:hub:{source}", "dataset", source, None, None, REMOTE,
                              "a Hub dataset"))  # fmt: skip
    path = real(source)
    kind = "dataset"
    if path.parent.name == files.FEEDBACK_DIR:
        kind = "feedback_export"
    elif synthesis_files.record_path(path).is_file():
        kind = "synthesized"
    key = file_key(kind, path)
    if key in graph.nodes:
        return key
    if path.is_relative_to(run_dir):  # rows given in memory, saved with the run
        return graph.add(Node(key, kind, f"{path.name} of {run_dir.name}", str(path),
                              mtime(path), PRESENT, "rows given in memory, saved in the run"))  # fmt: skip
    rows = spec.get("n_rows")
    detail = f"{rows} rows" if isinstance(rows, int) else ""
    state = PRESENT if path.is_file() else DELETED
    return graph.add(Node(key, kind, path.name, str(path), mtime(path), state, detail))


def add_runs(graph: Graph, runs_dir: Path) -> None:
    for run_dir, state in run_dirs(runs_dir):
        key = graph.add(run_node(run_dir, state))
        config = _config(run_dir)
        data = dataset_node(graph, config.get("dataset") or {}, run_dir)
        if data is not None:
            graph.link(data, key, "trained on")
        parent = config.get("continued_from")
        adapters = (config.get("model") or {}).get("adapters") or []
        if not parent and adapters:  # an older config: the last adapter is the parent's
            parent = str(Path(adapters[-1]).parent)
        if isinstance(parent, str) and parent:
            graph.link(named_run(graph, parent, runs_dir), key, "continued from")


def add_pipelines(graph: Graph, runs_dir: Path) -> None:
    root = runs_dir / files.PIPELINES_DIR
    for path in sorted(root.glob(f"*{pipeline_record.RECORD_SUFFIX}")) if root.is_dir() else []:
        record = files.read_record(path) or {}  # torn: left out
        if not isinstance(record.get("steps"), list):
            continue
        steps = record["steps"]
        key = graph.add(Node(file_key("pipeline", path), "pipeline", str(record.get("id") or path.stem),
                             str(path), record.get("created_at"), PRESENT,
                             f"{len(steps)} steps, {record.get('status')}"))  # fmt: skip
        for n, step in enumerate(steps, 1):
            if isinstance(step, dict) and isinstance(step.get("run_dir"), str):
                run = named_run(graph, step["run_dir"], runs_dir)
                graph.link(key, run, f"step {n} ({step.get('kind')})")


def _named_model(described: Any) -> str | None:
    """The run folder a teacher's or student's description names, if it is one."""
    model = described.get("model") if isinstance(described, dict) else None
    if isinstance(model, str) and model and files.is_run_dir(real(model)):
        return model
    return None


def add_synthesized(graph: Graph, runs_dir: Path) -> None:
    root = runs_dir / files.SYNTHETIC_DIR
    for record_file in (
        sorted(root.glob(f"*{synthesis_files.RECORD_SUFFIX}")) if root.is_dir() else []
    ):
        record = files.read_record(record_file) or {}  # torn: left out
        if not isinstance(record.get("file"), str):
            continue
        path = real(record["file"])
        state = PRESENT if path.is_file() else DELETED
        detail = f"{record.get('kept')} kept of {record.get('in')} prompts"
        key = graph.add(Node(file_key("synthesized", path), "synthesized", path.name, str(path),
                             record.get("created_at") or mtime(path), state, detail))  # fmt: skip
        for role in ("student", "teacher"):
            model = _named_model(record.get(role))
            if model is not None:
                graph.link(named_run(graph, model, runs_dir), key, f"{role} of")
