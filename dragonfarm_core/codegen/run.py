"""The Python, through the public API, that reproduces a run: `code(run)`, from a `RunSpec`.

    print(dragon.code(run))

One generator, `spec_code(spec)`, writes every training script: `code(run)` reads the spec back
from config.json (so it works for runs started from the app, from another session or from the
command line) and the Train tab passes the spec its widgets describe, so the code shown before
Start is the code of the run it starts. The dataset is rebuilt from its original file (or the
copy saved in the run when it came from memory); only settings that differ from their defaults
are written; a run that continued from another refers to it by directory. `dry_run_code` is the
`dragon.test_rewards(...)` script of the Train tab's dry run, with the same parts.
"""

from __future__ import annotations

import dataclasses
import keyword
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dragonfarm_core.data.codegen import dataset_code, literal
from dragonfarm_core.method_args import GrpoArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.recommended import recommended
from dragonfarm_core.rewards import Reward, reward_names
from dragonfarm_core.rundir import files, location
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.settings import to_dict
from dragonfarm_core.spec import GROUPS, RunSpec, is_run_folder


def _value(value: Any) -> str:
    """A Python literal: strings in double quotes (like the dataset line), the rest as repr."""
    return literal(value) if isinstance(value, str | int | float) else repr(value)


def comment_value(value: Any) -> str:
    """`value` as it may stand inside a one-line comment of generated code: a dotted name as it
    is, anything else quoted (repr), so no line break in a stored value can end the comment
    and start live code."""
    text = str(value)
    if all(part.isidentifier() for part in text.split(".")):
        return text
    return repr(text)


def comment_lines(text: str) -> str:
    """`text` as comment lines, every line of it (any line break Python or an editor knows;
    a NUL, which no Python source may hold, escaped)."""
    lines = str(text).replace("\x00", "\\x00").splitlines() or [""]
    return "\n".join(f"# {line}".rstrip() for line in lines)


def settings_call(cls: type, stored: dict[str, Any]) -> str | None:
    """`dragon.Lora(r=8)` for the fields that differ from the defaults; None if none do."""
    if not isinstance(stored, dict):
        raise ValueError(
            f"{cls.__name__} settings must be a mapping of field names to values, got "
            f"{type(stored).__name__}."
        )
    defaults = to_dict(cls())
    names = [f.name for f in dataclasses.fields(cls)]
    parts = [
        f"{k}={_value(v)}"
        for k, v in stored.items()
        if k in names and k != "extra" and v != defaults.get(k)
    ]
    extra = stored.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError(f"{cls.__name__}.extra must be a mapping, got {type(extra).__name__}.")
    if all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k)
           and k not in names for k in extra):  # fmt: skip
        parts += [f"{k}={_value(v)}" for k, v in extra.items()]  # unknown keywords land in extra
    else:
        parts.append(f"extra={_value(extra)}")
    return f"dragon.{cls.__name__}({', '.join(parts)})" if parts else None


def _given_names(stored: list[dict[str, Any]]) -> set[int]:
    """Indexes of the rewards whose name must be written: those that `assign_names` would not
    give them again (names of the others are left out of the code)."""
    keep: set[int] = set()
    while True:
        shapes = [SimpleNamespace(type=d["type"], name=d.get("name") if i in keep else None)
                  for i, d in enumerate(stored)]  # fmt: skip
        automatic = reward_names(shapes)  # type: ignore[arg-type]
        wrong = {i for i, d in enumerate(stored) if automatic[i] != d.get("name")} - keep
        if not wrong:
            return keep
        keep |= wrong


def rewards_code(
    stored: list[dict[str, Any]], run_dir: str | os.PathLike[str] | None = None
) -> str:
    """The `[dragon.reward(...), ...]` source that rebuilds config.json's rewards.

    Only fields that differ from the defaults are written, names only where they were chosen,
    a custom file stored relative to `run_dir` as the absolute path of the run's copy. Built from
    the stored dicts without validating them again (a command's program may be missing here).
    """
    defaults = {f.name: f.default for f in dataclasses.fields(Reward)}
    _check_rewards(stored)
    named = _given_names(stored)
    calls = []
    for i, d in enumerate(stored):
        parts = [literal(d["type"])]
        for key, value in d.items():
            if key not in defaults:  # a key becomes a keyword in the code: only known ones
                raise ValueError(f"reward {i + 1} has a field {key!r} that rewards do not have.")
            if key == "type" or value == defaults.get(key) or (key == "name" and i not in named):
                continue
            if key == "file" and value and not os.path.isabs(value) and run_dir is not None:
                value = str(Path(run_dir) / value)
            parts.append(f"{key}={literal(value) if isinstance(value, str) else repr(value)}")
        calls.append(f"dragon.reward({', '.join(parts)})")
    if len(calls) == 1:
        return f"[{calls[0]}]"
    return "[\n" + "".join(f"        {c},\n" for c in calls) + "    ]"  # one per line in the call


def _check_rewards(stored: Any) -> None:
    if not isinstance(stored, list | tuple) or not all(
        isinstance(d, dict) and isinstance(d.get("type"), str) for d in stored
    ):
        raise ValueError("rewards must be a list of rewards, each a mapping with its type.")


def home_argument(runs_dir: str | os.PathLike[str] | None) -> str | None:
    """runs_dir= only when the runs live somewhere other than the configured default."""
    if runs_dir is None:
        return None
    home = Path(runs_dir)
    if home == location.configured_runs_dir() or location.looks_temporary(home):
        return None
    return str(home)


def head_lines(dataset: dict[str, Any], model: str) -> tuple[list[str], str]:
    """The import, the dataset line, `parent = dragon.open_run(...)` when continuing a run;
    and how the call names the model."""
    lines = ["import dragonfarm_core as dragon", "", dataset_code(dataset, var="ds").rstrip()]
    if not is_run_folder(model):
        return lines, literal(model)
    return [*lines, f"parent = dragon.open_run({literal(model)})"], "parent"


def write_script(head: list[str], target: str, function: str, arguments: list[str]) -> str:
    call = "".join(f"    {a},\n" for a in arguments)
    return "\n".join([*head, "", f"{target} = dragon.{function}(\n{call})", ""])


def call_arguments(spec: RunSpec, model: str, runs_dir: Any) -> list[str]:
    row = spec.row
    args = ["ds", model]
    if sum(r.function == row.function for r in METHODS.values()) > 1:
        args.append(f"method={literal(spec.method)}")  # one function starts several methods
    args += [
        f"rewards={rewards_code(v)}" if k == "rewards" else f"{k}={_value(v)}"
        for k, v in spec.method_args_dict().items()
    ]
    args += group_arguments(spec)
    if spec.name:
        args.append(f"name={literal(spec.name)}")
    home = home_argument(runs_dir)
    if home:
        args.append(f"runs_dir={literal(home)}")
    return args + model_arguments(spec, model)


def group_arguments(spec: RunSpec) -> list[str]:
    """`lora=...`, `args=...`, `hardware=...` for the groups that differ from what a call
    leaving them out uses (the recommended settings)."""
    out = []
    fits = recommended(spec.model, spec.method)  # what the call uses for a group left out
    for key, cls in GROUPS:
        value = getattr(spec, key)
        default = {"lora": fits.lora, "args": fits.args}.get(key) or cls()
        if value != default:  # TrainArgs() itself, when the recommended settings differ from it
            out.append(f"{key}={settings_call(cls, to_dict(value)) or f'dragon.{cls.__name__}()'}")
    return out


def model_arguments(spec: RunSpec, model: str) -> list[str]:
    """n_samples, revision and trust_remote_code where they are not the defaults."""
    out = []
    if spec.n_samples != 10:
        out.append(f"n_samples={spec.n_samples}")
    if spec.revision and model != "parent":
        out.append(f"revision={literal(spec.revision)}")
    if spec.trust_remote_code:
        out.append("trust_remote_code=True")
    return out


def spec_code(spec: RunSpec, runs_dir: str | os.PathLike[str] | None = None) -> str:
    """Python source that starts the run `spec` describes, in `runs_dir` (written only when it
    is not the configured default)."""
    head, model = head_lines(spec.dataset_dict(), spec.model)
    return write_script(head, "run", spec.row.function, call_arguments(spec, model, runs_dir))


def dry_run_code(dataset: Any, model: str, settings: GrpoArgs, max_prompts: int) -> str:
    """The Python of a dry run: `dragon.test_rewards` with the rewards, model, prompts and
    sampling settings GRPO would use."""
    spec = dataset if isinstance(dataset, dict) else dataset.spec()
    head, model_arg = head_lines(spec, model)
    arguments = [
        rewards_code(list(settings.rewards)), model_arg, "ds", f"n={settings.group_size}",
        f"max_new_tokens={settings.max_new_tokens}",
        f"temperature={literal(settings.temperature)}", f"max_prompts={max_prompts}",
    ]  # fmt: skip
    return write_script(head, "table", "test_rewards", arguments) + "print(table)\n"


def code(run: Run | str | os.PathLike[str]) -> str:
    """Python source that reproduces `run` (a Run, its directory, or its id), a pipeline
    (a Pipeline, its id or its record: `pipeline_code`) or a sweep (`sweep_code`)."""
    from dragonfarm_core.codegen import pipeline as pipeline_code
    from dragonfarm_core.rundir import pipeline_record  # pipeline_code imports this

    record = pipeline_record.resolve(run)
    if record is not None:
        return pipeline_code.pipeline_code(record)
    from dragonfarm_core.codegen.sweep import sweep_code
    from dragonfarm_core.rundir import sweep_record

    swept = sweep_record.resolve(run)
    if swept is not None:
        return sweep_code(swept)
    run = open_run(run)
    config = run.config
    if config.get("method", "sft") not in METHODS:
        raise ValueError(
            f"{run.dir / files.CONFIG}: unknown method {config.get('method')!r}; "
            "cannot write code for it."
        )
    home = run.dir.parent
    if home.name == files.ARCHIVED_DIR:
        home = home.parent
    return spec_code(RunSpec.from_dict(config, run_dir=run.dir), home)


# -- language models and synthesis -----------------------------------------------------------


def llm_call(description: dict[str, Any], judge: bool = False) -> str:
    """The expression that builds the language model `description` (`LLM.describe()`) names:
    `dragon.llm_anthropic(...)`, `dragon.judge_openai(...)`, or a local model's name or run
    folder as a string (synthesize, synthesize_pairs and judge take one as it is). A key is
    only ever named by its environment variable; one typed in is left out."""
    from dragonfarm_core.llm.providers import DEFAULT_CLAUDE

    provider, model = description.get("provider"), description.get("model")
    if provider == "local":
        return literal(str(model))
    sampling = description.get("sampling") or {}
    if not isinstance(sampling, dict):
        raise ValueError(f"The language model's sampling must be a mapping, got {sampling!r}.")
    if provider == "anthropic":
        args = [] if model == DEFAULT_CLAUDE else [f"model={literal(model)}"]
        if description.get("url"):
            args.append(f"base_url={literal(description['url'])}")
    elif provider == "openai":
        args = [literal(model), literal(description.get("url"))]
        if description.get("api_key_env"):
            args.append(f"api_key_env={literal(description['api_key_env'])}")
    else:
        raise ValueError(f"No code for a {provider!r} language model: build it in Python.")
    if description.get("system"):
        args.append(f"system={literal(description['system'])}")
    if sampling.get("max_tokens") not in (None, 1024):
        args.append(f"max_tokens={_value(sampling['max_tokens'])}")
    if sampling.get("temperature") is not None:
        args.append(f"temperature={literal(sampling['temperature'])}")
    kind = "judge" if judge or description.get("judge") else "llm"
    return f"dragon.{kind}_{provider}({', '.join(args)})"


def synthesis_code(
    function: str,
    prompts: list[str],
    positional: list[str],
    settings: dict[str, Any],
    expressions: dict[str, str] | None = None,
    comments: list[str] | None = None,
) -> str:
    """The script of a `dragon.synthesize` / `dragon.synthesize_pairs` call: the import,
    `prompts` (the lines that make the `prompts` or `ds` variable), then the call with the
    `positional` expressions, the `expressions` (judge=..., teacher=...) and the `settings` that
    differ from the function's defaults; `comments` go above the call (where a key comes from)."""
    import inspect

    from dragonfarm_core.synthesis import synthesize as synthesis

    target = {"synthesize": "synth", "synthesize_pairs": "pairs"}[function]
    defaults = inspect.signature(getattr(synthesis, function)).parameters
    arguments = [*positional, *(f"{k}={v}" for k, v in (expressions or {}).items())]
    arguments += [
        f"{k}={_value(v)}"
        for k, v in settings.items()
        if k in defaults and v != defaults[k].default
    ]
    head = ["import dragonfarm_core as dragon", "", *prompts]
    script = write_script(head, target, function, arguments)
    if comments:  # right above the call they are about
        call = f"{target} = dragon.{function}("
        script = script.replace(call, "\n".join([*comments, call]), 1)
    return f'{script}print({target}.synthesis["dropped"])\n'


def judge_code(
    run: str | os.PathLike[str],
    judge: dict[str, Any],
    against: str | None = None,
    n: int = 20,
    rubric: str | None = None,
    system: str | None = None,
    max_new_tokens: int = 256,
    seed: int = 42,
) -> str:
    """The script of a `dragon.judge` call on `run` with the judge `judge` (`LLM.describe()`)
    names, through `llm_call`: a key is named by its variable, and one typed in (in the app) is
    only said to be needed, in a comment."""
    lines = ["import dragonfarm_core as dragon", ""]
    if judge.get("api_key"):  # typed in: never written; the script reads it from a variable
        variable = "ANTHROPIC_API_KEY" if judge.get("provider") == "anthropic" else "JUDGE_API_KEY"
        lines.append(f"# The key typed in the app is not shown: set {variable} to it.")
        if judge.get("provider") == "openai":
            judge = {**judge, "api_key_env": variable}
    lines.append(f"judge = {llm_call(judge, judge=True)}")
    arguments = [literal(str(run))]
    if against is not None:
        arguments.append(f"against={literal(str(against))}")
    defaults = {"n": (n, 20), "rubric": (rubric, None), "system": (system, None),
                "max_new_tokens": (max_new_tokens, 256), "seed": (seed, 42)}  # fmt: skip
    arguments.append("judge=judge")
    arguments += [f"{k}={_value(v)}" for k, (v, default) in defaults.items() if v != default]
    script = write_script(lines, "j", "judge", arguments)
    return script + "print(j.summary)\nprint(j.details)\n"


# -- taking the model out: merge, GGUF, Ollama, the Hub (the Export tab) -----------------------

EXPORT_STEPS = ("merge", "gguf", "ollama", "publish")


def export_code(run_dir: str | os.PathLike[str], step: str, **options: Any) -> str:
    """The Python of one export step on a run, as the Export tab starts it: "merge", "gguf"
    (quant=), "ollama" (name=, url=) or "publish" (repo=, what=, private=). A token is never
    written: the code says where publish finds one."""
    run = f"run = dragon.open_run({literal(str(run_dir))})"
    lines = ["import dragonfarm_core as dragon", "", run]
    if step == "merge":
        lines += ["path = dragon.merge(run)  # <run>/merged/, checked against base + adapter",
                  "print(path)"]  # fmt: skip
    elif step == "gguf":
        quant = options.get("quant") or "q8_0"
        lines += [f"gguf = dragon.export_gguf(run, quant={literal(quant)})  # merges first if needed",
                  "print(dragon.check_export(run, gguf=gguf)[\"passed\"])  # the template round trip"]  # fmt: skip
    elif step == "ollama":
        args = ["run"]
        if options.get("name"):
            args.append(f"name={literal(options['name'])}")
        if options.get("url") and options["url"] != "http://localhost:11434":
            args.append(f"url={literal(options['url'])}")
        lines += [f"backend = dragon.serve_ollama({', '.join(args)})",
                  'print(dragon.generate(run, "Hello", backend=backend))']  # fmt: skip
    elif step == "publish":
        args = ["run", literal(options.get("repo") or "yourname/model")]
        if options.get("what", "merged") != "merged":
            args.append(f"what={literal(options['what'])}")
        if options.get("private"):
            args.append("private=True")
        lines += ["# The token: HF_TOKEN, else the login cache (`hf auth login`).",
                  f"url = dragon.publish({', '.join(args)})", "print(url)"]  # fmt: skip
    else:
        raise ValueError(f"step = {step!r}: one of {', '.join(EXPORT_STEPS)}.")
    return "\n".join(lines) + "\n"


def compare_code(
    runs: Sequence[str | os.PathLike[str]], runs_dir: str | os.PathLike[str] | None = None
) -> str:
    """The script of a `dragon.compare` call: the runs (their folders) in order, or, with none,
    every run in `runs_dir`."""
    arguments = [literal(str(run)) for run in runs]
    if not arguments and runs_dir is not None:
        arguments.append(f"runs_dir={literal(str(runs_dir))}")
    head = ["import dragonfarm_core as dragon"]
    return write_script(head, "table", "compare", arguments) + "print(table)\n"
