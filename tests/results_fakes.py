"""Bundled runs and results zips for the bundle and import tests, without training anything.

`bundled_run(runs_dir)` bundles the example tickets for the bundled model. `good_results(run)`
is what the notebook would zip for it, with an adapter whose matrices have the shapes a LoRA
of that base model has (zeros: only the header is ever read). `write_zip` writes members as
given, hostile ones included (raw ZipInfo objects keep odd names, modes and flags).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zipfile
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files

LAYERS, HIDDEN, KV, INTER = 6, 256, 128, 704  # assets/models/tiny-support/config.json
MODULES = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.v_proj": (HIDDEN, KV),
           "mlp.down_proj": (INTER, HIDDEN)}  # fmt: skip


def bundled_run(runs_dir: Path, **kwargs: Any) -> dragon.Run:
    ds = dragon.dataset(dragon.example_data()).map(prompt="{subject}\n\n{body}", response="reply")
    kwargs.setdefault("args", dragon.TrainArgs(max_steps=2))
    return dragon.bundle(ds, "dragonfarm/tiny-support", runs_dir=runs_dir, **kwargs)


def safetensors_bytes(shapes: dict[str, list[int]], dtype: str = "F32") -> bytes:
    """A safetensors file of zero tensors with these shapes (4-byte floats)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def adapter_shapes(r: int = 16, layers: int = LAYERS) -> dict[str, list[int]]:
    shapes = {}
    for layer in range(layers):
        for module, (inputs, outputs) in MODULES.items():
            key = f"base_model.model.model.layers.{layer}.{module}"
            shapes[f"{key}.lora_A.weight"] = [r, inputs]
            shapes[f"{key}.lora_B.weight"] = [outputs, r]
    return shapes


def good_results(run: dragon.Run, state: str = "succeeded") -> dict[str, bytes]:
    """The members the notebook zips for `run` after a remote training that ended `state`."""
    status = {"state": state, "started_at": files.now_iso(), "finished_at": files.now_iso(),
              "device": "cuda", "dtype": "bfloat16", "step": 2, "total_steps": 2, "pid": 4242}  # fmt: skip
    rows = [{"step": s, "epoch": s / 2, "loss": 3.0 - s} for s in (1, 2)]
    adapter_config = {"r": 16, "lora_alpha": 32, "peft_type": "LORA",
                      "target_modules": ["q_proj", "v_proj", "down_proj"]}  # fmt: skip
    return {
        "bundle.json": (run.dir / "bundle" / "bundle.json").read_bytes(),
        "status.json": json.dumps(status).encode(),
        "progress.jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode(),
        "train.log": b"Training dragonfarm/tiny-support on cuda (bfloat16)\n",
        "eval.json": json.dumps({"eval_loss": 1.5}).encode(),
        "samples.json": json.dumps([{"prompt": "hi", "reply": "hello"}]).encode(),
        "adapter/adapter_config.json": json.dumps(adapter_config).encode(),
        "adapter/adapter_model.safetensors": safetensors_bytes(adapter_shapes()),
    }


def write_zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]] | dict[str, bytes],
              compression: int = zipfile.ZIP_DEFLATED) -> Path:  # fmt: skip
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in items:
            z.writestr(name, data)
    return path


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` with a hash of its bytes: equal means untouched."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_notebook(run: dragon.Run, work: Path, timeout: int = 900) -> tuple[Path, str]:
    """Execute the run's notebook here with nbclient, on the CPU, as a GPU machine would run it
    but with INSTALL=False (the packages installed here); returns the results zip it made and
    the text of every cell's output."""
    import nbformat
    from nbclient import NotebookClient

    zip_path, notebook_path = run.dir / "bundle" / f"dragonfarm-{run.id}.zip", None
    notebook_path = zip_path.with_suffix(".ipynb")
    notebook = nbformat.read(notebook_path, as_version=4)
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source += f"\nBUNDLE = {str(zip_path)!r}\nWORK = {str(work)!r}\nINSTALL = False\n"
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(work.parent)}})  # fmt: skip
    client.execute()
    text = "\n".join(str(out.get("text", "")) for cell in notebook.cells
                     for out in cell.get("outputs", []))  # fmt: skip
    return work / f"dragonfarm-results-{run.id}.zip", text
