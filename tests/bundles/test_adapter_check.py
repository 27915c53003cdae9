"""adapter_check reads safetensors headers itself: each malformed header is refused by name."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from results_fakes import safetensors_bytes

from dragonfarm_core.bundles.adapter_check import AdapterError, read_header


def _file(tmp_path: Path, header: object, data: bytes) -> Path:
    text = json.dumps(header).encode()
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _t(begin: int, end: int, shape: list[int], dtype: str = "F32") -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


@pytest.mark.parametrize(
    ("header", "data", "reason"),
    [
        ({"a": _t(0, 8, [2]), "b": _t(4, 12, [2])}, bytes(12), "overlap or leave gaps"),
        ({"a": _t(0, 8, [2]), "b": _t(12, 20, [2])}, bytes(20), "overlap or leave gaps"),
        ({"a": _t(0, 8, [3])}, bytes(8), "do not match its shape"),
        ({"a": _t(0, 8, [2], "PICKLE")}, bytes(8), "no valid dtype"),
        ({"a": _t(8, 0, [2])}, bytes(8), "no valid dtype"),
        ({"a": _t(0, 8, [2])}, bytes(16), "cover 8 bytes of data, the file holds 16"),
        ([1, 2], b"", "not a JSON object"),
    ],
    ids=["overlap", "gap", "size vs shape", "dtype", "reversed offsets", "trailing", "list"],
)
def test_a_malformed_header_is_refused(tmp_path, header, data, reason):
    with pytest.raises(AdapterError, match=reason):
        read_header(_file(tmp_path, header, data))


def test_a_header_longer_than_the_file_and_a_stub_are_refused(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(AdapterError, match="does not fit"):
        read_header(path)
    path.write_bytes(b"\x80\x04")
    with pytest.raises(AdapterError, match="too short"):
        read_header(path)


def test_a_well_formed_file_reads_back(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(safetensors_bytes({"x.lora_A.weight": [4, 8], "x.lora_B.weight": [8, 4]}))
    assert {k: v["shape"] for k, v in read_header(path).items()} == {
        "x.lora_A.weight": [4, 8], "x.lora_B.weight": [8, 4]}  # fmt: skip
