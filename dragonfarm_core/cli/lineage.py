"""`dragonfarm lineage X`: what a run, a data file, a pipeline or an export came from and what
came from it (`dragon.lineage`), printed as a list or as JSON.

    dragonfarm lineage 20261207-101500-tiny-support
    dragonfarm lineage dragonfarm_runs/feedback/pairs-round1.jsonl --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.lineage.lineage import runs_dir_of


def lineage(args: argparse.Namespace, default_runs_dir: Callable[[], str]) -> int:
    # A path inside a runs folder names that folder; anything else is read in the usual one.
    runs_dir = args.runs_dir or runs_dir_of(args.x) or default_runs_dir()
    lin = dragon.lineage(args.x, runs_dir=runs_dir)
    if args.json:
        json.dump(lin.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(lin)
    return 0


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser],
                 default_runs_dir: Callable[[], str]) -> None:  # fmt: skip
    """The subcommand, made with commands.py's `_command`."""
    p = command(sub, "lineage", "print what a run, data file, pipeline or export came from and "
                "what came from it", lambda args: lineage(args, default_runs_dir))  # fmt: skip
    p.add_argument("x", metavar="THING", help="a run's id or folder, a data file, a feedback "
                   "export, a synthesized set, a pipeline id, a merged folder, a .gguf file, a "
                   "published repo id or an Ollama model's name")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print nodes and edges as JSON")
    p.add_argument("--runs-dir", default=None, metavar="DIR",
                   help="where runs live (default: the one THING lies in, else "
                   "$DRAGONFARM_RUNS_DIR, else ./dragonfarm_runs)")  # fmt: skip
