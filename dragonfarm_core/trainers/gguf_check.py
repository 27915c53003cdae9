"""The template round-trip check of a GGUF against the merged folder it was exported from: the
same conversations rendered by the HF tokenizer's chat template and by llama.cpp from the GGUF's
metadata (through llama-server) must give the same token ids, and greedy decoding the same
first tokens (`gguf_files.agree_tokens`); the record names the first differing token on both
sides. `gguf_run` runs it for an export and for `check_export`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core.export import gguf_files
from dragonfarm_core.llamacpp.location import LlamaCpp
from dragonfarm_core.llamacpp.server import LlamaServer
from dragonfarm_core.rundir import files
from dragonfarm_core.trainers.gguf_convert import THREADS, file_type

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
SERVER_CTX = 2048


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
    need = gguf_files.agree_tokens(quant, CHECK_NEW_TOKENS)
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
    was replaced since is not taken for it, `gguf_files.read_check`)."""
    info = path.stat()
    return {**record, "size_bytes": info.st_size, "mtime_ns": info.st_mtime_ns}
