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
`gguf.agree_tokens(quant)` for a quantized one (rounding moves near-tied logits). A mismatch names
the first differing token on both sides. The record goes to <file>.check.json
(`gguf.read_check`) and to the job folder.

The converter reads a SentencePiece model's special tokens from tokenizer_config.json's
`added_tokens_decoder`, and whether to add a BOS from its `add_bos_token`; transformers 5 writes
neither (it keeps both in tokenizer.json). Without them ChatML's <|im_start|> becomes five
ordinary pieces in the GGUF and llama.cpp puts a BOS the model never saw before every prompt:
the check caught both on the bundled model. So the converter is given a staged view of the
folder (links to every file) whose tokenizer_config.json carries them, taken from
tokenizer.json; the folder itself is left as it is. The check is what proves the result: it
compares token ids, not file contents.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core import gguf
from dragonfarm_core.llama_cpp import QUANTIZE, LlamaCpp, find_llama_cpp
from dragonfarm_core.llama_server import LlamaServer
from dragonfarm_core.rundir import files, jobs

CHECK_NEW_TOKENS = 32
# Held-out prompts of the run the check renders and decodes (the fixed ones come on top).
CHECK_PROMPTS = 4
# Conversations every check renders: a system message, and several turns, are where chat
# templates (and their translations) most often differ.
PROBES: tuple[list[dict[str, str]], ...] = (
    [{"role": "system", "content": "You are a helpful support assistant. Answer briefly."},
     {"role": "user", "content": "My order has not arrived yet. What can I do?"}],
    [{"role": "user", "content": "Hi! I can't log in to my account."},
     {"role": "assistant", "content": "Sorry to hear that. Which error do you see?"},
     {"role": "user", "content": "It says my password is wrong, but I just reset it."}],
)  # fmt: skip
THREADS = 2
# The converter's staged input and intermediate files: <temp GGUF><STAGE_SUFFIX>/.
STAGE_SUFFIX = ".stage"
SERVER_CTX = 2048


# --- the converter ----------------------------------------------------------------------------


def added_tokens_decoder(tokenizer_json: Any) -> dict[str, dict[str, Any]] | None:
    """tokenizer.json's added tokens in tokenizer_config.json's `added_tokens_decoder` form,
    or None when there are none."""
    added = tokenizer_json.get("added_tokens") if isinstance(tokenizer_json, dict) else None
    if not added:
        return None
    return {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}


def special_flags(tokenizer_json: Any) -> dict[str, bool]:
    """add_bos_token / add_eos_token as tokenizer.json's post-processor applies them (a
    TemplateProcessing whose single-sequence template starts / ends with a special token);
    empty when it has none to read."""
    post = tokenizer_json.get("post_processor") if isinstance(tokenizer_json, dict) else None
    for processor in (post or {}).get("processors", [post] if post else []):
        if processor.get("type") == "TemplateProcessing":
            single = processor.get("single") or []
            return {"add_bos_token": bool(single) and "SpecialToken" in single[0],
                    "add_eos_token": bool(single) and "SpecialToken" in single[-1]}  # fmt: skip
    return {}


def stage(merged: Path, into: Path) -> Path:
    """A view of `merged` for the converter in `into`: a link to each file, and a
    tokenizer_config.json completed with what transformers 5 keeps in tokenizer.json only:
    the added tokens (`added_tokens_decoder`) and whether a BOS/EOS is added (see above), and
    without a chat template of its own when chat_template.jinja, the one transformers uses,
    is there."""
    into.mkdir(parents=True, exist_ok=True)
    for path in merged.iterdir():
        if path.name != "tokenizer_config.json":
            (into / path.name).symlink_to(path.resolve())
    config = files.read_json(merged / "tokenizer_config.json")
    if isinstance(config, dict):
        tokenizer_json = files.read_json(merged / "tokenizer.json")
        table = added_tokens_decoder(tokenizer_json)
        if table and not config.get("added_tokens_decoder"):
            config["added_tokens_decoder"] = table
        for key, value in special_flags(tokenizer_json).items():
            config.setdefault(key, value)
        if (merged / "chat_template.jinja").is_file():
            # transformers renders with chat_template.jinja when there is one; the converter
            # would prefer a (stale) copy in tokenizer_config.json.
            config.pop("chat_template", None)
        files.write_json(into / "tokenizer_config.json", config)
    return into


def run_logged(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a llama.cpp tool with its output in this job's log; raise naming it when it fails."""
    print(f"[dragonfarm] running {' '.join(argv)}", flush=True)
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{Path(argv[1] if argv[0] == sys.executable else argv[0]).name} exited with "
            f"status {done.returncode}; its output is in the log above."
        )


def convert(tools: LlamaCpp, merged: Path, out: Path, quant: str) -> None:
    """Write `merged` as a GGUF of type `quant` to `out`, with llama.cpp's tools only (the
    staged input and an f16 intermediate go to <out>.stage/, removed after)."""
    env = tools.converter_env()
    env["TQDM_DISABLE"] = "1"  # one line per tensor is enough in a job log
    env["NO_LOCAL_GGUF"] = "1"  # gguf-py comes from PYTHONPATH (the same tree), as set above
    work = out.with_name(out.name + STAGE_SUFFIX)
    try:
        staged = stage(merged, work / "model")
        direct = quant in gguf.DIRECT_QUANTS
        target = out if direct else work / "f16.gguf"
        run_logged([sys.executable, str(tools.converter), str(staged), "--outfile", str(target),
                    "--outtype", quant if direct else "f16"], env=env)  # fmt: skip
        if not direct:
            run_logged([str(tools.binary(QUANTIZE)), str(target), str(out),
                        gguf.QUANTIZE_TYPES[quant], str(THREADS)])  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not out.is_file():
        raise RuntimeError(f"llama.cpp's tools ended without writing {out}.")


def file_type(tools: LlamaCpp, path: Path) -> str:
    """The GGUF's type as dragonfarm names it (f16, q8_0, q4_k_m...), from its metadata."""
    if str(tools.gguf_py) not in sys.path:
        sys.path.insert(0, str(tools.gguf_py))
    gguf_py: Any = importlib.import_module("gguf")  # llama.cpp's own reader, of the same tree

    reader = gguf_py.GGUFReader(str(path))
    field = reader.get_field("general.file_type")
    if field is None:
        return "unknown"
    name = gguf_py.LlamaFileType(int(field.contents())).name
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").lower()


# --- the check --------------------------------------------------------------------------------


def contexts(run_dir: Path | None) -> tuple[list[list[dict[str, Any]]], str]:
    """The conversations to check: the run's held-out prompts (when there is a run), then the
    fixed probes; and where the run's came from."""
    found: list[list[dict[str, Any]]] = []
    split = "none"
    if run_dir is not None:
        from dragonfarm_core.trainers.merge_run import check_contexts

        try:
            found, split = check_contexts(run_dir, CHECK_PROMPTS)
        except ValueError:
            found, split = [], "none"
    return [*found, *[list(p) for p in PROBES]], split


def _token(ids: list[int], at: int, text: Callable[[int], str]) -> dict[str, Any]:
    if at >= len(ids):
        return {"id": None, "text": "(ended)"}
    return {"id": ids[at], "text": text(ids[at])}


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (a shorter one differs where it ends)."""
    from dragonfarm_core.trainers.merge_run import first_difference as first

    return first(a, b)


def judge(
    cases: list[dict[str, Any]],
    need: int,
    hf_text: Callable[[int], str],
    gguf_text: Callable[[int], str],
) -> dict[str, Any] | None:
    """Mark each case (prompt_identical, reply_agree, reply_ok) and return the first problem:
    a prompt whose token ids differ (any case's, before any reply), else a reply that differs
    within its first `need` tokens (a reply that ends sooner, with its stop token, must match
    whole: stopping elsewhere is a difference too); the differing token on both sides, id and
    text. None when the GGUF passes."""
    problem = None
    for what in ("prompt", "reply"):
        for n, case in enumerate(cases):
            hf, got = case[f"hf_{what}"], case[f"gguf_{what}"]
            at = first_difference(hf, got)
            if what == "prompt":
                case["prompt_identical"] = ok = at is None
            else:
                case["reply_agree"] = len(hf) if at is None else at
                case["reply_ok"] = ok = at is None or at >= need
            if not ok and problem is None and at is not None:
                problem = {"prompt": n, "in": what, "position": at,
                           "hf": _token(hf, at, hf_text), "gguf": _token(got, at, gguf_text)}  # fmt: skip
    return problem


def reference(merged: Path, conversations: list[list[dict[str, Any]]]) -> tuple[Any, list[dict]]:
    """(the HF tokenizer, a case per conversation that fits): its prompt ids rendered by the
    merged folder's chat template and transformers' greedy reply on the merged model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dragonfarm_core.chat_template import stop_ids
    from dragonfarm_core.trainers.evaluation import prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(merged)
    if not tokenizer.chat_template:
        raise RuntimeError(
            f"{merged} has no chat template (chat_template.jinja or tokenizer_config.json): "
            "there is nothing to check the GGUF's template against. Merge the run again."
        )
    # float32 on the CPU: the reference is the merged model as saved, without rounding of its own.
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    stop = stop_ids(model, tokenizer)
    cases = []
    for messages in conversations:
        prompt = prompt_ids(tokenizer, messages, 10**9)  # whole: llama.cpp renders it whole
        if len(prompt) + CHECK_NEW_TOKENS > SERVER_CTX:
            continue
        ids = torch.tensor([prompt], dtype=torch.long)
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=CHECK_NEW_TOKENS,
                do_sample=False, eos_token_id=stop, pad_token_id=tokenizer.pad_token_id,
                repetition_penalty=1.0, temperature=None, top_p=None, top_k=None,
            )  # fmt: skip
        cases.append({"messages": messages, "hf_prompt": prompt,
                      "hf_reply": [int(t) for t in out[0, len(prompt):]]})  # fmt: skip
    if not cases:
        raise RuntimeError(f"No check prompt fits in {SERVER_CTX} tokens with its reply.")
    del model
    return tokenizer, cases


def check_gguf(
    merged: Path,
    gguf_file: Path,
    tools: LlamaCpp,
    run_dir: Path | None = None,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """The template round-trip check of `gguf_file` against the merged folder; the record."""
    conversations, split = contexts(run_dir)
    tokenizer, cases = reference(merged, conversations)
    quant = file_type(tools, gguf_file)
    need = gguf.agree_tokens(quant, CHECK_NEW_TOKENS)
    log = (log_dir or gguf_file.parent) / "llama-server.log"
    with LlamaServer.start(tools, gguf_file, threads=THREADS, ctx=SERVER_CTX, log=log) as server:
        gguf_template = server.props().get("chat_template")
        for case in cases:
            case["hf_text"] = tokenizer.decode(case["hf_prompt"])
            case["gguf_text"] = server.apply_template(case["messages"])
            case["gguf_prompt"] = [i for i, _ in server.tokenize(case["gguf_text"])]
            # From the same prompt ids: a template difference is reported as such, above.
            answer = server.complete(case["hf_prompt"], CHECK_NEW_TOKENS)
            case["gguf_reply"] = answer["tokens"]
            case["gguf_stop"] = answer.get("stop_type")
        problem = judge(
            cases, need, lambda t: tokenizer.decode([t]), lambda t: server.detokenize([t])
        )
    for case in cases:
        case["reply_identical"] = case["hf_reply"] == case["gguf_reply"]
    record = {
        "passed": problem is None,
        "gguf": str(gguf_file),
        "quant": quant,
        "merged": str(merged),
        "run": str(run_dir) if run_dir else None,
        "llama_cpp": str(tools.root),
        "prompts": len(cases),
        "split": split,
        "max_new_tokens": CHECK_NEW_TOKENS,
        "tolerance": {"exact": need >= CHECK_NEW_TOKENS, "agree_tokens": min(need, CHECK_NEW_TOKENS)},
        "templates_identical": all(c["prompt_identical"] for c in cases),
        "replies_identical": sum(c["reply_identical"] for c in cases),
        # An identical reply agrees all the way (one that stopped early too).
        "min_agree_tokens": min(CHECK_NEW_TOKENS if c["reply_identical"] else c["reply_agree"]
                                for c in cases),  # fmt: skip
        "first_difference": problem,
        "embedded_template": gguf_template,
        "checked_at": files.now_iso(),
        "cases": cases,
    }  # fmt: skip
    return record


def stamp(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """The record with the file it is about: size and modification time (a record whose file
    was replaced since is not taken for it, `gguf.read_check`)."""
    info = path.stat()
    return {**record, "size_bytes": info.st_size, "mtime_ns": info.st_mtime_ns}


# --- the two commands -------------------------------------------------------------------------


def remove_leftovers(out: Path) -> None:
    """What exports into `out` that were killed left beside it (.tmp-<name>-<pid>, and its
    .stage folder): removed when that process is gone."""
    prefix = f"{gguf.TEMP_PREFIX}{out.name}-"
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
    tmp = out.parent / f"{gguf.TEMP_PREFIX}{out.name}-{os.getpid()}"
    try:
        convert(tools, merged, tmp, quant)
        print(f"[dragonfarm] {quant} GGUF written ({tmp.stat().st_size} bytes); checking it",
              flush=True)  # fmt: skip
        record = check_gguf(merged, tmp, tools, run_dir, job_dir)
        record = stamp({**record, "gguf": str(out), "requested_quant": quant}, tmp)
        if job_dir is not None:  # readable even when the check fails
            files.write_json(job_dir / gguf.CHECK_SUFFIX.lstrip("."), record)
        if not record["passed"]:
            raise RuntimeError(gguf.difference_text(record) + f" Nothing was written to {out}.")
        files.write_json(gguf.check_path(out), record)
        os.replace(tmp, out)  # the check record first: the file never stands unchecked
    finally:
        tmp.unlink(missing_ok=True)
    print(f"[dragonfarm] exported {out}: {gguf.describe_check(record)}", flush=True)
    return record


def check_run(
    merged: Path, gguf_file: Path, tools: LlamaCpp, run_dir: Path | None = None,
    job_dir: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Check an existing GGUF; the record goes beside it (and to the job folder)."""
    record = stamp(check_gguf(merged, gguf_file, tools, run_dir, job_dir), gguf_file)
    if job_dir is not None:
        files.write_json(job_dir / gguf.CHECK_SUFFIX.lstrip("."), record)
    files.write_json(gguf.check_path(gguf_file), record)
    print(f"[dragonfarm] checked {gguf_file}: {gguf.describe_check(record)}", flush=True)
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
