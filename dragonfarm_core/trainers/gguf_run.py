"""Export a merged model to GGUF with llama.cpp's own converter, and check the file.

    python -m dragonfarm_core.trainers.gguf_run export MERGED --out FILE --quant Q
        [--run RUN_DIR] [--merge] [--llama-cpp DIR] [--job JOB_DIR]
    python -m dragonfarm_core.trainers.gguf_run check MERGED --gguf FILE
        [--run RUN_DIR] [--llama-cpp DIR] [--job JOB_DIR]

`dragon.export_gguf` and `dragon.check_export` run this as a background job (`gguf.py`); the app
process never imports torch. export: (with --merge, the run is merged first, as `dragon.merge`
does) the merged folder is handed to llama.cpp's `convert_hf_to_gguf.py` (f32/f16/bf16/q8_0
directly; any other type is converted to f16 and then quantized by `llama-quantize`), written
beside its destination, checked, and renamed into place with its check record only when the
check passes. No GGUF is ever written here: llama.cpp's converter writes it.

The check (the template round-trip): the run's held-out prompts and a few fixed conversations (a
system message, several turns) are rendered by the merged folder's HF tokenizer and chat template
(the way dragonfarm renders every prompt, `trainers.evaluation.prompt_ids`) and, through
llama-server, by llama.cpp from the GGUF's own metadata (/apply-template, then /tokenize): the
token ids must be identical. Then both decode greedily (argmax, no penalties) from the same
prompt, transformers on the merged folder and llama.cpp on the GGUF: the first CHECK_NEW_TOKENS
tokens must be identical for an unquantized file, and agree on at least the first
`gguf_files.agree_tokens(quant)` for a quantized one (rounding moves near-tied logits). A
mismatch names the first differing token on both sides. The record goes to <file>.check.json
(`gguf_files.read_check`) and to the job folder.

The converter is `gguf_convert`, the check `gguf_check`; this module is the job's entry point.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.export import gguf_files
from dragonfarm_core.llamacpp.location import LlamaCpp, find_llama_cpp
from dragonfarm_core.rundir import files, jobs
from dragonfarm_core.trainers.gguf_check import check_gguf, stamp
from dragonfarm_core.trainers.gguf_convert import STAGE_SUFFIX, convert


def remove_leftovers(out: Path) -> None:
    """What exports into `out` that were killed left beside it (.tmp-<name>-<pid>, and its
    .stage folder): removed when that process is gone."""
    prefix = f"{gguf_files.TEMP_PREFIX}{out.name}-"
    for path in out.parent.glob(f"{prefix}*"):
        pid = path.name[len(prefix) :].removesuffix(STAGE_SUFFIX)
        if pid.isdigit() and int(pid) != os.getpid() and psutil.pid_exists(int(pid)):
            continue  # an export in progress
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def export_run(
    merged: Path, out: Path, quant: str, tools: LlamaCpp, run_dir: Path | None = None,
    merge: bool = False, job_dir: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """(Merge,) convert, check and put the GGUF in place; returns the check."""
    if merge:
        if run_dir is None:
            raise RuntimeError("--merge needs --run: the run to merge.")
        from dragonfarm_core.trainers.merge_run import merge_run

        merge_run(run_dir, merged)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    tmp = out.parent / f"{gguf_files.TEMP_PREFIX}{out.name}-{os.getpid()}"
    try:
        convert(tools, merged, tmp, quant)
        print(f"[dragonfarm] {quant} GGUF written ({tmp.stat().st_size} bytes); checking it",
              flush=True)  # fmt: skip
        record = check_gguf(merged, tmp, tools, run_dir, job_dir)
        record = stamp({**record, "gguf": str(out), "requested_quant": quant}, tmp)
        if job_dir is not None:  # readable even when the check fails
            files.write_json(job_dir / gguf_files.CHECK_SUFFIX.lstrip("."), record)
        if not record["passed"]:
            raise RuntimeError(
                gguf_files.difference_text(record) + f" Nothing was written to {out}."
            )
        files.write_json(gguf_files.check_path(out), record)
        os.replace(tmp, out)  # the check record first: the file never stands unchecked
    finally:
        tmp.unlink(missing_ok=True)
    print(f"[dragonfarm] exported {out}: {gguf_files.describe_check(record)}", flush=True)
    return record


def check_run(
    merged: Path, gguf_file: Path, tools: LlamaCpp, run_dir: Path | None = None,
    job_dir: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Check an existing GGUF; the record goes beside it (and to the job folder)."""
    record = stamp(check_gguf(merged, gguf_file, tools, run_dir, job_dir), gguf_file)
    if job_dir is not None:
        files.write_json(job_dir / gguf_files.CHECK_SUFFIX.lstrip("."), record)
    files.write_json(gguf_files.check_path(gguf_file), record)
    print(f"[dragonfarm] checked {gguf_file}: {gguf_files.describe_check(record)}", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.trainers.gguf_run",
        description="Export a merged model folder to GGUF with llama.cpp, or check a GGUF.",
    )
    parser.add_argument("command", choices=["export", "check"])
    parser.add_argument("merged", help="the merged model folder")
    parser.add_argument("--out", help="export: the GGUF file to write")
    parser.add_argument("--quant", default="q8_0", help="export: the GGUF type (default q8_0)")
    parser.add_argument("--gguf", help="check: the GGUF file to check")
    parser.add_argument("--run", help="the run the model comes from (its held-out prompts)")
    parser.add_argument("--merge", action="store_true", help="export: merge the run first")
    parser.add_argument("--llama-cpp", help="the llama.cpp tree (default: find_llama_cpp())")
    parser.add_argument("--job", help="run as the job in this folder (status, heartbeat, cancel)")
    ns = parser.parse_args(argv)
    merged = Path(ns.merged).resolve()
    run_dir = Path(ns.run).resolve() if ns.run else None
    job_dir = Path(ns.job).resolve() if ns.job else None
    if ns.command == "export" and not ns.out:
        parser.error("export needs --out FILE")
    if ns.command == "check" and not ns.gguf:
        parser.error("check needs --gguf FILE")

    def work() -> dict[str, Any]:
        tools = find_llama_cpp(ns.llama_cpp)
        if ns.command == "export":
            return export_run(merged, Path(ns.out).resolve(), ns.quant, tools, run_dir,
                              ns.merge, job_dir)  # fmt: skip
        return check_run(merged, Path(ns.gguf).resolve(), tools, run_dir, job_dir)

    if job_dir is not None:
        return jobs.run_job(job_dir, work)
    work()
    return 0


if __name__ == "__main__":
    sys.exit(main())
