"""`dragonfarm pipeline FILE` and `dragonfarm pipeline-status ID`.

The file (YAML or JSON) declares a pipeline with the structure of its record's step specs:

    model: dragonfarm/tiny-support
    name: support-loop                    # optional
    steps:
      - kind: train
        dataset: {source: tickets.csv, mapping: {kind: sft, prompt: question, response: answer}}
        args: {epochs: 1}
      - kind: synthesize_pairs
        n: 50
        judge: {provider: anthropic, model: claude-sonnet-4-5}
      - kind: prefer
      - kind: judge
        against: base

A dataset's relative `source` is read from the file's folder. The steps are made with
`step_from_dict` and run by `dragon.pipeline` (in the foreground unless --background).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.pipelines.chain import label
from dragonfarm_core.pipelines.steps import step_from_dict


def load(path: Path) -> Any:
    """A YAML or JSON file's value (JSON by its .json suffix, YAML otherwise)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        return json.loads(text)
    import yaml

    return yaml.safe_load(text)


def read_file(path: Path) -> dict[str, Any]:
    """The pipeline a YAML or JSON file declares, with its datasets' paths made absolute."""
    declared = load(path)
    if not isinstance(declared, dict) or not isinstance(declared.get("steps"), list):
        raise ValueError(f"{path}: a pipeline file holds a mapping with `model` and a `steps` "
                         "list (see dragonfarm pipeline --help).")  # fmt: skip
    if not isinstance(declared.get("model"), str):
        raise ValueError(f"{path}: `model` is missing: a preset or Hub id, or a model folder.")
    for step in declared["steps"]:
        for key in ("dataset", "prompts"):
            source = step.get(key, {}).get("source") if isinstance(step, dict) and isinstance(
                step.get(key), dict) else None  # fmt: skip
            if isinstance(source, str) and not Path(source).expanduser().is_absolute():
                step[key]["source"] = str((path.parent / source).resolve())
    return declared


def _steps(declared: dict[str, Any]) -> list[Any]:
    out = []
    for i, spec in enumerate(declared["steps"]):
        try:
            out.append(step_from_dict(spec))
        except (TypeError, ValueError, OSError) as e:
            raise ValueError(f"{label(i, spec if isinstance(spec, dict) else {})}: {e}") from e
    return out


def run_pipeline(args: argparse.Namespace) -> int:
    declared = read_file(Path(args.file))
    p = dragon.pipeline(declared["model"], _steps(declared), runs_dir=args.runs_dir,
                        name=declared.get("name") or "pipeline",
                        background=args.background)  # fmt: skip
    if args.background:
        print(f"Pipeline {p.id} started; watch it with: dragonfarm pipeline-status {p.id}")
        return 0
    record = p.status()
    for i, step in enumerate(record["steps"]):
        print(f"{label(i, step)}: {step['state']}  {json.dumps(step.get('summary'))}")
    return 0 if record["status"] == "succeeded" else 1


def pipeline_status(args: argparse.Namespace) -> int:
    record = dragon.pipeline_status(args.pipeline, runs_dir=args.runs_dir)
    json.dump(record, sys.stdout, indent=2, default=str)
    print()
    return 0


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser],
                 runs_dir_flag: Callable[[argparse.ArgumentParser], None]) -> None:  # fmt: skip
    """The two subcommands, made with cli.py's `_command` and `_runs_dir_flag`."""
    p = command(sub, "pipeline", "run the pipeline a YAML or JSON file declares", run_pipeline,
                epilog=__doc__.split("\n\n", 1)[1].split("\n\nA dataset")[0])  # fmt: skip
    p.add_argument("file", metavar="FILE", help="the pipeline file (.yaml, .yml or .json)")
    p.add_argument("--background", action="store_true",
                   help="start it as a job and return at once (it outlives this command)")  # fmt: skip
    runs_dir_flag(p)
    p = command(sub, "pipeline-status", "print a pipeline's record as JSON", pipeline_status)
    p.add_argument("pipeline", metavar="ID", help="the pipeline's id, or its record file")
    runs_dir_flag(p)
