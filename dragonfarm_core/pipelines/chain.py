"""How a pipeline's steps chain, and the chains refused before anything runs.

A training step (train, prefer, reinforce) starts from the previous training step's run (the
first from the pipeline's model); a synthesize_pairs step's pairs feed the next prefer step
that has no dataset; judge, evaluate, merge and publish act on the latest run. `check_steps`
walks the steps once, as the runner will, and refuses what cannot work with a message that
names the step (its number and kind): a prefer step with no dataset and no synthesis before
it, a step that needs a run before any training, publish without a repo, a dataset mapped for
another stage, and, for a background pipeline, a judge the job could not rebuild (a chatlas
chat, a Python function) or a metric function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.evaluation.evaluate import named_metrics
from dragonfarm_core.judging.judges import as_judge, describe_judge
from dragonfarm_core.llm.descriptions import llm_from_description
from dragonfarm_core.methods import METHODS
from dragonfarm_core.pipelines.steps import (
    EvaluateStep,
    JudgeStep,
    PreferStep,
    PublishStep,
    ReinforceStep,
    Step,
    SynthesizePairsStep,
    TrainStep,
)
from dragonfarm_core.spec import check_dataset
from dragonfarm_core.synthesis.quality import check_settings

# Steps that act on the latest run, so they need a training step before them.
ON_LATEST_RUN = ("judge", "evaluate", "merge", "publish")


class PipelineError(ValueError):
    """A pipeline that cannot run as declared; the message names the step."""


def label(index: int, step: Step | dict[str, Any]) -> str:
    """How a message names a step: "step 3 (prefer)" (numbered from 1)."""
    kind = step.get("kind") if isinstance(step, dict) else step.kind
    return f"step {index + 1} ({kind})"


@dataclass
class Chain:
    """What flows from step to step while the steps are walked (checked or run)."""

    has_run: bool = False
    pairs_pending: bool = False

    def after(self, step: Step) -> None:
        if step.trains:
            self.has_run = True
        if isinstance(step, SynthesizePairsStep):
            self.pairs_pending = True
        elif isinstance(step, PreferStep) and step.dataset is None:
            self.pairs_pending = False  # these pairs are used up


def step_problems(steps: list[Any] | tuple[Any, ...], background: bool = False) -> list[str | None]:
    """One entry per step: None when it can run where it stands in the chain, else why not
    ("Step 3 (prefer): ..."); each later step is checked as if the earlier ones were fine
    (what a form shows beside each step before Start)."""
    chain = Chain()
    problems: list[str | None] = []
    for i, step in enumerate(steps):
        if not isinstance(step, Step):
            problems.append(f"step {i + 1} is {type(step).__name__}, not a step: make each with "
                            "dragon.steps.train(...), dragon.steps.prefer(...), ...")  # fmt: skip
            continue
        try:
            _check(step, chain, background)
            problems.append(None)
        except (TypeError, ValueError) as e:
            problems.append(f"{label(i, step).capitalize()}: {e}")
        chain.after(step)
    return problems


def check_steps(steps: Any, background: bool = False) -> list[Step]:
    """The steps as a list, or a PipelineError naming the first step that cannot run."""
    if isinstance(steps, Step):
        steps = [steps]
    if not isinstance(steps, list | tuple) or not steps:
        raise PipelineError("steps must be a non-empty list of dragon.steps.train(...), ...")
    first = next((p for p in step_problems(steps, background) if p), None)
    if first:
        raise PipelineError(first)
    return list(steps)


def _check(step: Step, chain: Chain, background: bool) -> None:
    """One step, given what came before it (raises TypeError/ValueError with the reason)."""
    if step.kind in ON_LATEST_RUN and not chain.has_run:
        raise ValueError(
            f"there is no run to {step.kind} yet: put a train, prefer or reinforce step before it."
        )
    if isinstance(step, TrainStep):
        check_dataset(METHODS["sft"], step.dataset, None)
    elif isinstance(step, PreferStep):
        _check_prefer(step, chain)
    elif isinstance(step, ReinforceStep):
        check_dataset(METHODS["grpo"], step.dataset, step.method_args())
    elif isinstance(step, SynthesizePairsStep):
        _check_synthesis(step, chain)
    elif isinstance(step, JudgeStep):
        _whole(step.n, "n")
    elif isinstance(step, EvaluateStep) and step.metrics is not True:
        named_metrics(list(step.metrics))
        if background and not all(isinstance(m, str) for m in step.metrics):
            raise ValueError(
                "a background pipeline takes metrics by name (dragon.metrics()); a Python "
                "function cannot be handed to the job: run the pipeline in the foreground."
            )
    elif isinstance(step, PublishStep):
        if not isinstance(step.repo, str) or not step.repo.strip():
            raise ValueError('publish needs a repo: dragon.steps.publish("name/model").')
        if step.what not in ("merged", "adapter"):
            raise ValueError(f"what = {step.what!r}: publish 'merged' or 'adapter'.")
    if isinstance(step, SynthesizePairsStep | JudgeStep):
        _check_judge(step.judge, background)


def _check_prefer(step: PreferStep, chain: Chain) -> None:
    if step.method not in ("dpo", "orpo"):
        raise ValueError(f"method = {step.method!r}: one of 'dpo', 'orpo'.")
    if step.dataset is None:
        if not chain.pairs_pending:
            raise ValueError(
                "it has no dataset and no synthesize_pairs step before it makes its pairs: "
                "pass dataset= (mapped with .map_pairs()), or put "
                "dragon.steps.synthesize_pairs(...) before it."
            )
        return
    check_dataset(METHODS[step.method], step.dataset, step.method_args())


def _check_synthesis(step: SynthesizePairsStep, chain: Chain) -> None:
    prompts = step.prompts
    if isinstance(prompts, str):
        if prompts not in ("train", "eval"):
            raise ValueError(
                f"prompts = {prompts!r}: 'train' or 'eval' (the latest run's rows), a list of "
                "str, or a dataset."
            )
        if not chain.has_run:
            raise ValueError(
                f"prompts={prompts!r} are the latest run's rows, and there is no run yet: put a "
                "training step before it, or pass the prompts (a list of str or a dataset)."
            )
    elif not isinstance(prompts, Dataset | list | tuple):
        raise TypeError(f"prompts must be 'train', 'eval', a list of str or a dataset, got "
                        f"{type(prompts).__name__}.")  # fmt: skip
    _whole(step.n, "n")
    check_settings(
        "synthesize_pairs", max_new_tokens=step.max_new_tokens, temperature=step.temperature,
        min_gap=step.min_gap, n_samples=step.n_samples_per_prompt, name="preferences",
    )  # fmt: skip


def _check_judge(judge: Any, background: bool) -> None:
    """The judge can be made (None: Claude needs ANTHROPIC_API_KEY); in the background, the
    job must be able to rebuild it from its description."""
    if isinstance(judge, str):
        return  # a run or model id: a local judge, resolved when the step runs
    made = as_judge(judge)
    if background:
        try:
            llm_from_description(describe_judge(made))
        except ValueError as e:
            raise ValueError(f"{e} (a background pipeline stores its judges by description)") from e


def _whole(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} = {value!r}; use a whole number, 1 or more.")
