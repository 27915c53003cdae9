"""Which model to train: the presets table, the bundled offline model, and model resolution.

`resolve_model` turns what a person typed (a preset or Hub id, a local folder, the bundled
model) into a local folder the trainer and the worker load without touching the network. Hub
downloads go through huggingface_hub with its progress bar; when the Hub cannot be reached the
error names the model and offers the bundled model or a local folder. No torch here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

BUNDLED_MODEL_ID = "dragonfarm/tiny-support"
BUNDLED_ALIASES = frozenset({BUNDLED_MODEL_ID, "bundled", "tiny-support"})

# The manual's table of recommended models, kept as data, plus the bundled model.
PRESETS: tuple[dict[str, object], ...] = (
    {
        "id": BUNDLED_MODEL_ID,
        "params": "6M",
        "license": "Apache 2.0",
        "gated": False,
        "rank": 0,
        "min_vram_gb": 0.0,
        "notes": "Bundled with dragonfarm, works offline. A toy support model for demos and tests; "
        "trains on a CPU in minutes.",
    },
    {
        "id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "params": "135M",
        "license": "Apache 2.0",
        "gated": False,
        "rank": 1,
        "min_vram_gb": 2.0,
        "notes": "Smallest real model; 2 GB, or CPU.",
    },
    {
        "id": "HuggingFaceTB/SmolLM2-360M-Instruct",
        "params": "360M",
        "license": "Apache 2.0",
        "gated": False,
        "rank": 2,
        "min_vram_gb": 3.0,
        "notes": "Good CPU-friendly step up.",
    },
    {
        "id": "Qwen/Qwen2.5-0.5B-Instruct",
        "params": "0.5B",
        "license": "Apache 2.0",
        "gated": False,
        "rank": 3,
        "min_vram_gb": 3.0,
        "notes": "Strong for its size; multilingual.",
    },
    {
        "id": "google/gemma-3-1b-it",
        "params": "1B",
        "license": "Gemma",
        "gated": True,
        "rank": 4,
        "min_vram_gb": 5.0,
        "notes": "Needs a token: accept the license on the Hub, set HF_TOKEN.",
    },
    {
        "id": "meta-llama/Llama-3.2-1B-Instruct",
        "params": "1.2B",
        "license": "Llama 3.2",
        "gated": True,
        "rank": 5,
        "min_vram_gb": 5.0,
        "notes": "Needs a token: accept the license on the Hub, set HF_TOKEN.",
    },
    {
        "id": "Qwen/Qwen2.5-1.5B-Instruct",
        "params": "1.5B",
        "license": "Apache 2.0",
        "gated": False,
        "rank": 6,
        "min_vram_gb": 7.0,
        "notes": "Best quality in the table.",
    },
    {
        "id": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "params": "1.7B",
        "license": "Apache 2.0",
        "gated": False,
        "rank": 7,
        "min_vram_gb": 8.0,
        "notes": "Largest SmolLM2.",
    },
)


class ModelError(ValueError):
    """A model could not be found, read or downloaded."""


# What a local model folder must hold, as the messages that refuse one say it.
MODEL_FOLDER_FILES = (
    "config.json, the weights (*.safetensors) and the tokenizer files (tokenizer.json or "
    "tokenizer.model, with tokenizer_config.json)"
)


@dataclass(frozen=True)
class ResolvedModel:
    """A model as the person named it, and the local folder that holds it."""

    name: str
    base: str
    revision: str | None = None

    @classmethod
    def bundled(cls) -> ResolvedModel:
        """The bundled model, its folder not checked (`resolve_model` checks it): the app
        starts with it even before `scripts/build_bundled_model.py` has built the weights."""
        return cls(BUNDLED_MODEL_ID, str(bundled_model_path()), None)

    @property
    def is_bundled(self) -> bool:
        """Whether this is the bundled model (any of its names)."""
        return is_bundled(self.name)


def presets() -> pd.DataFrame:
    """The recommended models, the bundled one first, each with the SFT settings `train()`
    uses for it when none are given (learning_rate, epochs, lora_r, max_seq_len)."""
    from dragonfarm_core.recommended import preset_columns  # it reads this module's table

    return pd.DataFrame(list(PRESETS)).assign(**preset_columns())


def bundled_model_path() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / "models" / "tiny-support"


def is_bundled(name: str) -> bool:
    return name.strip() in BUNDLED_ALIASES


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts) and " " not in name


def resolve_model(model: str, revision: str | None = None) -> ResolvedModel:
    """A local folder for `model`: the bundled model, a folder, or a Hub id (downloaded).

    >>> resolve_model("bundled").name
    'dragonfarm/tiny-support'
    """
    if not isinstance(model, str) or not model.strip():
        raise ModelError(
            "No model given: pass a preset or Hub id, a local folder, or "
            f"{BUNDLED_MODEL_ID!r} for the bundled model."
        )
    model = model.strip()
    if is_bundled(model):
        path = bundled_model_path()
        if not (path / "config.json").is_file():
            raise ModelError(
                f"The bundled model is missing from {path}; rebuild it with "
                "`python scripts/build_bundled_model.py`."
            )
        return ResolvedModel.bundled()
    local = Path(model).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelError(
                f"{local} is a file, not a model folder or a Hugging Face model id (owner/name). "
                f"A model folder holds {MODEL_FOLDER_FILES}; pass that folder, a Hub id, or "
                f"{BUNDLED_MODEL_ID!r} for the bundled model."
            )
        if not (local / "config.json").is_file():
            raise ModelError(
                f"{local} is a folder but not a model: it has no config.json. A model folder "
                f"holds {MODEL_FOLDER_FILES}; point at the folder that holds them."
            )
        return ResolvedModel(model, str(local.resolve()), revision)
    if not _looks_like_hub_id(model):
        raise ModelError(
            f"{model!r} is neither a local folder nor a Hugging Face model id "
            "(owner/name). Check the spelling, or use the bundled model "
            f"{BUNDLED_MODEL_ID!r}."
        )
    return ResolvedModel(model, _download(model, revision), revision)


def _download(model: str, revision: str | None) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py"]
    try:
        return snapshot_download(model, revision=revision, allow_patterns=patterns)
    except GatedRepoError as e:
        raise ModelError(
            f"{model} is gated: accept its license on the Hugging Face Hub, then set "
            "HF_TOKEN to a token of the account that accepted it."
        ) from e
    except RevisionNotFoundError as e:
        raise ModelError(
            f"{model} has no revision {revision!r}; check the branch, tag or commit."
        ) from e
    except RepositoryNotFoundError as e:
        raise ModelError(
            f"{model} was not found on the Hugging Face Hub (or it is private and "
            "HF_TOKEN is not set). Check the id."
        ) from e
    except (LocalEntryNotFoundError, OSError, ValueError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub could not be reached"
        raise ModelError(
            f"{model} could not be downloaded: {why} and it is not in the local "
            f"cache. Use the bundled model {BUNDLED_MODEL_ID!r} (works offline), "
            "or a local folder that holds the model."
        ) from e
