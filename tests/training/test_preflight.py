"""The preflight memory estimate: read from the model's config.json without torch, it refuses a
run that will not fit before anything is written, with changes that would fit, each checked
against the same estimate. (Its error against measured peaks: bench/preflight.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core import memory_estimate as preflight
from dragonfarm_core.models import bundled_model_path
from dragonfarm_core.rundir import files

TICKETS = dict(prompt="{subject}\n\n{body}", response="reply")


def stored_params(folder: Path) -> int:
    """Parameters in a safetensors file, from its header (no torch)."""
    with (folder / "model.safetensors").open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    total = 0
    for name, meta in header.items():
        if name != "__metadata__":
            n = 1
            for d in meta["shape"]:
                n *= d
            total += n
    return total


def spec(**args) -> dragon.RunSpec:
    ds = dragon.dataset(dragon.example_data()).map(**TICKETS)
    return dragon.RunSpec("sft", ds, "dragonfarm/tiny-support", args=dragon.TrainArgs(**args))


def test_the_shape_read_from_config_counts_the_models_parameters():
    shape = preflight.Shape.read(bundled_model_path())
    assert shape is not None and shape.params() == stored_params(bundled_model_path())


def test_the_estimate_grows_with_batch_and_length_and_checkpointing_lowers_it():
    shape = preflight.Shape.read(bundled_model_path())
    assert shape is not None
    base = preflight._settings(spec(batch_size=4, max_seq_len=384), None)
    # On a GPU; on a CPU SFT takes a large batch in row chunks (test_sft_on_a_cpu_...).
    base = {**base, "device": "cuda:0"}
    peak = preflight.estimate_for(shape, base).peak_mib
    assert preflight.estimate_for(shape, {**base, "batch_size": 8}).peak_mib > peak
    assert preflight.estimate_for(shape, {**base, "seq_len": 768}).peak_mib > peak
    assert preflight.estimate_for(shape, {**base, "gradient_checkpointing": True}).peak_mib < peak
    dpo = preflight.estimate_for(shape, {**base, "method": "dpo"}).peak_mib
    assert dpo > peak  # a chosen and a rejected reply per row


def test_the_batch_length_is_the_longest_row_capped_at_max_seq_len():
    rows = spec().dataset.split_records()[0]
    longest = preflight._longest_tokens(rows)
    assert 100 < longest < 400
    assert preflight._settings(spec(max_seq_len=4096), rows)["seq_len"] == longest
    assert preflight._settings(spec(max_seq_len=128), rows)["seq_len"] == 128


@pytest.mark.parametrize("fast_malloc", [None, "libtcmalloc_minimal.so.4"])
def test_a_run_that_does_not_fit_is_refused_with_fixes_that_fit(monkeypatch, tmp_path, fast_malloc):
    # the trainer on glibc's malloc, or on tcmalloc (rundir/allocator.py)
    monkeypatch.setattr(preflight.allocator, "fast_allocator", lambda: fast_malloc)
    big = spec(batch_size=16, grad_accum=1, max_seq_len=1024)
    shape = preflight.Shape.read(bundled_model_path())
    settings = preflight._settings(big, big.dataset.split_records()[0])
    assert settings["fast_malloc"] is bool(fast_malloc)
    needed = preflight.estimate_for(shape, settings).peak_mib
    monkeypatch.setattr(preflight, "available_mib", lambda device: needed * 0.85)
    runs = tmp_path / "runs"
    runs.mkdir()
    with pytest.raises(preflight.PreflightError) as refused:
        dragon.start(big, runs_dir=runs)
    message = str(refused.value)
    assert message.startswith("This run would not fit in memory. Estimated peak memory")
    assert "batch_size=2 with grad_accum=8 (the same rows per step)" in message
    assert not [p for p in runs.iterdir() if files.is_run_dir(p)]  # nothing was written
    est = preflight.estimate_for(shape, settings)
    options = preflight.fix_options(shape, settings, est.available_mib)
    assert not est.fits and len(est.fixes) == len(options) >= 2
    for text, change, peak in options:  # each offered change, applied, fits
        changed = preflight.estimate_for(shape, {**settings, **change})
        assert changed.fits and changed.peak_mib == pytest.approx(peak), text
    on_gpu = {**settings, "device": "cuda:0"}  # its batch whole: checkpointing pays
    gpu_needed = preflight.estimate_for(shape, on_gpu).peak_mib
    offered = [text for text, _, _ in preflight.fix_options(shape, on_gpu, gpu_needed)]
    assert "gradient_checkpointing=True" in offered


def test_when_nothing_is_enough_it_says_so():
    shape = preflight.Shape.read(bundled_model_path())
    settings = preflight._settings(spec(), None)
    est = preflight.Estimate("cpu", 10_000.0, 100.0)
    assert not est.fits and "pick a smaller model" in est.refusal()
    assert preflight._fixes(shape, settings, 1.0) == []


def test_a_model_whose_config_gives_no_sizes_gets_no_estimate(tmp_path: Path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert preflight.Shape.read(folder) is None
    assert preflight.preflight(spec(), model_dir=folder) is None


def test_the_summary_names_the_device_and_the_parts():
    est = preflight.preflight(spec())
    assert est is not None and est.fits and est.device == "cpu"
    text = est.summary()
    assert "available on cpu" in text
    assert all(part in text for part in ("runtime", "weights", "lora", "activations", "logits"))


def test_the_cpu_has_bf16_when_its_flags_say_so(tmp_path: Path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    assert preflight.cpu_has_bf16(str(info))
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    assert not preflight.cpu_has_bf16(str(info))
    info.write_text("flags\t\t: fpu amx_tile amx_bf16\n")
    assert preflight.cpu_has_bf16(str(info))
    assert not preflight.cpu_has_bf16(str(tmp_path / "no-such-file"))  # macOS, Windows


def test_on_a_cpu_auto_keeps_a_large_models_weights_in_bf16_where_the_cpu_has_it(monkeypatch):
    from_ = preflight.CPU_BFLOAT16_FROM
    monkeypatch.setattr(preflight, "cpu_has_bf16", lambda: True)
    assert preflight.cpu_weights_dtype(from_) == "bfloat16"
    assert preflight.cpu_weights_dtype(from_ - 1) == "float32"
    assert preflight.cpu_weights_dtype(None) == "float32"  # size not known
    monkeypatch.setattr(preflight, "cpu_has_bf16", lambda: False)
    assert preflight.cpu_weights_dtype(10 * from_) == "float32"


@pytest.mark.parametrize("has_bf16", [True, False])
def test_the_estimate_counts_the_weights_in_the_dtype_the_trainer_will_pick(monkeypatch, has_bf16):
    monkeypatch.setattr(preflight, "cpu_has_bf16", lambda: has_bf16)
    big = preflight.Shape(576, 1536, 30, 9, 3, 64, 49152, True)  # SmolLM2-135M
    small = preflight.Shape.read(bundled_model_path())
    assert small is not None and small.params() < preflight.CPU_BFLOAT16_FROM <= big.params()
    settings = {**preflight._settings(spec(), None), "device": "cpu", "dtype": "auto"}
    weights = preflight.parts_mib(big, settings)["weights"]
    assert weights == pytest.approx(big.params() * (2 if has_bf16 else 4) / preflight.MIB)
    assert preflight.parts_mib(small, settings)["weights"] == pytest.approx(
        small.params() * 4 / preflight.MIB
    )
    explicit = preflight.parts_mib(big, {**settings, "dtype": "float32"})["weights"]
    assert explicit == pytest.approx(big.params() * 4 / preflight.MIB)


def test_sft_on_a_cpu_counts_the_activations_of_its_largest_row_chunk():
    big = preflight.Shape(576, 1536, 30, 9, 3, 64, 49152, True)  # SmolLM2-135M
    kept = preflight.kept_bytes_per_token(big, 2)  # bfloat16
    # 4 x 215 tokens keep ~590 MB: two chunks of 2 rows (430 tokens), not four of 215.
    assert preflight.cpu_chunk_rows(4, 215, kept) == 2
    assert preflight.cpu_chunk_rows(4, 512, kept) == 1
    assert preflight.cpu_chunk_rows(1, 512, kept) == 1
    small = preflight.Shape.read(bundled_model_path())
    assert preflight.cpu_chunk_rows(4, 200, preflight.kept_bytes_per_token(small, 4)) == 4
    assert preflight.cpu_chunk_rows(8, 759, preflight.kept_bytes_per_token(small, 4)) == 3
    # A shorter batch can stay whole where the longest is split: 4 x 127 tokens would go in
    # chunks under MIN_CHUNK_TOKENS, so it is one chunk of 508 tokens, more than 2 x 215.
    assert preflight.cpu_chunk_rows(4, 127, kept) == 4
    assert preflight.largest_cpu_chunk(4, 215, kept) == 508
    cases = [(4, 215, kept), (2, 256, kept), (4, 512, kept), (16, 900, kept),
             (8, 1024, preflight.kept_bytes_per_token(small, 4))]  # fmt: skip
    for rows, length, per_token in cases:
        every = max(preflight.cpu_chunk_rows(rows, n, per_token) * n for n in range(1, length + 1))
        assert preflight.largest_cpu_chunk(rows, length, per_token) == every
    settings = {**preflight._settings(spec(), None), "device": "cpu", "dtype": "bfloat16",
                "batch_size": 4, "seq_len": 215, "gradient_checkpointing": False}  # fmt: skip
    sft = preflight.parts_mib(big, settings)
    whole = preflight.parts_mib(big, {**settings, "seq_len": 127})
    assert sft["activations"] == pytest.approx(whole["activations"])  # 508 tokens either way
    dpo = preflight.parts_mib(big, {**settings, "method": "dpo", "batch_size": 2})
    assert dpo["activations"] == pytest.approx(sft["activations"] * 4 * 215 / 508)  # whole
    cuda = preflight.parts_mib(big, {**settings, "device": "cuda:0"})
    assert cuda["activations"] > 1.5 * sft["activations"]  # a GPU takes the batch whole
