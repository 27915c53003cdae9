"""Train a run on someone else's GPU: the providers, `remote()`, and `python_requirements()`.

    run = dragon.bundle(ds, "Qwen/Qwen2.5-0.5B-Instruct")     # state "bundled", nothing trained
    info = dragon.remote(run, "colab")                        # steps, link, the bundle's path
    # ... upload, Run all, download dragonfarm-results-<run id>.zip ...
    dragon.import_results(run, "~/Downloads/dragonfarm-results-<run id>.zip")

remote() only tells and opens: the provider's page in the browser (when asked, or in an
interactive session) and the steps to follow there. Nothing is uploaded from here: the person
uploads the bundle and the notebook themselves, so no provider credentials are ever needed.
"""

from __future__ import annotations

import os
import sys
import webbrowser
from importlib import metadata
from typing import Any

import pandas as pd

from dragonfarm_core.rundir.run import Run, open_run

# What `python -m dragonfarm_core.trainers` imports on the GPU machine: the trainers' own
# libraries, and what importing dragonfarm_core itself pulls in (its __init__ is the public API).
TRAINER_PACKAGES = (
    "torch", "transformers", "peft", "trl", "accelerate", "safetensors", "tokenizers",
    "sentencepiece", "protobuf", "huggingface-hub", "tqdm", "pandas", "numpy", "pyarrow",
    "psutil", "rapidfuzz", "jinja2",
)  # fmt: skip
PYTHON_VERSION = ">=3.11"

PROVIDERS: tuple[dict[str, str], ...] = (
    {"provider": "colab", "name": "Google Colab", "cost": "free tier (T4 GPU), paid tiers",
     "opens": "Colab's start page, to upload the notebook",
     "url": "https://colab.research.google.com/"},
    {"provider": "kaggle", "name": "Kaggle", "cost": "free tier (about 30 GPU hours a week)",
     "opens": "a new Kaggle notebook, to import the notebook into",
     "url": "https://www.kaggle.com/code/new"},
    {"provider": "lightning", "name": "Lightning AI", "cost": "free monthly credits",
     "opens": "Lightning AI's Studios, to start one with a GPU",
     "url": "https://lightning.ai/studios"},
    {"provider": "runpod", "name": "RunPod", "cost": "pay per hour",
     "opens": "RunPod's console, to deploy a GPU pod with Jupyter",
     "url": "https://www.runpod.io/console/pods"},
)  # fmt: skip

# Provider-specific steps; {zip} and {notebook} are the two files' names.
_STEPS: dict[str, tuple[str, ...]] = {
    "colab": (
        "Open Colab and upload the notebook {notebook} (File > Upload notebook).",
        "Pick a GPU: Runtime > Change runtime type > T4 GPU (or better).",
        "Upload {zip} in the Files panel on the left (it lands in /content).",
        "Run all (Runtime > Run all). The results zip downloads at the end.",
    ),
    "kaggle": (
        "Create a notebook, then File > Import notebook and choose {notebook}.",
        "Settings: Accelerator > GPU T4 x2 (or P100), and Internet on.",
        "Add data > Upload: upload {zip} as a dataset (it appears under /kaggle/input).",
        "Run all. The results zip is saved in /kaggle/working: download it from Output.",
    ),
    "lightning": (
        "Start a Studio and switch its machine to a GPU.",
        "Upload {notebook} and {zip} into the Studio's folder.",
        "Open {notebook} and run all cells.",
        "Download the results zip from the Studio's file browser.",
    ),
    "runpod": (
        "Deploy a GPU pod from a PyTorch template (it has Jupyter) and connect to Jupyter.",
        "Upload {notebook} and {zip} into /workspace.",
        "Open {notebook} and run all cells.",
        "Download the results zip from Jupyter's file browser, then stop the pod (it bills "
        "by the hour).",
    ),
}
_IMPORT_STEP = "Back here: dragon.import_results(run, '<the downloaded results zip>'), or Import."


def _pin(package: str) -> str:
    """`package==version` as installed here, without a local build label (+cpu): the GPU
    machine gets the same release, built for its CUDA."""
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError as e:
        raise RuntimeError(
            f"{package} is not installed in this Python, so its version cannot be pinned for "
            "the GPU machine; install the project's requirements.txt first."
        ) from e
    return f"{package}=={version.split('+')[0]}"


def python_requirements() -> dict[str, Any]:
    """What the trainer needs: `packages` (pip requirement strings, pinned to this install's
    versions, so the remote trainer runs the library versions this code was tested with) and
    `python_version`."""
    return {"packages": [_pin(p) for p in TRAINER_PACKAGES], "python_version": PYTHON_VERSION}


def remote_providers() -> pd.DataFrame:
    """One row per provider: provider (the id to pass to remote()), name, cost, opens."""
    return pd.DataFrame([{k: p[k] for k in ("provider", "name", "cost", "opens")}
                         for p in PROVIDERS])  # fmt: skip


def _provider(provider: str) -> dict[str, str]:
    for row in PROVIDERS:
        if row["provider"] == provider:
            return row
    known = ", ".join(repr(p["provider"]) for p in PROVIDERS)
    raise ValueError(f"provider={provider!r} is not one of {known}.")


def _interactive() -> bool:
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def remote(
    run: Run | str | os.PathLike[str], provider: str = "colab", open: bool | None = None
) -> dict[str, Any]:
    """The steps to train `run` on `provider` ("colab", "kaggle", "lightning" or "runpod").

    A run not bundled yet (failed here for lack of memory, say) is bundled first, as it is.
    Returns provider, url, bundle (the zip's path), notebook (its path) and steps. Opens the
    provider's page in the browser when `open` is True, or when None in an interactive session.
    """
    from dragonfarm_core.bundles.archive import bundle_paths
    from dragonfarm_core.bundles.bundle import pack_run

    row = _provider(provider)
    run = open_run(run)
    if run.state != "bundled" or not bundle_paths(run.dir)[0].is_file():
        pack_run(run)
    zip_path, notebook = bundle_paths(run.dir)
    names = {"zip": zip_path.name, "notebook": notebook.name}
    steps = [s.format(**names) for s in _STEPS[provider]] + [_IMPORT_STEP]
    if open is None:
        open = _interactive()
    if open:
        webbrowser.open(row["url"])
    return {"provider": provider, "url": row["url"], "bundle": str(zip_path),
            "notebook": str(notebook), "steps": steps}  # fmt: skip
