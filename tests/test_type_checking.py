"""mypy runs wherever the tests run: in the README's test command (so in CI) and in pre-commit,
on the packages pyproject.toml names. (mypy itself is the test of the types.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_checks_the_engine_the_app_and_its_entry_point() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["mypy"]
    assert set(config["files"]) == {"dragonfarm_core", "ui", "app.py"}
    assert "ignore_missing_imports" not in config, "ignore only the untyped libraries, per module"


def test_the_test_command_type_checks_before_the_tests() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text("utf-8")
    assert "python -m mypy" in script
    assert script.index("python -m mypy") < script.index("python -m pytest")


def test_pre_commit_runs_mypy_on_the_configured_packages() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text("utf-8"))
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert hooks["mypy"]["entry"] == "mypy" and hooks["mypy"]["pass_filenames"] is False


def test_the_test_command_checks_the_import_layers_then_runs_every_tier() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text("utf-8")
    assert script.index("lint-imports") < script.index("python -m pytest")
    assert 'python -m pytest -m ""' in script  # pyproject's addopts leave slow/browser/gguf out
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    kinds = {c["type"] for c in config["tool"]["importlinter"]["contracts"]}
    assert {"layers", "protected", "forbidden", "acyclic_siblings"} <= kinds
    assert (
        "not slow and not browser and not gguf"
        in config["tool"]["pytest"]["ini_options"]["addopts"]
    )


def test_pre_commit_runs_the_import_layers() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text("utf-8"))
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert hooks["lint-imports"]["entry"] == "lint-imports"
