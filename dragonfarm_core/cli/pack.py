"""`dragonfarm pack RUN_DIR` and `dragonfarm import RUN RESULTS_ZIP`: train a run elsewhere.

    dragonfarm pack dragonfarm_runs/20260914-101500-tiny-support --provider colab
    dragonfarm import 20260914-101500-tiny-support ~/Downloads/dragonfarm-results-....zip

pack bundles an existing run as it is (dragon.pack_run: a run written here and not trained, or
one that failed or was cancelled here) and prints the zip, the notebook and the provider's steps.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.bundles.remote import PROVIDERS
from dragonfarm_core.rundir import files


def _open(ref: str, runs_dir: str) -> dragon.Run:
    if files.is_run_dir(Path(ref).expanduser()):
        return dragon.open_run(ref)
    return dragon.open_run(ref, runs_dir=runs_dir)


def _pack(args: argparse.Namespace) -> int:
    run = dragon.pack_run(_open(args.run, args.runs_dir))
    info = dragon.remote(run, args.provider, open=args.open)
    print(f"Bundled run {run.id}.\n  zip:      {info['bundle']}\n  notebook: {info['notebook']}")
    print(f"On {args.provider} ({info['url']}):")
    for n, step in enumerate(info["steps"], 1):
        print(f"  {n}. {step}")
    return 0


def _import(args: argparse.Namespace) -> int:
    run = dragon.import_results(_open(args.run, args.runs_dir), args.results)
    print(f"Imported run {run.id}: {run.status()['state']}.")
    return 0


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser],
                 runs_dir_flag: Callable[[argparse.ArgumentParser], None]) -> None:  # fmt: skip
    """Add pack and import to the dragonfarm command's subparsers."""
    p = command(sub, "pack", "bundle a run to train on a cloud GPU (a zip and a notebook)", _pack)
    p.add_argument("run", metavar="RUN_DIR", help="the run's folder, or its id in the runs dir")
    p.add_argument("--provider", default="colab", choices=[r["provider"] for r in PROVIDERS],
                   help="whose steps to print")  # fmt: skip
    p.add_argument("--open", action="store_true", help="open the provider in the browser")
    runs_dir_flag(p)
    p = command(sub, "import", "bring a run's results zip from the cloud GPU back into it",
                _import)  # fmt: skip
    p.add_argument("run", metavar="RUN", help="the run's folder, or its id in the runs dir")
    p.add_argument("results", metavar="RESULTS_ZIP", help="dragonfarm-results-<run id>.zip")
    runs_dir_flag(p)
