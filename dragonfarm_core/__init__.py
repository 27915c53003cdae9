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

from dragonfarm_core.batches.jobs import LLMJob, start_judge
from dragonfarm_core.batches.synthesis import start_synthesis
from dragonfarm_core.bundles.bundle import bundle, pack_run
from dragonfarm_core.bundles.remote import python_requirements, remote, remote_providers
from dragonfarm_core.bundles.results_check import ResultsRefused
from dragonfarm_core.bundles.results_import import import_results
from dragonfarm_core.codegen.run import code
from dragonfarm_core.conversation.chat import Chat, chat, chat_load
from dragonfarm_core.conversation.feedback_store import feedback
from dragonfarm_core.conversation.generation import generate
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
from dragonfarm_core.evaluation.compare import compare
from dragonfarm_core.evaluation.evaluate import EvaluationJob, evaluate, start_evaluation
from dragonfarm_core.export.gguf import GGUFJob, check_export, export_gguf, start_export_gguf
from dragonfarm_core.export.jobs import ExportJob
from dragonfarm_core.export.merge import MergeJob, merge, start_merge
from dragonfarm_core.export.publishing import publish, start_publish
from dragonfarm_core.inference import (
    Backend,
    backend,
    backend_llamacpp,
    backend_local,
    backend_ollama,
    backend_server,
    set_backend,
    worker_stop,
)
from dragonfarm_core.judging.agreement import Agreement, judge_agreement, last_agreement
from dragonfarm_core.judging.inputs import prompts
from dragonfarm_core.judging.judgement import Judgement, judge, read_judgement
from dragonfarm_core.lineage.graph import Lineage
from dragonfarm_core.lineage.lineage import lineage
from dragonfarm_core.llm import (
    LLM,
    Reply,
    judge_anthropic,
    judge_chatlas,
    judge_local,
    judge_openai,
    llm_anthropic,
    llm_chatlas,
    llm_local,
    llm_openai,
)
from dragonfarm_core.memory_estimate import Estimate, PreflightError, preflight
from dragonfarm_core.method_args import DpoArgs, GrpoArgs, PreferenceArgs
from dragonfarm_core.models import (
    BUNDLED_MODEL_ID,
    ModelError,
    ResolvedModel,
    presets,
    resolve_model,
)
from dragonfarm_core.pipelines.chain import PipelineError
from dragonfarm_core.pipelines.pipeline import (
    Pipeline,
    open_pipeline,
    pipeline,
    pipeline_cancel,
    pipeline_status,
    resume_pipeline,
)
from dragonfarm_core.pipelines.steps import steps
from dragonfarm_core.recommended import Recommendation, recommended
from dragonfarm_core.rewards import Reward, RewardError, reward
from dragonfarm_core.rewards.task_metrics import metric_regex, metrics
from dragonfarm_core.rundir.location import runs_dir, set_runs_dir
from dragonfarm_core.rundir.run import Run, RunFailedError, open_run
from dragonfarm_core.rundir.store import (
    archive_run,
    archived_runs,
    delete_run,
    runs,
    unarchive_run,
)
from dragonfarm_core.serve.ollama import serve_ollama, start_serve_ollama
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from dragonfarm_core.spec import RunSpec
from dragonfarm_core.sweeps.space import SweepError
from dragonfarm_core.sweeps.sweep import (
    Sweep,
    list_sweeps,
    open_sweep,
    resume_sweep,
    sweep,
    sweep_cancel,
    sweep_status,
)
from dragonfarm_core.synthesis.files import open_synthesized
from dragonfarm_core.synthesis.synthesize import (
    SynthesisError,
    SynthesizedDataset,
    synthesize,
    synthesize_pairs,
)
from dragonfarm_core.training.preference import prefer
from dragonfarm_core.training.reinforcement import reinforce, test_rewards
from dragonfarm_core.training.train import (
    cancel,
    logs,
    progress,
    resume,
    start,
    status,
    train,
    wait,
)
from dragonfarm_core.training.triage import Fix, Triage, retry, triage

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
    "LLM",
    "LLMJob",
    "Lineage",
    "Agreement",
    "Backend",
    "Chat",
    "DataReport",
    "Dataset",
    "DatasetError",
    "DatasetWarning",
    "DpoArgs",
    "EvaluationJob",
    "ExportJob",
    "GGUFJob",
    "GrpoArgs",
    "Hardware",
    "Judgement",
    "Lora",
    "MergeJob",
    "ModelError",
    "Pipeline",
    "PipelineError",
    "PreferenceArgs",
    "Reply",
    "Reward",
    "ResolvedModel",
    "ResultsRefused",
    "RewardError",
    "Run",
    "RunFailedError",
    "RunSpec",
    "SettingsError",
    "SynthesisError",
    "SynthesizedDataset",
    "TrainArgs",
    "app",
    "archive_run",
    "archived_runs",
    "backend",
    "backend_llamacpp",
    "backend_local",
    "backend_ollama",
    "backend_server",
    "bundle",
    "cancel",
    "chat",
    "chat_load",
    "check",
    "check_export",
    "code",
    "compare",
    "conversations",
    "dataset",
    "delete_run",
    "evaluate",
    "example_data",
    "export_gguf",
    "feedback",
    "generate",
    "import_results",
    "judge",
    "judge_agreement",
    "judge_anthropic",
    "judge_chatlas",
    "judge_local",
    "judge_openai",
    "last_agreement",
    "lineage",
    "llm_anthropic",
    "llm_chatlas",
    "llm_local",
    "llm_openai",
    "logs",
    "merge",
    "metric_regex",
    "metrics",
    "open_run",
    "pack_run",
    "open_synthesized",
    "open_pipeline",
    "pipeline",
    "pipeline_cancel",
    "pipeline_status",
    "prefer",
    "prompts",
    "publish",
    "python_requirements",
    "presets",
    "recommended",
    "Recommendation",
    "retry",
    "triage",
    "Triage",
    "Fix",
    "preflight",
    "Estimate",
    "PreflightError",
    "progress",
    "read_judgement",
    "reinforce",
    "remote",
    "remote_providers",
    "reward",
    "resolve_model",
    "resume",
    "resume_pipeline",
    "resume_sweep",
    "runs",
    "runs_dir",
    "set_backend",
    "serve_ollama",
    "set_runs_dir",
    "start",
    "start_evaluation",
    "start_export_gguf",
    "start_merge",
    "start_publish",
    "start_serve_ollama",
    "start_judge",
    "start_synthesis",
    "status",
    "steps",
    "sweep",
    "sweep_cancel",
    "sweep_status",
    "Sweep",
    "SweepError",
    "list_sweeps",
    "open_sweep",
    "synthesize",
    "synthesize_pairs",
    "test_rewards",
    "train",
    "unarchive_run",
    "wait",
    "worker_stop",
]
