"""Run directories and a stand-in backend for the judge tests (test_judge_run, test_llm_jobs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dragonfarm_core as dragon
from dragonfarm_core.inference.protocol import ModelSpec, Sampling
from dragonfarm_core.rundir import files


class TwoFacedBackend:
    """A local-style backend: the adapter answers "tuned: <prompt>", the base "base: <prompt>";
    a prompt containing "SILENT" gets an empty reply from the adapter."""

    name = "local"
    model = None

    def __init__(self) -> None:
        self.calls: list[tuple[bool, list[list[dict]], Sampling]] = []

    def chat(self, model, messages, sampling, on_token=None):
        return self.generate(model, [messages], sampling)[0]

    def generate(self, model: ModelSpec | None, conversations, sampling):
        tuned = bool(model and model.use_adapter and model.adapter)
        self.calls.append((tuned, conversations, sampling))
        out = []
        for conv in conversations:
            last = conv[-1]["content"]
            if tuned and "SILENT" in last:
                out.append("")
            else:
                out.append(("tuned: " if tuned else "base: ") + last)
        return out


def make_run(root: Path, name: str, eval_rows: list[dict], train_rows: list[dict] | None = None,
             method: str = "sft", state: str = "succeeded") -> dragon.Run:  # fmt: skip
    """A finished run directory: config, status, adapter and data files."""
    base = root.parent / "base-model"
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text(json.dumps({"model_type": "llama"}))
    run_dir = root / name
    files.write_config(run_dir, {
        "schema": 1, "id": name, "name": name, "method": method,
        "model": {"name": "m", "base": str(base), "adapters": []}, "continued_from": None,
        "dataset": {}, "data": {"kind": "messages", "n_train": 0, "n_eval": len(eval_rows)},
        "lora": {}, "args": {}, "hardware": {"device": "cpu"}, "n_samples": 2, "method_args": {},
    })  # fmt: skip
    files.write_status(run_dir, {"state": state, "step": 4})
    files.write_json(run_dir / "adapter" / "adapter_config.json", {"fake": True})
    files.write_jsonl(files.data_path(run_dir, "eval"), eval_rows)
    files.write_jsonl(files.data_path(run_dir, "train"), train_rows or [])
    return dragon.open_run(run_dir)


def sft_row(i: int, system: str | None = None) -> dict:
    messages = [{"role": "system", "content": system}] if system else []
    return {"messages": [*messages, {"role": "user", "content": f"question {i}"},
                         {"role": "assistant", "content": f"answer {i}"}]}  # fmt: skip


def pair_row(i: int) -> dict:
    return {"prompt": [{"role": "user", "content": f"pair question {i}"}],
            "chosen": [{"role": "assistant", "content": f"good {i}"}],
            "rejected": [{"role": "assistant", "content": f"bad {i}"}]}  # fmt: skip


def reply_of(question: str, label: str) -> str:
    return re.search(rf"\[{label}\]\n(.*?)\n", question, re.S).group(1)
