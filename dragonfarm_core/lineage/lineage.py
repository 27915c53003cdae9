"""`lineage(x)`: what a run, a data file, a pipeline or an export came from, and what came from it.

    lin = dragon.lineage(run)                  # a Run, its id or its folder
    lin = dragon.lineage("feedback/pairs-20261207-101500-abc123.jsonl", runs_dir="runs")
    lin.nodes, lin.edges, lin.focus            # kind, id, path, time, state / source, target, link
    lin.parents(lin.focus); lin.to_dict()

Everything is read from the files that already exist in the runs dir (config.json, the
feedback events and exports, pipeline records, synthesis records, what the exports wrote), on
each call: nothing new is written, so nothing can fall out of step. The graph of the whole runs
dir is read, then cut around `x`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.data.readers import EXTENSIONS
from dragonfarm_core.lineage.exports import add_exports
from dragonfarm_core.lineage.feedback import add_feedback
from dragonfarm_core.lineage.graph import PRESENT, Graph, Lineage, Node
from dragonfarm_core.lineage.runs import (
    add_pipelines,
    add_runs,
    add_synthesized,
    file_key,
    mtime,
    real,
    run_key,
)
from dragonfarm_core.rundir import files, location, pipeline_record, refs, store
from dragonfarm_core.rundir.run import Run

ACCEPTS = (
    "lineage() takes a run (a Run, its id or its folder), a dataset file, a feedback export "
    "(feedback/sft-*.jsonl or pairs-*.jsonl), a synthesized set (synthetic/*.jsonl), a pipeline "
    "(its handle, id or record), or an export (a merged folder, a .gguf file, a published "
    "repo id, or the name a run was registered as with Ollama)"
)


def read_graph(runs_dir: Path) -> Graph:
    """Every node and link the files of `runs_dir` hold."""
    graph = Graph()
    # The records of data files first: a node keeps what was read first, and a synthesis
    # record or an export file says more than a run's config naming the file.
    add_synthesized(graph, runs_dir)
    add_feedback(graph, runs_dir)
    add_runs(graph, runs_dir)
    add_pipelines(graph, runs_dir)
    add_exports(graph, runs_dir)
    return graph


# Folders of a runs dir whose files lineage reads: a path inside one names its runs dir.
RUNS_DIR_FOLDERS = (files.FEEDBACK_DIR, files.SYNTHETIC_DIR, files.PIPELINES_DIR)


def runs_dir_of(ref: Any) -> Path | None:
    """The runs dir a path lies in (a run folder or a file under one, feedback/, synthetic/,
    pipelines/), or None."""
    if isinstance(ref, str | os.PathLike) and len(Path(ref).parts) > 1:
        path = real(ref)
        for folder in [path, *path.parents][:4]:
            if files.is_run_dir(folder):
                return store.run_home(folder)
            if folder.name in RUNS_DIR_FOLDERS and folder != path:
                return folder.parent
    return None


def _home(ref: Any, runs_dir: Any) -> Path:
    """The runs dir to read: the one given, else the one `ref` lies in, else the configured."""
    if runs_dir is not None and str(runs_dir).strip():
        return location.runs_dir(runs_dir)
    return runs_dir_of(ref) or location.runs_dir(None)


def _as_path(x: Any) -> Any:
    """A handle as the file or folder it stands for (a Run, a Pipeline, a Dataset read from a
    file); anything else as it is."""
    if isinstance(x, Run):
        return x.dir
    if isinstance(x, Dataset):
        if not x.source:
            raise TypeError(
                f"{ACCEPTS}; got the dataset {x.name!r}, which was not read from a file, so "
                "nothing records it. Pass the file it was read from, or the run trained on it."
            )
        return x.source
    path = getattr(x, "path", None)
    return path if isinstance(path, Path) else x


def _candidates(ref: str | os.PathLike[str], home: Path) -> list[str]:
    """The keys `ref` may name, most likely first."""
    text = os.fspath(ref)
    path = real(text)
    keys = [run_key(path), *(file_key(k, path) for k in
            ("dataset", "feedback_export", "synthesized", "merged", "gguf", "pipeline"))]  # fmt: skip
    if len(Path(text).parts) == 1:  # an id: a run, archived or not, or a pipeline
        keys += [run_key(home / text), run_key(home / files.ARCHIVED_DIR / text)]
        keys.append(file_key("pipeline", home / files.PIPELINES_DIR / f"{text}.json"))
    record = pipeline_record.resolve(text, home)
    if record is not None:
        keys.append(file_key("pipeline", record))
    keys += [f"published:{text.strip('/')}", f"dataset:hub:{text}"]
    return keys


def _found(graph: Graph, ref: str | os.PathLike[str], home: Path) -> str | None:
    for key in _candidates(ref, home):
        if key in graph.nodes:
            return key
    for node in graph.nodes.values():  # a published repo by its URL; an Ollama model by name
        if (node.kind, node.path) == ("published", os.fspath(ref)) or (
            (node.kind, node.id) == ("ollama", os.fspath(ref))
        ):
            return node.key
    return None


def _check_inside(ref: Any, home: Path) -> None:
    """A run named by id or path is one of `home`'s (refs refuses `..` and paths outside)."""
    if isinstance(ref, str) and len(Path(ref).parts) == 1:
        refs.resolve_inside(ref, home, "runs directory")


def lineage(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Lineage:
    """The lineage of `x`: what it came from and what came from it, as a `Lineage`.

    x: a run (a Run, its id, or its folder), a dataset file (or a Dataset read from one), a
    feedback export, a synthesized set, a pipeline (handle, id or record), or an export: a
    merged folder, a GGUF file, a published repo id or URL, or the name a run was registered as
    with Ollama. runs_dir: where to read (default: the run's own runs dir, else the configured
    one). Nodes: kind, id, path, time and state (present, archived, deleted, remote); a parent
    that was archived or deleted is shown as such. Edges: source, target and the link ("trained on", "continued from", "chatted with",
    "N of its events", "step 1 (train)", "merged", "converted", "published (merged)",
    "registered with Ollama").
    Raises ValueError (a TypeError for a wrong type) saying what lineage accepts.
    """
    ref = _as_path(x)
    if not isinstance(ref, str | os.PathLike) or not os.fspath(ref).strip():
        raise TypeError(f"{ACCEPTS}; got {type(x).__name__} ({x!r}).")
    home = _home(ref, runs_dir)
    _check_inside(ref, home)
    graph = read_graph(home)
    key = _found(graph, ref, home)
    if key is None:
        key = _lone_file(graph, Path(ref))
    if key is None:
        raise ValueError(
            f"{ACCEPTS}. {os.fspath(ref)!r} is none of these in {home}: no run, pipeline, "
            "export or data file of that name. dragon.runs() lists the runs; pass runs_dir= when "
            "it lives in another runs folder."
        )
    return graph.cut(key)


def _lone_file(graph: Graph, path: Path) -> str | None:
    """A data file no run or record names yet: a lineage of one node (nothing came from it)."""
    path = real(path)
    if not path.is_file() or path.suffix.lower() not in EXTENSIONS:
        return None
    return graph.add(Node(file_key("dataset", path), "dataset", path.name, str(path),
                          mtime(path), PRESENT, "no run has trained on it yet"))  # fmt: skip
