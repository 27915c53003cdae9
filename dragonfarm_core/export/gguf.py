"""`export_gguf()` and `check_export()`: a merged model as a GGUF, made and checked by llama.cpp.

    path = dragon.export_gguf(run)                        # <run>/merged-q8_0.gguf (merges first)
    path = dragon.export_gguf("my-merged", quant="f16")   # my-merged-f16.gguf beside the folder
    dragon.check_export(run, gguf=path)["passed"]         # the template round-trip, again

The GGUF is written by llama.cpp's own `convert_hf_to_gguf.py` (f32, f16, bf16, q8_0 directly;
the other types through `llama-quantize` from an f16 file), never by a writer of our own; the
llama.cpp used is `find_llama_cpp()`'s (the argument, LLAMA_CPP_DIR, or the cache that
`dragonfarm build-llama-cpp` or the Export tab's Build button builds offline). The export runs as a background job
(`rundir.jobs`: <run>/jobs/gguf-<time>/ for a run's model, <runs dir>/jobs/gguf-<time>/ for any
other folder; process `python -m dragonfarm_core.trainers.gguf_run`), so this process never
imports torch.

Every export is checked before the file takes its name (`trainers.gguf_run`): the same prompts
(the run's held-out ones and a few fixed conversations) rendered by the HF tokenizer's chat
template and by llama.cpp from the GGUF's own metadata must give the same token ids, and greedy
decoding must give the same first tokens: all CHECK_NEW_TOKENS for f32/f16/bf16, the first
`agree_tokens(quant)` for a quantized file. The record is written beside the file as
<file>.check.json (`read_check`); a failed check fails the export, names the first differing
token on both sides, and leaves no file. `check_export` checks an existing GGUF again, e.g.
after the tokenizer or its template changed. Pure standard library.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.export import merge as export
from dragonfarm_core.export.gguf_files import (
    CHECK_SUFFIX,
    DIRECT_QUANTS,
    GGUFError,
    default_out_file,
    describe_check,
    normalize_quant,
    read_check,
)
from dragonfarm_core.llamacpp.location import (
    QUANTIZE,
    SERVER,
    LlamaCpp,
    LlamaCppMissing,
    find_llama_cpp,
)
from dragonfarm_core.rundir import files, job_handle, jobs, location, queue
from dragonfarm_core.rundir.job_handle import JobHandle, ended_without, wait_or_stop, wait_status
from dragonfarm_core.rundir.run import Run, open_run

__all__ = [
    "GGUFError",
    "GGUFJob",
    "LlamaCpp",
    "LlamaCppMissing",
    "check_export",
    "default_out_file",
    "describe_check",
    "export_gguf",
    "find_llama_cpp",
    "read_check",
    "start_check_export",
    "start_export_gguf",
]

JOB_KIND = "gguf"
CHECK_JOB_KIND = "ggufcheck"
EXPORT_TIMEOUT_S = 3600.0
CANCEL_TIMEOUT_S = job_handle.CANCEL_TIMEOUT_S


# --- what to export: a run, or a model folder -------------------------------------------------


@dataclass(frozen=True)
class Source:
    """What an export starts from: the model folder, the run it belongs to (None for any other
    folder), and whether the run must be merged first."""

    merged: Path
    run: Run | None
    needs_merge: bool


def _is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def resolve_source(source: Run | str | os.PathLike[str]) -> Source:
    """A run (object, folder or id: its <run>/merged/, merged first when not done yet) or a
    merged model folder (config.json and safetensors weights); GGUFError otherwise."""
    if isinstance(source, Run):
        return _run_source(source)
    path = Path(source).expanduser()
    if not path.is_dir() or files.is_run_dir(path):
        try:
            return _run_source(open_run(source))
        except FileNotFoundError as e:
            raise GGUFError(f"{e} Pass a run, or a merged model folder.") from None
    path = path.resolve()
    if not _is_model_folder(path):
        raise GGUFError(
            f"{path} is neither a run nor a model folder (no config.json with *.safetensors "
            "weights). Pass a run, or a folder dragon.merge(run) wrote."
        )
    parent = path.parent
    ours = files.is_run_dir(parent) and path == export.default_out_dir(parent).resolve()
    if ours and not export.is_complete(path):
        raise GGUFError(
            f"{path} is a merge that did not finish (it has no {export.COMPLETE} marker); pass "
            "the run instead, which merges it again first."
        )
    return Source(path, Run(parent) if ours else None, needs_merge=False)


def _run_source(run: Run) -> Source:
    merged = export.default_out_dir(run.dir).resolve()
    if export.is_complete(merged):
        return Source(merged, run, needs_merge=False)
    why = export.refusal(run)
    if why:
        raise GGUFError(why)
    return Source(merged, run, needs_merge=True)


def usable_llama_cpp(llama_cpp_dir: str | os.PathLike[str] | None, quant: str) -> LlamaCpp:
    """find_llama_cpp(), with the binaries this export needs (the check runs llama-server)."""
    tools = find_llama_cpp(llama_cpp_dir)
    tools.binary(SERVER)
    if quant not in DIRECT_QUANTS:
        tools.binary(QUANTIZE)
    return tools


# --- the job ----------------------------------------------------------------------------------


def gguf_command(
    action: str, source: Source, job_dir: Path, tools: LlamaCpp, *extra: str
) -> list[str]:
    """The job's process: the gguf entry point, run as the job in `job_dir`."""
    argv = [sys.executable, "-m", "dragonfarm_core.trainers.gguf_run", action,
            str(source.merged), "--llama-cpp", str(tools.root), "--job", str(job_dir), *extra]  # fmt: skip
    if source.run is not None:
        argv += ["--run", str(source.run.dir)]
    return argv


def start_job(source: Source, kind: str, command: Any, **status_fields: Any) -> jobs.Job:
    """Start a `kind` job: on the run the model belongs to (queued for its device, like a
    merge), or, for any other folder, in <runs dir>/jobs/ (it needs no device queue)."""
    if source.run is not None:
        return jobs.start_on_run(
            source.run.dir, kind, command, device=queue.queue_key(source.run.config),
            error=GGUFError, **status_fields,
        )  # fmt: skip
    job = jobs.open_job(files.new_job_dir(location.runs_dir(), kind))
    job.start(command(job.dir), device=None, kind=kind, **status_fields)
    return job


@dataclass(frozen=True)
class GGUFJob(JobHandle):
    """An export (or a check) under way, as `start_export_gguf` returns it at once: `state`,
    `logs()`, `cancel()`, `wait()` (the GGUF's path once the job has succeeded) and `check()`
    (the round-trip record, also on failure, once the job has written it)."""

    merged: Path
    gguf: Path
    quant: str | None
    job: jobs.Job
    action: str = "export"

    def check(self) -> dict[str, Any] | None:
        """The check record the job wrote (None before, or when it never got that far)."""
        record = files.read_json(self.job.dir / CHECK_SUFFIX.lstrip("."))
        return record if isinstance(record, dict) else None

    def wait(self, timeout: float | None = None) -> Path:
        """Block until the job ends: the GGUF, or GGUFError naming why it failed (with the
        log's tail); TimeoutError after `timeout` s (the job keeps going)."""
        status = wait_status(self.job, timeout)
        what = f"Exporting {self.merged} to {self.gguf.name}"
        if self.action != "export":
            what = f"Checking {self.gguf} against {self.merged}"
        if status.get("state") == "succeeded" and self.gguf.is_file():
            return self.gguf
        raise ended_without(
            self.job, status, GGUFError, doing=what, cancelled=f"{what} was cancelled.",
            missing=f"{what} ended, but {self.gguf} is not there.",
        )  # fmt: skip


def start_export_gguf(
    merged_dir: Run | str | os.PathLike[str],
    out_file: str | os.PathLike[str] | None = None,
    quant: str = "q8_0",
    llama_cpp_dir: str | os.PathLike[str] | None = None,
) -> GGUFJob:
    """Start exporting a merged folder (or a run, merged first when needed) to GGUF, checked;
    returns at once. Raises GGUFError / LlamaCppMissing when it cannot start."""
    quant = normalize_quant(quant)
    source = resolve_source(merged_dir)
    tools = usable_llama_cpp(llama_cpp_dir, quant)
    out = default_out_file(source.merged, quant) if out_file is None else Path(out_file)
    out = out.expanduser().resolve()
    if out.is_dir():
        raise GGUFError(f"{out} is a folder; pass out_file= a file name ending in .gguf.")
    if out == source.merged or source.merged in out.parents:
        raise GGUFError(
            f"{out} is inside the model folder {source.merged}; write the GGUF beside it."
        )
    extra = ["--out", str(out), "--quant", quant, *(["--merge"] if source.needs_merge else [])]
    job = start_job(
        source, JOB_KIND, lambda job_dir: gguf_command("export", source, job_dir, tools, *extra),
        out_file=str(out), quant=quant, merged=str(source.merged),
    )  # fmt: skip
    return GGUFJob(source.merged, out, quant, job)


def _wait(pending: GGUFJob, timeout: float) -> Path:
    return wait_or_stop(pending, timeout, f"{pending.action.capitalize()} of {pending.gguf.name}")


def export_gguf(
    merged_dir: Run | str | os.PathLike[str],
    out_file: str | os.PathLike[str] | None = None,
    quant: str = "q8_0",
    llama_cpp_dir: str | os.PathLike[str] | None = None,
    wait: bool = True,
    *,
    timeout: float = EXPORT_TIMEOUT_S,
) -> Path:
    """Convert a merged model folder to GGUF with llama.cpp, check it; returns the file's path.

    merged_dir: a folder dragon.merge() wrote (or any model folder with safetensors weights and
    a tokenizer), or a run (its merged/ folder; the run is merged first when it has none).
    out_file: default beside the folder, <folder>-<quant>.gguf. quant: f16, bf16, q8_0 (the
    converter's own), or a llama-quantize type (q4_k_m, q5_k_m, q6_k...). llama_cpp_dir: a
    llama.cpp tree with its binaries built; default LLAMA_CPP_DIR, else the cache that
    `dragonfarm build-llama-cpp` builds. The template round-trip check runs on the file before it
    takes its name; its record is <file>.check.json (`read_check`), and a failed check raises
    GGUFError naming the first differing token. wait=False returns the path at once while the
    job runs (start_export_gguf returns the job itself).
    """
    pending = start_export_gguf(merged_dir, out_file, quant, llama_cpp_dir)
    if not wait:
        return pending.gguf
    return _wait(pending, timeout)


def _default_gguf(merged: Path) -> Path:
    preferred = default_out_file(merged, "q8_0")
    if preferred.is_file():
        return preferred
    found = sorted(merged.parent.glob(f"{merged.name}-*.gguf"))
    if len(found) == 1:
        return found[0]
    listed = ", ".join(p.name for p in found) or "none"
    raise GGUFError(
        f"Which GGUF should be checked? Beside {merged} there are: {listed}. Pass gguf=."
    )


def start_check_export(
    run: Run | str | os.PathLike[str],
    gguf: str | os.PathLike[str] | None = None,
    llama_cpp_dir: str | os.PathLike[str] | None = None,
) -> GGUFJob:
    """Start the template round-trip check of `gguf` against the run's (or folder's) merged
    model; returns at once (its `wait()` gives the GGUF, its `check()` the record)."""
    source = resolve_source(run)
    if source.needs_merge:
        raise GGUFError(
            f"Run {source.run.id if source.run else source.merged} has no merged model yet; "
            "export it with dragon.export_gguf(run), which merges and checks."
        )
    path = _default_gguf(source.merged) if gguf is None else Path(gguf).expanduser().resolve()
    if not path.is_file():
        raise GGUFError(f"{path} is not a file; pass gguf= the GGUF to check.")
    tools = usable_llama_cpp(llama_cpp_dir, "f16")
    job = start_job(
        source, CHECK_JOB_KIND,
        lambda job_dir: gguf_command("check", source, job_dir, tools, "--gguf", str(path)),
        gguf=str(path), merged=str(source.merged),
    )  # fmt: skip
    return GGUFJob(source.merged, path, None, job, action="check")


def check_export(
    run: Run | str | os.PathLike[str],
    gguf: str | os.PathLike[str] | None = None,
    llama_cpp_dir: str | os.PathLike[str] | None = None,
    *,
    timeout: float = EXPORT_TIMEOUT_S,
) -> dict[str, Any]:
    """The template round-trip check of a GGUF against the model it was exported from.

    run: a run (its merged/ folder) or a merged model folder; gguf: the file (default the
    folder's q8_0 export, or its only one). The same prompts rendered by the HF tokenizer's
    chat template and by llama.cpp from the GGUF's metadata must give the same token ids, and
    greedy decoding the same first tokens (all of them unquantized; agree_tokens(quant) for a
    quantized file). Returns the record (also written to <gguf>.check.json): `passed`,
    `first_difference` (prompt, position, the token on both sides: id and text), `cases`.
    export_gguf runs this itself; call it again after changing the tokenizer or the template.
    """
    pending = start_check_export(run, gguf, llama_cpp_dir)
    _wait(pending, timeout)
    record = pending.check()
    if record is None:
        raise GGUFError(f"The check of {pending.gguf} wrote no record; see {pending.job.log}.")
    return record
