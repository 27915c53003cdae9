"""Check an imported LoRA adapter against the run's base model, without loading either.

    problem = adapter_problem(Path("tmp/adapter"), base_config, lora_r=16)   # None when it fits

The weights are read only as a safetensors header, parsed here from the documented format
(8 bytes little-endian header length, a JSON header of name -> dtype, shape, data_offsets, then
the raw data): the `safetensors` package's Python side hands tensors to numpy or torch, which
the app process must not import (torch) or need (numpy) to look at shapes, and parsing the
header ourselves also lets every inconsistency (offsets past the end, overlapping or missing
bytes, sizes that disagree with the shape) be refused in a sentence. Then each LoRA matrix's
shape is compared with what the base model's config.json says its layer has.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}  # fmt: skip
# peft's saved key: ...layers.<n>.<module path>.<leaf>.lora_A.weight (lora_B: out x r).
LORA_KEY = re.compile(r"\.layers\.(\d+)\..*?([A-Za-z0-9_]+)\.lora_(A|B)\.weight$")


class AdapterError(ValueError):
    """An adapter file that is not what a LoRA adapter of this base model looks like."""


def read_header(path: Path) -> dict[str, dict[str, Any]]:
    """name -> {dtype, shape, data_offsets} of a safetensors file, every entry checked."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise AdapterError(f"{path.name} is too short to be a safetensors file.")
        length = int.from_bytes(head, "little")
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise AdapterError(f"{path.name} is not a safetensors file (its header length "
                               f"{length} does not fit the file of {size} bytes).")  # fmt: skip
        try:
            header = json.loads(f.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise AdapterError(f"{path.name} is not a safetensors file: its header is not "
                               f"JSON ({e}).") from e  # fmt: skip
    if not isinstance(header, dict):
        raise AdapterError(f"{path.name}'s safetensors header is not a JSON object.")
    header.pop("__metadata__", None)
    _check_offsets(path.name, header, size - 8 - length)
    return header


def _entry_ok(entry: Any) -> bool:
    """An entry with a known dtype, a shape of whole numbers >= 0 and two ordered offsets."""
    if not isinstance(entry, dict) or entry.get("dtype") not in DTYPE_BYTES:
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    return (
        isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
        and isinstance(offsets, list) and len(offsets) == 2
        and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]
    )  # fmt: skip


def _check_offsets(name: str, header: dict[str, Any], data_size: int) -> None:
    spans = []
    for key, entry in header.items():
        if not _entry_ok(entry):
            raise AdapterError(f"{name}: tensor {key!r:.80} has no valid dtype, shape and offsets.")
        begin, stop = entry["data_offsets"]
        if stop - begin != math.prod(entry["shape"]) * DTYPE_BYTES[entry["dtype"]]:
            raise AdapterError(f"{name}: tensor {key!r:.80}'s bytes do not match its shape.")
        spans.append((begin, stop))
    end = 0
    for begin, stop in sorted(spans):
        if begin != end:
            raise AdapterError(f"{name}: its tensors overlap or leave gaps in the data.")
        end = stop
    if end != data_size:
        raise AdapterError(f"{name}: its tensors cover {end} bytes of data, the file holds "
                           f"{data_size}.")  # fmt: skip


def _dims(base: dict[str, Any]) -> tuple[int, dict[str, tuple[int, int]]]:
    """(layers, leaf module -> (in, out) features) for the usual decoder architectures."""
    text = {**base, **(base.get("text_config") or {})}
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1:
        return int(text.get("num_hidden_layers") or 0), {}
    kv = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    inter = text.get("intermediate_size") or 0
    q, k = heads * head_dim, kv * head_dim
    return int(text.get("num_hidden_layers") or 0), {
        "q_proj": (hidden, q), "k_proj": (hidden, k), "v_proj": (hidden, k), "o_proj": (q, hidden),
        "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden),
    }  # fmt: skip


def _matrix_problem(key: str, shape: list[int], r: int | None, layers: int,
                    dims: dict[str, tuple[int, int]]) -> str | None:  # fmt: skip
    match = LORA_KEY.search(key)
    if match is None:
        return None
    layer, leaf, side = int(match.group(1)), match.group(2), match.group(3)
    if layers and layer >= layers:
        return f"{key} is for layer {layer}, and the base model has {layers} layers"
    if len(shape) != 2:
        return f"{key} has shape {shape}, not a matrix"
    rank = shape[0] if side == "A" else shape[1]
    if r is not None and rank != r:
        return f"{key} has rank {rank}, and the run trains rank {r}"
    if leaf in dims:
        features = dims[leaf][0 if side == "A" else 1]  # A: r x in, B: out x r
        other = shape[1] if side == "A" else shape[0]
        if other != features:
            which = "in" if side == "A" else "out"
            return f"{key} has {other} {which}-features, and the base model's {leaf} has {features}"
    return None


def adapter_problem(folder: Path, base_config: dict[str, Any], lora_r: int) -> str | None:
    """What makes `folder` not an adapter of this base model, or None when it fits."""
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    if not isinstance(config, dict) or config.get("r") != lora_r:
        got = config.get("r") if isinstance(config, dict) else None
        return f"its adapter_config.json has rank {got!r}, and the run trains rank {lora_r}"
    # A rank_pattern gives some modules their own rank: then only the features are compared.
    r = None if config.get("rank_pattern") else lora_r
    header = read_header(folder / "adapter_model.safetensors")
    layers, dims = _dims(base_config)
    matched = 0
    for key, entry in header.items():
        matched += LORA_KEY.search(key) is not None
        problem = _matrix_problem(key, entry["shape"], r, layers, dims)
        if problem:
            return problem
    if not matched:
        return "its adapter_model.safetensors holds no LoRA matrices of the model's layers"
    return None
