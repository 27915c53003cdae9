"""dragonfarm: a post-training studio for small language models. The public Python API.

    import dragonfarm_core as dragon
    ds = dragon.dataset(dragon.example_data()).map(prompt="{subject}\\n\\n{body}", response="reply")
    run = dragon.train(ds, "dragonfarm/tiny-support", wait=True)

Names follow the R edition's manual without the `dragon_` prefix. Importing the package imports
the engine (pandas, no torch: training and inference run in subprocesses); only `app`, which
needs Gradio, imports its module when it is called.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dragonfarm_core.codegen import code
from dragonfarm_core.conversation import Chat, chat, chat_load
from dragonfarm_core.data import (
    HOUSE_STYLE_PATTERN,
    DataReport,
    Dataset,
    DatasetError,
    DatasetWarning,
    conversations,
    dataset,
    example_data,
)
from dragonfarm_core.environment import check
from dragonfarm_core.evaluation import evaluate
from dragonfarm_core.feedback_store import feedback
from dragonfarm_core.generation import generate
from dragonfarm_core.inference import (
    backend,
    backend_local,
    backend_ollama,
    backend_server,
    set_backend,
    worker_stop,
)
from dragonfarm_core.models import BUNDLED_MODEL_ID, ModelError, presets, resolve_model
from dragonfarm_core.preference import prefer
from dragonfarm_core.reinforcement import reinforce, test_rewards
from dragonfarm_core.rewards import Reward, RewardError, reward
from dragonfarm_core.rundir import (
    Run,
    RunFailedError,
    archive_run,
    archived_runs,
    delete_run,
    open_run,
    runs_dir,
    set_runs_dir,
    unarchive_run,
)
from dragonfarm_core.rundir.store import runs
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from dragonfarm_core.task_metrics import metric_regex, metrics
from dragonfarm_core.training import cancel, logs, progress, resume, status, train, wait

if TYPE_CHECKING:
    import gradio as gr

__version__ = "0.1.0"


def app(runs_dir: str | os.PathLike[str], profile: str = "local") -> gr.Blocks:
    """The Gradio app as a `gr.Blocks`, keeping its runs (and uploads) in `runs_dir`.

    Gradio is imported here, not with the package: the engine never needs it.
    """
    from ui.layout import build_app

    return build_app(runs_dir, profile)


__all__ = [
    "BUNDLED_MODEL_ID",
    "HOUSE_STYLE_PATTERN",
    "Chat",
    "DataReport",
    "Dataset",
    "DatasetError",
    "DatasetWarning",
    "Hardware",
    "Lora",
    "ModelError",
    "Reward",
    "RewardError",
    "Run",
    "RunFailedError",
    "SettingsError",
    "TrainArgs",
    "app",
    "archive_run",
    "archived_runs",
    "backend",
    "backend_local",
    "backend_ollama",
    "backend_server",
    "cancel",
    "chat",
    "chat_load",
    "check",
    "code",
    "conversations",
    "dataset",
    "delete_run",
    "evaluate",
    "example_data",
    "feedback",
    "generate",
    "logs",
    "metric_regex",
    "metrics",
    "open_run",
    "prefer",
    "presets",
    "progress",
    "reinforce",
    "reward",
    "resolve_model",
    "resume",
    "runs",
    "runs_dir",
    "set_backend",
    "set_runs_dir",
    "status",
    "test_rewards",
    "train",
    "unarchive_run",
    "wait",
    "worker_stop",
]
