"""`RunSpec`: one typed description of a training run, and config.json's part of it.

    spec = RunSpec("dpo", pairs, "dragonfarm/tiny-support", method_args=DpoArgs(beta=0.2))
    run = dragon.start(spec, runs_dir="runs")        # what train(), prefer(), reinforce() do
    RunSpec.from_dict(run.config) == spec            # config.json round-trips it

The method, the dataset, the model and the grouped settings (`Lora`, `TrainArgs`, `Hardware`,
and the method's own group from the method table: `DpoArgs`, `PreferenceArgs` or `GrpoArgs`),
validated in `__post_init__` with the field named. `train`, `prefer` and `reinforce` build one,
the Train tab builds one from its widgets, `code(run)` and `resume` read one back from
config.json.
Where a run goes (`run_dir`, `runs_dir`) and whether to wait are not part of it: they are the
start function's arguments. What only writing the run can know (its id, the time, the resolved
model block with the base and adapters, the row counts) `rundir.create` adds to config.json.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from dragonfarm_core import methods
from dragonfarm_core.method_args import DpoArgs, GrpoArgs, PreferenceArgs
from dragonfarm_core.recommended import recommended
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.train_config import extra_args
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs, from_dict, to_dict

# Keys that hold credentials; config.json must name an environment variable instead.
SECRET_KEY = re.compile(r"(api_?key|secret|password|(hf|hub|access|auth)_?token)$", re.IGNORECASE)
DEFAULT_LORA, DEFAULT_HARDWARE = Lora(), Hardware()  # frozen: one instance is safely shared
GROUPS = (("lora", Lora), ("args", TrainArgs), ("hardware", Hardware))


def slugify(text: str) -> str:
    """'Qwen/Qwen2.5-0.5B-Instruct' -> 'qwen2-5-0-5b-instruct' (the last path part)."""
    last = str(text).rstrip("/\\").replace("\\", "/").split("/")[-1]
    slug = re.sub(r"[^a-z0-9]+", "-", last.lower()).strip("-")
    return slug[:48].strip("-") or "run"


def is_run_folder(model: Any) -> bool:
    """A run directory given by path. A model folder has a config.json too, but not a run's."""
    if not isinstance(model, str | os.PathLike) or not files.is_run_dir(model):
        return False
    try:
        config = files.read_config(model)
    except ValueError:  # not JSON: not ours
        return False
    return isinstance(config, dict) and {"schema", "method", "dataset"} <= config.keys()


def check_plain(values: dict[str, Any], where: str) -> None:
    """Refuse what config.json must not hold: non-JSON values, and credentials."""
    try:
        json.dumps(values, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise SettingsError(
            f"{where} must hold plain JSON values (str, numbers, lists, dicts): {e}."
        ) from e
    for key, value in values.items():
        if SECRET_KEY.search(str(key)) and value not in (None, "") and not key.endswith("_env"):
            raise SettingsError(
                f"{where}[{key!r}] looks like a credential, and config.json never holds one. "
                f"Put the secret in an environment variable and pass its name ({key}_env=...)."
            )
        if isinstance(value, dict):
            check_plain(value, f"{where}[{key!r}]")


@dataclass(frozen=True, eq=False)
class RunSpec:
    """A training run: what it trains, on what, from which model, with which settings.

    dataset: a `dragon.dataset(...)` mapped for the method; read back from config.json, its
    `Dataset.spec()` dict. model: a preset or Hub id, a local folder, or a succeeded Run (or its
    directory) to continue from. lora=None and args=None take the settings recommended for the
    model and method (`dragon.recommended`: the manual's defaults except where the project
    measured better ones, as for the bundled model); method_args=None takes the method's group
    defaults (GRPO has none: it needs `GrpoArgs(rewards=[...])`). Two specs are equal when they
    write the same config.
    """

    method: str
    dataset: Any
    model: Any
    lora: Lora | None = None
    args: TrainArgs | None = None
    hardware: Hardware = DEFAULT_HARDWARE
    method_args: PreferenceArgs | DpoArgs | GrpoArgs | None = None
    name: str | None = None
    n_samples: int = 10
    revision: str | None = None
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        row = methods.method(self.method)
        self._set("model", _model_text(self.model))
        if self.lora is None or self.args is None:
            fits = recommended(self.model, self.method)
            self._set("lora", fits.lora if self.lora is None else self.lora)
            self._set("args", fits.args if self.args is None else self.args)
        for key, cls in GROUPS:
            value = getattr(self, key)
            if not isinstance(value, cls):
                raise SettingsError(
                    f"RunSpec.{key} must be dragon.{cls.__name__}(...), got "
                    f"{type(value).__name__}: {value!r:.80}."
                )
        self._set("method_args", _method_args(row, self.method_args))
        self._check_scalars()
        args: TrainArgs = self.args  # type: ignore[assignment]  # set above, checked a TrainArgs
        check_plain(args.extra, "TrainArgs.extra")
        # TrainArgs passes keywords it does not know to the trainer in `extra`: refuse one the
        # trainer does not understand now, with the accepted list, not later in its log.
        extra_args(args.extra, self.method)
        check_plain(self.method_args_dict(), "method_args")
        if isinstance(self.method_args, GrpoArgs):
            new = self.method_args.max_new_tokens
            if args.max_seq_len <= new:
                raise SettingsError(
                    f"TrainArgs.max_seq_len ({args.max_seq_len}) must leave room for the "
                    f"prompt besides max_new_tokens ({new}); raise it or lower max_new_tokens."
                )
        if not isinstance(self.dataset, dict):  # a stored spec() dict was checked when written
            check_dataset(row, self.dataset, self.method_args)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _check_scalars(self) -> None:
        name, n = self.name, self.n_samples
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"RunSpec.name must be a non-empty string or None, got {name!r}.")
        if name is not None and name == slugify(self.model) and not is_run_folder(self.model):
            self._set("name", None)  # the default name: config.json cannot tell them apart
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"RunSpec.n_samples must be a whole number >= 0, got {n!r}.")
        if self.revision is not None and (not isinstance(self.revision, str) or not self.revision):
            raise ValueError(f"RunSpec.revision must be a non-empty string or None, "
                             f"got {self.revision!r}.")  # fmt: skip
        if not isinstance(self.trust_remote_code, bool):
            raise SettingsError("RunSpec.trust_remote_code must be True or False.")

    @property
    def row(self) -> methods.Method:
        """The method's row of the table."""
        return methods.METHODS[self.method]

    @property
    def continues(self) -> bool:
        """Whether `model` is a run this one continues from (rather than a model)."""
        return is_run_folder(self.model)

    def dataset_dict(self) -> dict[str, Any]:
        """config.json's `dataset`: the Dataset's `spec()`."""
        return dict(self.dataset) if isinstance(self.dataset, dict) else self.dataset.spec()

    def method_args_dict(self) -> dict[str, Any]:
        return {} if self.method_args is None else self.method_args.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """The spec as config.json holds it: method, name, model (name, revision,
        trust_remote_code), dataset, lora, args, hardware, n_samples, method_args."""
        return {
            "method": self.method,
            "name": self.name,
            "model": {"name": self.model, "revision": self.revision,
                      "trust_remote_code": self.trust_remote_code},
            "dataset": self.dataset_dict(),
            **{key: to_dict(getattr(self, key)) for key, _ in GROUPS},
            "n_samples": self.n_samples,
            "method_args": self.method_args_dict(),
        }  # fmt: skip

    @classmethod
    def from_dict(
        cls, values: dict[str, Any], run_dir: str | os.PathLike[str] | None = None
    ) -> RunSpec:
        """Read a spec back from `to_dict` output or a run's config.json (any schema-1 run).

        A continued run's model is the run it continued from; its default name is None again.
        With `run_dir`, a custom reward's file stored relative to the run becomes absolute.
        """
        where = "config.json" if run_dir is None else f"{run_dir}/config.json"
        try:
            model = values["model"]
            parent = values.get("continued_from")
            method = values.get("method", "sft")
            row = methods.method(method)
            name = values.get("name")
            group = values.get("method_args") or {}
            check_plain(group, "method_args")
            return cls(
                method=method,
                dataset=dict(values.get("dataset") or {}),
                model=parent or model["name"],
                **{key: from_dict(kind, values.get(key) or {}) for key, kind in GROUPS},
                method_args=_group_from_dict(row, group, run_dir),
                name=None if name == slugify(model["name"]) else name,
                n_samples=values.get("n_samples", 10),
                revision=None if parent else model.get("revision"),
                trust_remote_code=bool(model.get("trust_remote_code", False)),
            )
        except KeyError as e:
            raise SettingsError(
                f"{where} has no {e.args[0]!r} field; recreate the run with dragon.train()."
            ) from e
        except TypeError as e:  # an unexpected keyword in lora/args/hardware
            raise SettingsError(f"{where}: {e}") from e

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunSpec) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # equal by value, and mutable dicts inside


def _model_text(model: Any) -> str:
    from dragonfarm_core.rundir.run import Run  # run.py imports the launcher; only needed here

    if isinstance(model, Run):
        return str(model.dir)
    if isinstance(model, str | os.PathLike):
        return os.fspath(model)
    raise TypeError(
        f"RunSpec.model must be a model id, a local folder or a finished Run, got "
        f"{type(model).__name__}."
    )


def _method_args(row: methods.Method, given: Any) -> Any:
    """The method's settings group: the given one, checked, or its defaults."""
    group = row.settings
    if group is None:
        if given is not None:
            raise SettingsError(f"RunSpec.method_args: {row.name} takes none, got {given!r:.80}.")
        return None
    if given is None:
        if group is GrpoArgs:
            raise SettingsError(
                "RunSpec.method_args: GRPO needs its rewards, e.g. "
                'method_args=dragon.GrpoArgs(rewards=[dragon.reward("numeric")]).'
            )
        return group()  # type: ignore[call-arg]  # the other groups default every field
    if group is DpoArgs and type(given) is PreferenceArgs:  # beta alone: DPO's default loss
        given = DpoArgs(**given.to_dict())
    if type(given) is not group:  # a DpoArgs is a PreferenceArgs, but not ORPO's
        raise SettingsError(
            f"RunSpec.method_args must be dragon.{group.__name__}(...) for {row.name}, got "
            f"{type(given).__name__}: {given!r:.80}."
        )
    return given


def _group_from_dict(row: methods.Method, values: dict[str, Any], run_dir: Any) -> Any:
    if row.settings is None:
        if values:
            raise SettingsError(
                f"config.json method_args: {row.name} takes none, got {sorted(values)}."
            )
        return None
    return row.settings.from_dict(values, run_dir=run_dir)


def check_dataset(row: methods.Method, dataset: Any, method_args: Any) -> None:
    """Refuse a dataset not mapped for the method, or lacking a reference a reward needs."""
    if not callable(getattr(dataset, "split_records", None)):
        raise TypeError(
            f"dataset must be a dragon.dataset(...) mapped with {row.mapping_hint}, "
            f"got {type(dataset).__name__}."
        )
    mapping, label = dataset.mapping, getattr(dataset, "name", "?")
    if mapping is None or mapping.kind not in row.mapping_kinds:
        got = "not mapped" if mapping is None else f"mapped as {mapping.kind!r}"
        raise ValueError(
            f"{row.name} trains on a dataset mapped with {row.mapping_hint}, but dataset "
            f"{label!r} is not: it is {got}."
        )
    needing = method_args.needing_reference if isinstance(method_args, GrpoArgs) else []
    if needing and mapping.reference is None:
        raise ValueError(
            f"Reward(s) {', '.join(map(repr, needing))} compare completions with a reference "
            f"answer, but dataset {label!r} maps no reference column. Map one with "
            ".map_prompts(prompt=..., reference='answer'), or use rewards that need none "
            "(regex, length, json, keyword, command, custom)."
        )
