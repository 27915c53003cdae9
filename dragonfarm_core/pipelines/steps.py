"""The steps of a pipeline: one frozen dataclass per stage, and `steps`, the namespace that
makes them with the manual's defaults.

    steps = [dragon.steps.train(ds), dragon.steps.synthesize_pairs(judge=judge),
             dragon.steps.prefer(), dragon.steps.judge(against="base", judge=judge)]

A step holds what it was given (a Dataset, an LLM, a function); `to_dict()` is the step's
spec as the pipeline record stores it (a dataset as its `spec()`, an LLM as its `describe()`,
which names a key by its variable only), and `step_from_dict` makes the step again from that
spec (an LLM with its key, which never enters the record). A training step's settings
default to its method's (`method_args`: a reinforce step's group_size is GrpoArgs'), and
`run_spec` is the `RunSpec` it starts, as the Train tab and the command line build one. What
each step does is in `pipelines.work`; how steps chain, and which chains are refused, in
`pipelines.chain`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.data.from_spec import dataset_from_spec
from dragonfarm_core.evaluation.evaluate import metric_name
from dragonfarm_core.judging.judges import describe_judge
from dragonfarm_core.llm import LLM
from dragonfarm_core.llm.descriptions import llm_from_description
from dragonfarm_core.method_args import GrpoArgs, PreferenceArgs, ReinforceArgs, preference_args
from dragonfarm_core.rewards import Reward
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Lora, TrainArgs, to_dict
from dragonfarm_core.spec import RunSpec


def _judge_spec(judge: Any) -> Any:
    """A judge or teacher as the record holds it: None, a model id / run folder, or a
    description (an LLM's `describe()`; a Python function by its name)."""
    if judge is None or isinstance(judge, str):
        return judge
    if isinstance(judge, Run):
        return str(judge.dir)
    return describe_judge(judge)


def judge_from_spec(stored: Any, api_key: str | None = None) -> Any:
    """A judge again from `_judge_spec`'s output (an LLM with `api_key`, in memory only)."""
    if stored is None or isinstance(stored, str | LLM) or callable(stored):
        return stored
    return llm_from_description(stored, api_key)


@dataclass(frozen=True)
class Step:
    """What every step shares: its `kind` and whether it trains a new run."""

    kind: ClassVar[str] = ""
    trains: ClassVar[bool] = False

    def to_dict(self) -> dict[str, Any]:
        """The step's spec as the pipeline record stores it (JSON-ready, no key)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            out[f.name] = _plain(f.name, getattr(self, f.name))
        return out


def _plain(name: str, value: Any) -> Any:
    if isinstance(value, Dataset):
        return value.spec()
    if isinstance(value, Lora | TrainArgs):
        return to_dict(value)
    if name == "rewards":
        return GrpoArgs(rewards=list(value)).to_dict()["rewards"]
    if name == "judge":
        return _judge_spec(value)
    if name == "metrics" and value is not True:
        return [metric_name(m) for m in value]
    return value


def default_of(group: type, name: str) -> Any:
    """`group`'s field `name` (its default and widget metadata) for a step's field of that
    name: a step's setting defaults to its method's, declared once."""
    (found,) = [f for f in dataclasses.fields(group) if f.name == name]
    return dataclasses.field(default=found.default, metadata=found.metadata)


@dataclass(frozen=True, kw_only=True)
class TrainingStep(Step):
    """What the training steps share: each trains a run (`lora`/`args` None: the settings
    `dragon.recommended` gives for the model the step trains)."""

    trains: ClassVar[bool] = True
    lora: Lora | None = None
    args: TrainArgs | None = None
    n_samples: int = default_of(RunSpec, "n_samples")

    def run_spec(self, model: Any, name: str | None = None, pairs: Any = None) -> RunSpec:
        """The run this step starts from `model` (a model id or folder, or the run before);
        `pairs`: the synthesis step's, which a prefer step with no dataset trains on."""
        raise NotImplementedError

    def _spec(self, method: str, dataset: Any, method_args: Any, model: Any,
              name: str | None) -> RunSpec:  # fmt: skip
        return RunSpec(method, dataset, model, lora=self.lora, args=self.args,
                       method_args=method_args, name=name, n_samples=self.n_samples)  # fmt: skip


@dataclass(frozen=True)
class TrainStep(TrainingStep):
    """Supervised fine-tuning on `dataset`, from the model (or the previous training run)."""

    kind: ClassVar[str] = "train"
    dataset: Any

    def run_spec(self, model: Any, name: str | None = None, pairs: Any = None) -> RunSpec:
        return self._spec("sft", self.dataset, None, model, name)


@dataclass(frozen=True)
class PreferStep(TrainingStep):
    """DPO or ORPO on `dataset`, or, with none, on the pairs of the synthesis step before."""

    kind: ClassVar[str] = "prefer"
    dataset: Any = None
    method: str = "dpo"
    beta: float = default_of(PreferenceArgs, "beta")

    def method_args(self) -> PreferenceArgs:
        """DPO's DpoArgs or ORPO's PreferenceArgs, with this step's beta."""
        return preference_args(self.method, self.beta)

    def run_spec(self, model: Any, name: str | None = None, pairs: Any = None) -> RunSpec:
        dataset = pairs if self.dataset is None else self.dataset
        return self._spec(self.method, dataset, self.method_args(), model, name)


@dataclass(frozen=True)
class ReinforceStep(TrainingStep):
    """GRPO on the prompts of `dataset` with `rewards` (one Reward or a list)."""

    kind: ClassVar[str] = "reinforce"
    dataset: Any
    rewards: tuple[Reward, ...]
    group_size: int = default_of(ReinforceArgs, "group_size")
    beta: float = default_of(ReinforceArgs, "beta")
    temperature: float = default_of(ReinforceArgs, "temperature")
    max_new_tokens: int = default_of(ReinforceArgs, "max_new_tokens")

    def __post_init__(self) -> None:
        given = self.rewards
        object.__setattr__(self, "rewards", tuple(given) if isinstance(given, list | tuple)
                           else (given,))  # fmt: skip

    def method_args(self) -> GrpoArgs:
        """GrpoArgs with this step's rewards (Rewards, or the dicts a record stores) and
        sampling settings."""
        return GrpoArgs(rewards=list(self.rewards), group_size=self.group_size, beta=self.beta,
                        temperature=self.temperature,
                        max_new_tokens=self.max_new_tokens)  # fmt: skip

    def run_spec(self, model: Any, name: str | None = None, pairs: Any = None) -> RunSpec:
        return self._spec("grpo", self.dataset, self.method_args(), model, name)


@dataclass(frozen=True)
class SynthesizePairsStep(Step):
    """Pairs from the latest run's own samples, ranked by `judge` (None: Claude). prompts:
    "train" or "eval" (that run's rows; `n` of them), a list of str, or a dataset."""

    kind: ClassVar[str] = "synthesize_pairs"
    prompts: Any = "train"
    n: int = 100
    judge: Any = None
    n_samples_per_prompt: int = 4
    min_gap: float = 2
    rubric: str | None = None
    temperature: float = 0.8
    max_new_tokens: int = 256


@dataclass(frozen=True)
class JudgeStep(Step):
    """Judge the latest run against `against` ("base", a run, a model; None: a rubric)."""

    kind: ClassVar[str] = "judge"
    against: Any = "base"
    judge: Any = None
    n: int = 20
    rubric: str | None = None


@dataclass(frozen=True)
class EvaluateStep(Step):
    """Evaluate the latest run; metrics=True: every built-in metric that fits its data."""

    kind: ClassVar[str] = "evaluate"
    metrics: Any = True

    def __post_init__(self) -> None:
        if self.metrics is not True:
            if isinstance(self.metrics, bool | str) or not hasattr(self.metrics, "__iter__"):
                raise TypeError(f"metrics must be True or a list of metrics, got "
                                f"{self.metrics!r}.")  # fmt: skip
            object.__setattr__(self, "metrics", tuple(self.metrics))


@dataclass(frozen=True)
class MergeStep(Step):
    """Merge the latest run into a standalone model (default <run>/merged/)."""

    kind: ClassVar[str] = "merge"
    out: str | None = None


@dataclass(frozen=True)
class PublishStep(Step):
    """Upload the latest run's model to the Hub as `repo`."""

    kind: ClassVar[str] = "publish"
    repo: str | None
    what: str = "merged"
    private: bool = False
    commit_message: str | None = None


KINDS: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (TrainStep, PreferStep, ReinforceStep, SynthesizePairsStep, JudgeStep,
                EvaluateStep, MergeStep, PublishStep)
}  # fmt: skip


def step_from_dict(spec: dict[str, Any], api_key: str | None = None) -> Step:
    """The step a record's (or a pipeline file's) step spec describes; `api_key` is its judge's."""
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        kind = spec.get("kind") if isinstance(spec, dict) else spec
        raise ValueError(f"Unknown step kind {kind!r}; one of {', '.join(KINDS)}.")
    cls = KINDS[spec["kind"]]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(spec) - names - {"kind"})
    if unknown:
        raise ValueError(f"A {cls.kind} step takes no {', '.join(unknown)}; it takes "
                         f"{', '.join(sorted(names))}.")  # fmt: skip
    values: dict[str, Any] = {k: v for k, v in spec.items() if k != "kind"}
    for key in ("dataset", "prompts"):
        if isinstance(values.get(key), dict):
            values[key] = dataset_from_spec(values[key])
    if isinstance(values.get("lora"), dict):
        values["lora"] = Lora(**values["lora"])
    if isinstance(values.get("args"), dict):
        values["args"] = TrainArgs(**values["args"])
    if "rewards" in values:
        values["rewards"] = tuple(GrpoArgs.from_dict({"rewards": values["rewards"]}).rewards)
    if "judge" in values:
        values["judge"] = judge_from_spec(values["judge"], api_key)
    return cls(**values)


class Steps:
    """`dragon.steps`: one maker per stage, with the manual's defaults (each is its step's
    class: `dragon.steps.train(ds)` is a TrainStep; lora, args and n_samples by keyword)."""

    train = TrainStep
    prefer = PreferStep
    reinforce = ReinforceStep
    synthesize_pairs = SynthesizePairsStep
    judge = JudgeStep
    evaluate = EvaluateStep
    merge = MergeStep
    publish = PublishStep


steps = Steps()
