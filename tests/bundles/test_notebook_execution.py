"""The bundle's notebook, executed here with nbclient on the CPU: it unpacks the bundle,
trains with the bundled dragonfarm_core, and its results zip imports cleanly.

What it cannot do offline here: the install cell (INSTALL=False: the pinned requirements are
already installed), a GPU (the trainer falls back to the CPU, float32), and the provider's
download (neither Colab's files API nor /kaggle/working exist: the zip stays a plain file).
"""

from __future__ import annotations

import pytest
from results_fakes import bundled_run, run_notebook

import dragonfarm_core as dragon

pytestmark = pytest.mark.slow


def test_the_notebook_trains_the_bundle_and_its_results_import(tmp_path):
    args = dragon.TrainArgs(max_steps=2, logging_steps=1, max_seq_len=256,
                            extra={"sample_max_new_tokens": 8})  # fmt: skip
    run = bundled_run(tmp_path / "runs", args=args, n_samples=2)
    results, output = run_notebook(run, tmp_path / "work")
    # The trainer ran the bundled copy of the package, not the one of this checkout.
    assert f"dragonfarm_core: {tmp_path / 'work' / 'dragonfarm_core' / '__init__.py'}" in output
    assert "No GPU found" in output and "The run ended succeeded." in output
    dragon.import_results(run, results)
    status = run.status()
    assert status["state"] == "succeeded" and status["trained_on"] == "remote (cpu)"
    assert len(run.progress()) >= 2
    assert run.dir.joinpath("samples.json").is_file()
    reply = dragon.generate(run, "My thermostat keeps dropping off Wi-Fi.", max_new_tokens=8)
    assert isinstance(reply, str) and reply
