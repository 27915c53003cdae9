"""A run's exports in the lineage: merged folders, GGUF files, published repos and the model
registered with Ollama.

    add_exports(graph, runs_dir)

Read from what the exports left (as `export.summary` reads them for the Export tab): the run's
complete merged/ folder and the GGUFs under the run, plus each succeeded job's status on the run
(<run>/jobs/merge-*, gguf-*: `out_dir`, `out_file`, `merged`) for a merge or GGUF written
elsewhere, each succeeded publish job's result.json (the repo and its URL), and the run's
ollama/registered.json (the name, the server, the GGUF it was made from: the last registration).
The runs dir's own jobs/ holds the GGUF exports of a merged folder named directly (no run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dragonfarm_core.export import gguf_files, publishing
from dragonfarm_core.export import jobs as export_jobs
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.ollama import register as ollama_export
from dragonfarm_core.lineage.graph import PRESENT, REMOTE, Graph, Node
from dragonfarm_core.lineage.runs import file_key, mtime, real, run_dirs, run_key
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run

GGUF_KIND = "gguf"


def _succeeded(job_dirs: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, status) of each job that succeeded, oldest first."""
    found = [(d, files.read_status(d)) for d in job_dirs]
    return [(d, s) for d, s in found if s.get("state") == "succeeded"]


def _merged(graph: Graph, path: Path, source: str) -> str:
    check = export.merge_check(path) or {}
    identical = check.get("identical")
    detail = "" if identical is None else "checked: same tokens" if identical else "check failed"
    key = graph.add(Node(file_key("merged", path), "merged", f"{path.parent.name}/{path.name}",
                         str(path), mtime(path / export.COMPLETE), PRESENT, detail))  # fmt: skip
    graph.link(source, key, "merged")
    return key


def _gguf(graph: Graph, path: Path, source: str) -> None:
    check = gguf_files.read_check(path)
    detail = "" if check is None else f"check {'passed' if check.get('passed') else 'failed'}"
    key = graph.add(Node(file_key("gguf", path), "gguf", path.name, str(path), mtime(path),
                         PRESENT, detail))  # fmt: skip
    graph.link(source, key, "converted")


def _gguf_source(graph: Graph, gguf: Path, merged: str | None, fallback: str) -> str:
    """The merged folder a GGUF was made from: the one its job names, else the folder it is
    named after (<folder>-<quant>.gguf beside it), else the run."""
    candidates = [real(merged)] if merged else []
    candidates += [p for p in gguf.parent.iterdir() if gguf.name.startswith(f"{p.name}-")]
    for path in candidates:
        if file_key("merged", path) in graph.nodes:
            return file_key("merged", path)
    return fallback


def _ollama(graph: Graph, run_dir: Path, run: str) -> None:
    """The model the run was last registered as with Ollama, from the GGUF it was made of."""
    record = files.read_record(run_dir / ollama_export.OLLAMA_DIR / ollama_export.REGISTERED) or {}
    if not isinstance(record.get("name"), str):
        return
    url, gguf = str(record.get("url") or ""), record.get("gguf")
    made_of = file_key("gguf", real(gguf)) if isinstance(gguf, str) else None
    source = made_of if made_of in graph.nodes else run
    key = graph.add(Node(f"ollama:{url}/{record['name']}", "ollama", record["name"], url or None,
                         record.get("registered_at"), REMOTE, f"at {url}" if url else ""))  # fmt: skip
    graph.link(source, key, "registered with Ollama")


def _run_exports(graph: Graph, run_dir: Path) -> None:
    run = run_key(run_dir)
    merges = [export.default_out_dir(run_dir).resolve()]
    merges += [real(s["out_dir"]) for _, s in _succeeded(files.job_dirs(run_dir, export.JOB_KIND))
               if isinstance(s.get("out_dir"), str)]  # fmt: skip
    for path in dict.fromkeys(merges):
        if export.is_complete(path):
            _merged(graph, path, run)
    ggufs = {p.resolve(): None for p in publishing.run_ggufs(Run(run_dir))}
    for _, status in _succeeded(files.job_dirs(run_dir, GGUF_KIND)):
        if isinstance(status.get("out_file"), str) and real(status["out_file"]).is_file():
            ggufs[real(status["out_file"])] = status.get("merged")
    for path, merged in ggufs.items():
        _gguf(graph, path, _gguf_source(graph, path, merged, run))
    for job_dir, _ in _succeeded(files.job_dirs(run_dir, publishing.JOB_KIND)):
        result = files.read_record(job_dir / export_jobs.RESULT) or {}
        if not isinstance(result.get("repo"), str):
            continue
        what = str(result.get("what") or "merged")
        merged_key = file_key("merged", export.default_out_dir(run_dir).resolve())
        source = merged_key if what == "merged" and merged_key in graph.nodes else run
        key = graph.add(Node(f"published:{result['repo']}", "published", result["repo"],
                             result.get("url"), mtime(job_dir / export_jobs.RESULT), REMOTE,
                             f"{what} model, {len(result.get('files') or [])} files"))  # fmt: skip
        graph.link(source, key, f"published ({what})")
    _ollama(graph, run_dir, run)


def add_exports(graph: Graph, runs_dir: Path) -> None:
    for run_dir, _ in run_dirs(runs_dir):
        _run_exports(graph, run_dir)
    # A GGUF of a merged folder named directly: its job lives in the runs dir's own jobs/.
    for _, status in _succeeded(files.job_dirs(runs_dir, GGUF_KIND)):
        merged, out = status.get("merged"), status.get("out_file")
        if isinstance(merged, str) and isinstance(out, str) and real(out).is_file():
            key = file_key("merged", real(merged))
            if key in graph.nodes:
                _gguf(graph, real(out), key)
