"""bench/gpu_check.py --smoke: the GPU check's every section, on tiny shapes, through the code a
GPU session runs (on this machine's CPU), so that the check is known to work before a GPU
machine is lent. The figures themselves mean nothing here; that each section produced them, or
said why it could not, is what is checked."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The sections, in the order they run.
SECTIONS = ["check", "sft_bundled", "sft_qwen", "dpo", "grpo", "qlora", "worker", "merge"]


def numbers(value: Any) -> list[float]:
    """Every number in a JSON value."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return []


def errors(value: Any, at: str = "") -> list[str]:
    """Where the JSON records an error."""
    if isinstance(value, dict):
        found = [f"{at}: {value['error']}"] if "error" in value else []
        return found + [e for k, v in value.items() for e in errors(v, f"{at}.{k}")]
    return []


# In the fast tier on purpose, though it takes tens of seconds (issue 42): no GPU session can
# fix a check that rotted since the last one, so plain pytest runs it every time.
def test_smoke_runs_every_section_and_records_figures_or_why_not(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--smoke", "--out", str(out),
         "--work", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    sections = report["sections"]
    assert list(sections) == SECTIONS
    assert errors(sections) == [], done.stderr[-3000:]
    for name, section in sections.items():
        if section["status"] == "skipped":
            assert section["skipped"].strip(), name  # says why
        else:
            assert section["status"] == "ok", name
            assert all(math.isfinite(n) for n in numbers(section)), name
            assert len(numbers(section)) > 2, name
        for field, why in section.get("skipped", {}).items() if section["status"] == "ok" else ():
            assert isinstance(why, str) and why.strip(), (name, field)
    qwen = sections["sft_qwen"]
    for arm in ("ours", "ours_packing", "ours_padding_free", "trl"):
        assert qwen["arms"][arm]["tokens_per_s"] > 0 and qwen["arms"][arm]["eval_loss"] > 0, arm
    assert qwen["arms"]["ours"]["estimate_mib"] > 0 and qwen["tokens_per_s_ratio"] > 0
    on_cpu = report["device"] == "cpu"  # (--smoke takes a GPU where there is one)
    assert not on_cpu or qwen["skipped"]["ours_liger"]  # Triton: a GPU only
    for name in ("dpo", "grpo"):
        assert sections[name]["ratio"] > 0, name
    worker = sections["worker"]
    assert worker["ours_b1"] > 0 and worker["plain_b1"] > 0 and worker["load_s"] > 0
    assert sections["merge"]["identical"] is True
    assert not on_cpu or sections["qlora"]["status"] == "skipped"  # bitsandbytes: a GPU only
    last = done.stdout.strip().splitlines()[-1]
    values = dict(pair.split("=", 1) for pair in last.split())
    assert values["sections"] == str(len(SECTIONS)) and values["merge_identical"] == "True"
    assert float(values["sft_tokens_per_s"]) > 0
