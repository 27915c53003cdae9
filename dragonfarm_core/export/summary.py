"""What a run's exports have written: the files with their sizes, and every check's verdict.

    s = summary(run)
    s.files            # [("merged/model.safetensors", 21908384), ("ollama/Modelfile", 812), ...]
    s.merge_check      # merged/merge_check.json: greedy tokens of merged vs base + adapters
    s.gguf_checks      # the template round-trip check of each GGUF (llama.cpp vs the HF template)
    s.template_check   # ollama/template_check.json: the Go template vs the HF template
    s.registered, s.published      # the Ollama model last registered, the Hub repo last published

Everything is read from the run's folder on each call, so the Export tab, a second browser and
a later session agree. Pure standard library (the app reads it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dragonfarm_core.export import jobs as export_jobs
from dragonfarm_core.export import merge as export
from dragonfarm_core.rundir import files, jobs
from dragonfarm_core.rundir.run import Run, open_run


@dataclass(frozen=True)
class ExportSummary:
    files: list[tuple[str, int]] = field(default_factory=list)
    merge_check: dict[str, Any] | None = None
    gguf_checks: list[dict[str, Any]] = field(default_factory=list)
    template_check: dict[str, Any] | None = None
    # The template check's first difference in words (or "identical").
    template_detail: str | None = None
    registered: dict[str, Any] | None = None
    published: dict[str, Any] | None = None


def _sized(run_dir: Path, paths: list[Path]) -> list[tuple[str, int]]:
    out = []
    for path in paths:
        if path.is_file() and not path.name.startswith("."):
            out.append((path.relative_to(run_dir).as_posix(), path.stat().st_size))
    return out


def last_result(run_dir: Path, kind: str) -> dict[str, Any] | None:
    """The result of the newest `kind` job on the run that succeeded."""
    for job_dir in reversed(files.job_dirs(run_dir, kind)):
        if jobs.open_job(job_dir).state == "succeeded":
            value = files.read_record(job_dir / export_jobs.RESULT)
            if value is not None:
                return value
    return None


def gguf_checks(ggufs: list[Path]) -> list[dict[str, Any]]:
    """The template round-trip check recorded beside each GGUF (`gguf.read_check`), less the
    cases (the prompts themselves)."""
    from dragonfarm_core.export import gguf

    found = []
    for path in ggufs:
        check = gguf.read_check(path)
        if isinstance(check, dict):
            found.append({"file": path.name, **{k: v for k, v in check.items() if k != "cases"}})
    return found


def summary(run: Run | str | os.PathLike[str]) -> ExportSummary:
    """What the run's merge, GGUF export, Ollama registration and publish left behind."""
    from dragonfarm_core.export import publishing
    from dragonfarm_core.export.ollama import check as ollama_check
    from dragonfarm_core.export.ollama import register as ollama_export

    run = open_run(run)
    merged = export.merged_model(run)
    listed: list[Path] = sorted(merged.rglob("*")) if merged else []
    ggufs = publishing.run_ggufs(run)
    ollama = run.dir / ollama_export.OLLAMA_DIR
    listed += ggufs + [ollama / ollama_export.MODELFILE]
    template_check = files.read_record(ollama / ollama_export.CHECK_FILE)
    return ExportSummary(
        files=_sized(run.dir, listed),
        merge_check=export.merge_check(merged) if merged else None,
        gguf_checks=gguf_checks(ggufs),
        template_check=template_check,
        template_detail=ollama_check.describe_difference(template_check)
        if template_check
        else None,
        registered=files.read_record(ollama / ollama_export.REGISTERED),
        published=last_result(run.dir, publishing.JOB_KIND),
    )
