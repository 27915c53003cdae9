"""The feedback loop as files: data -> SFT run -> chat feedback -> pairs -> DPO run -> merged
folder -> GGUF, made through the public API in a runs folder where launching is stubbed (`finish`
leaves each run as a trainer would, succeeded with an adapter), so the whole chain is written in
well under a second. tests/lineage/conftest.py's `chain` and the browser test build it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import dragonfarm_core as dragon
from dragonfarm_core.conversation.feedback_store import record_event
from dragonfarm_core.export import merge as export
from dragonfarm_core.rundir import files


def finish(run: dragon.Run) -> dragon.Run:
    """A created run made to look as its trainer leaves it: succeeded, with an adapter."""
    files.adapter_dir(run.dir).mkdir()
    (files.adapter_dir(run.dir) / "adapter_config.json").write_text("{}")
    files.update_status(run.dir, state="succeeded")
    return run


def merged(run: dragon.Run) -> Path:
    """A complete merge in <run>/merged/ (the marker written by export.finish), and its GGUF
    beside it as export_gguf names it."""
    dest = export.default_out_dir(run.dir)
    tmp = export.temp_dir(dest, "t")
    tmp.mkdir(parents=True)
    (tmp / "model.safetensors").write_bytes(b"weights")
    files.write_json(tmp / export.CHECK_FILE, {"identical": True, "prompts": 2})
    path = export.finish(tmp, dest)
    (run.dir / "merged-q8_0.gguf").write_bytes(b"GGUF")
    return path


def rate(runs: Path, run: dragon.Run) -> None:
    """Feedback as the Chat tab records it on `run`: a liked and a disliked reply to one
    question, an edit and a disliked reply to another."""
    q1, q2 = (
        [{"role": "user", "content": "My router blinks red"}],
        [{"role": "user", "content": "Refund please"}],
    )
    on = {"run": str(run.dir), "model": run.name}
    record_event(runs, kind="rating", verdict="up", reply="Restart it.", messages=q1, **on)
    record_event(runs, kind="rating", verdict="down", reply="No idea.", messages=q1, **on)
    record_event(runs, kind="edit", reply="Go away.", edited="Sure, refunded.", messages=q2, **on)
    record_event(runs, kind="rating", verdict="down", reply="Go away.", messages=q2, **on)


@dataclass
class Chain:
    runs: Path
    data: Path
    sft: dragon.Run
    pairs: Path
    dpo: dragon.Run
    merged: Path
    gguf: Path


def build_chain(runs: Path, model_dir: Path, folder: Path) -> Chain:
    """The loop in `runs`, its data file in `folder`; launching must be stubbed."""
    data = folder / "tickets.csv"
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(8)]
    pd.DataFrame(rows).to_csv(data, index=False)
    ds = dragon.dataset(data).map(prompt="question", response="answer")
    sft = finish(dragon.train(ds, str(model_dir), runs_dir=runs))
    rate(runs, sft)
    fb = dragon.feedback(runs, label="round1")
    dpo = finish(dragon.prefer(fb.pairs, sft, runs_dir=runs))
    folder = merged(dpo)
    return Chain(runs, data.resolve(), sft, fb.pairs_path.resolve(), dpo, folder,
                 dpo.dir / "merged-q8_0.gguf")  # fmt: skip
