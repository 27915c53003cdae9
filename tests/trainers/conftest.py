"""Fixtures for trainer tests: the tiny fixture model, the model slow tests use (the bundled
one when present), and a factory of run directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer_fixtures import build_tiny_model, support_conversations

from dragonfarm_core.rundir import files

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def model_dir(tiny_model_dir: Path) -> Path:
    """The bundled model when the repository has it, else the tiny fixture model."""
    return BUNDLED if (BUNDLED / "config.json").is_file() else tiny_model_dir


@pytest.fixture
def make_run(tmp_path: Path):
    """Write a run directory the way the launcher does: config.json, data, status queued."""

    def make(
        model: Path, n_train: int = 48, n_eval: int = 8, name: str = "run", **args: Any
    ) -> Path:
        run_dir = tmp_path / name
        rows = support_conversations(n_train + n_eval, seed=7)
        files.write_jsonl(files.data_path(run_dir, "train"), rows[:n_train])
        files.write_jsonl(files.data_path(run_dir, "eval"), rows[n_train:])
        defaults = {
            "epochs": 1,
            "batch_size": 4,
            "grad_accum": 2,
            "max_seq_len": 256,
            "logging_steps": 1,
            "save_steps": 100,
            "learning_rate": 1e-3,
            # A random-init model never says stop: keep sample generation short.
            "extra": {"sample_max_new_tokens": 24},
        }
        files.write_config(
            run_dir,
            {
                "schema": 1,
                "id": name,
                "name": name,
                "method": "sft",
                "created_at": files.now_iso(),
                "model": {
                    "name": model.name,
                    "base": str(model),
                    "revision": None,
                    "trust_remote_code": False,
                    "adapters": [],
                },
                "continued_from": None,
                "dataset": {},
                "data": {"kind": "messages", "n_train": n_train, "n_eval": n_eval},
                "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "auto"},
                "args": {**defaults, **args},
                "hardware": {"device": "cpu", "dtype": "auto"},
                "n_samples": 3,
                "method_args": {},
            },
        )
        files.write_status(run_dir, {"state": "queued", "queued_at": files.now_iso()})
        return run_dir

    return make
