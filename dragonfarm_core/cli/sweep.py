"""`dragonfarm sweep FILE`, `sweep-status ID`, `sweep-cancel ID` and `sweep-resume ID`.

The file (YAML or JSON) declares the base run as a run's config.json does, and the search:

    model: dragonfarm/tiny-support
    method: sft                           # optional (sft)
    dataset: {source: tickets.csv, mapping: {kind: sft, prompt: question, response: answer}}
    args: {epochs: 1}                     # optional: lora, args, method_args, hardware
    space:
      learning_rate: [1.0e-4, 3.0e-4, 1.0e-3]
      r: [4, 16]
    objective: eval_loss                  # optional; also sampler, n_trials, prune, seed, name

A dataset's relative `source` is read from the file's folder. A number written as 1e-4 is
read as one (YAML 1.1 reads it as text). The sweep runs as a job: the command returns once it
started, or with --wait when it ended, printing the trials.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.cli.pipeline import load
from dragonfarm_core.data.from_spec import dataset_from_spec

SWEEP_KEYS = ("space", "n_trials", "sampler", "objective", "prune", "seed", "name")
SPEC_KEYS = ("model", "method", "dataset", "lora", "args", "method_args", "hardware",
             "n_samples")  # fmt: skip
# YAML 1.1 (PyYAML) reads 1e-4 as text: numbers in that shape are numbers here.
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _numbers(value: Any) -> Any:
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        return float(value)
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    return value


def read_file(path: Path) -> dict[str, Any]:
    """The sweep a YAML or JSON file declares, its dataset's path made absolute."""
    declared = load(path)
    if not isinstance(declared, dict) or not isinstance(declared.get("space"), dict):
        raise ValueError(f"{path}: a sweep file holds a mapping with `model`, `dataset` and a "
                         "`space` (see dragonfarm sweep --help).")  # fmt: skip
    unknown = set(declared) - set(SWEEP_KEYS) - set(SPEC_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a sweep file takes "
                         f"{', '.join(SPEC_KEYS + SWEEP_KEYS)}.")  # fmt: skip
    for key in ("model", "dataset"):
        if key not in declared:
            raise ValueError(f"{path}: `{key}` is missing (see dragonfarm sweep --help).")
    declared = _numbers(declared)
    source = declared["dataset"].get("source") if isinstance(declared["dataset"], dict) else None
    if isinstance(source, str) and not Path(source).expanduser().is_absolute():
        declared["dataset"]["source"] = str((path.parent / source).resolve())
    return declared


def base_spec(declared: dict[str, Any]) -> dragon.RunSpec:
    """The RunSpec the file declares (its dataset read)."""
    model = declared["model"]
    values = {k: declared[k] for k in SPEC_KEYS if k in declared}
    values["model"] = {"name": model} if isinstance(model, str) else model
    spec = dragon.RunSpec.from_dict(values)
    return dataclasses.replace(spec, dataset=dataset_from_spec(spec.dataset))


def run_sweep(args: argparse.Namespace) -> int:
    declared = read_file(Path(args.file))
    options = {k: declared[k] for k in SWEEP_KEYS if k in declared and k != "space"}
    s = dragon.sweep(base_spec(declared), declared["space"], runs_dir=args.runs_dir, **options)
    if not args.wait:
        print(f"Sweep {s.id} started ({s.status()['n_trials']} trials); watch it with: "
              f"dragonfarm sweep-status {s.id}")  # fmt: skip
        return 0
    record = s.wait()
    _print_trials(s)
    return 0 if record["status"] == "succeeded" else 1


def _print_trials(s: dragon.Sweep) -> None:
    record = s.status()
    table = s.trials.drop(columns=["run_dir", "error"])
    print(f"Sweep {s.id}: {record['status']}, {record['objective']} ({record['direction']})")
    print(table.to_string(index=False))
    if record.get("error"):
        print(f"error: {record['error']}")


def sweep_status(args: argparse.Namespace) -> int:
    s = dragon.open_sweep(args.sweep, runs_dir=args.runs_dir)
    if args.json:
        json.dump(s.status(), sys.stdout, indent=2, default=str)
        print()
    else:
        _print_trials(s)
    return 0


def sweep_cancel(args: argparse.Namespace) -> int:
    record = dragon.sweep_cancel(args.sweep, runs_dir=args.runs_dir)
    print(f"Sweep {record['id']}: {record['status']}")
    return 0


def sweep_resume(args: argparse.Namespace) -> int:
    s = dragon.resume_sweep(args.sweep, runs_dir=args.runs_dir, wait=args.wait)
    if args.wait:
        _print_trials(s)
        return 0 if s.state == "succeeded" else 1
    print(f"Sweep {s.id} resumed; watch it with: dragonfarm sweep-status {s.id}")
    return 0


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser],
                 runs_dir_flag: Callable[[argparse.ArgumentParser], None]) -> None:  # fmt: skip
    """The sweep subcommands, made with the command line's `_command` and `_runs_dir_flag`."""
    p = command(sub, "sweep", "search a run's settings: the sweep a YAML or JSON file declares",
                run_sweep, epilog=__doc__.split("\n\n", 1)[1].split("\n\nA dataset")[0])  # fmt: skip
    p.add_argument("file", metavar="FILE", help="the sweep file (.yaml, .yml or .json)")
    p.add_argument("--wait", action="store_true", help="wait for it to end and print the trials")
    runs_dir_flag(p)
    p = command(sub, "sweep-status", "print a sweep's trials (or its record as JSON)",
                sweep_status)  # fmt: skip
    p.add_argument("sweep", metavar="ID", help="the sweep's id, or its record file")
    p.add_argument("--json", action="store_true", help="the whole record as JSON")
    runs_dir_flag(p)
    p = command(sub, "sweep-cancel", "stop a sweep (its trial's run keeps a checkpoint)",
                sweep_cancel)  # fmt: skip
    p.add_argument("sweep", metavar="ID", help="the sweep's id, or its record file")
    runs_dir_flag(p)
    p = command(sub, "sweep-resume", "go on with a cancelled or failed sweep", sweep_resume)
    p.add_argument("sweep", metavar="ID", help="the sweep's id, or its record file")
    p.add_argument("--wait", action="store_true", help="wait for it to end and print the trials")
    runs_dir_flag(p)
