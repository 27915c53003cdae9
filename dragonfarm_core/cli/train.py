"""`dragonfarm train`: a dataset file, its mapping, the model and the settings, as one run.

    dragonfarm train tickets.csv --model dragonfarm/tiny-support \\
        --prompt '{subject}\\n\\n{body}' --response reply --epochs 2 --lora-r 8 --wait

The mapping flags say which columns hold what (--prompt/--response for SFT, --chosen/--rejected
for preference pairs, --reference for GRPO prompts, --conversations for a chat file); the method
follows from them unless --method names it. Every setting is a flag generated from its dataclass
(`cli_flags`), with the method's own defaults, and the run starts through the same call as the
Train tab's and the Python API's.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.cli import flags as cli_flags
from dragonfarm_core.cli.flags import field_defaults, values_of
from dragonfarm_core.data.dataset import DEFAULT_EVAL_FRAC, MIN_ROWS_FOR_DEFAULT_SPLIT
from dragonfarm_core.methods import METHODS
from dragonfarm_core.spec import DEFAULT_HARDWARE, DEFAULT_LORA

# Which mapping each kind of data uses, and the flags it reads (required, then optional).
MAPPERS = {
    "sft": ("map", ("prompt", "response"), ("system",)),
    "pairs": ("map_pairs", ("prompt", "chosen", "rejected"), ("system",)),
    "prompts": ("map_prompts", ("prompt",), ("reference", "system")),
}
SLOTS = ("prompt", "response", "chosen", "rejected", "reference", "system")
SLOT_HELP = {
    "prompt": "the user turn: a column name, or a template such as '{subject}\\n\\n{body}'",
    "response": "sft: the reply to learn (column or template)",
    "chosen": "dpo, orpo: the preferred reply (column or template)",
    "rejected": "dpo, orpo: the reply to move away from (column or template)",
    "reference": "grpo: the reference answer some rewards compare with (column)",
    "system": "a system prompt: a column, a template or plain text",
}


def groups() -> list[cli_flags.Group]:
    """Lora, TrainArgs (each method's defaults) and Hardware for every method, then each
    method's own group (PreferenceArgs for dpo and orpo, GrpoArgs for grpo) for its methods."""
    every = list(METHODS)
    out = [
        cli_flags.Group(dragon.Lora, "LoRA", "lora-", dict.fromkeys(every, values_of(DEFAULT_LORA))),
        cli_flags.Group(dragon.TrainArgs, "training", "",
                        {m: values_of(row.default_args) for m, row in METHODS.items()}),
        cli_flags.Group(dragon.Hardware, "hardware", "", dict.fromkeys(every, values_of(DEFAULT_HARDWARE))),
    ]  # fmt: skip
    users: dict[type, list[str]] = {}
    for row in METHODS.values():
        if row.settings is not None:
            users.setdefault(row.settings, []).append(row.name)
    for cls, names in users.items():  # one section: a flag two groups share (--beta) is one
        out.append(cli_flags.Group(cls, "method settings", "",
                                   dict.fromkeys(names, field_defaults(cls))))  # fmt: skip
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """DATA, --model, the mapping, the method, every setting, and how to run it."""
    d = {k: v.default for k, v in inspect.signature(dragon.train).parameters.items()}
    p.add_argument("data", metavar="DATA",
                   help="a CSV, TSV, JSON, JSONL, Parquet or .xlsx file (a chat file with "
                   "--conversations)")  # fmt: skip
    p.add_argument("--model", required=True,
                   help="a preset or Hub id, a model folder, or a succeeded run (id or folder) "
                   "to continue from")  # fmt: skip
    p.add_argument("--method", choices=list(METHODS), default=None,
                   help="default: dpo with --chosen/--rejected, grpo with --reference or "
                   "--reward, else sft")  # fmt: skip
    data = p.add_argument_group("data mapping (\\n and \\t in a template are a newline and a tab)")
    for slot in SLOTS:
        data.add_argument(f"--{slot}", default=None, metavar="TEMPLATE", help=SLOT_HELP[slot])
    data.add_argument("--conversations", action="store_true",
                      help="DATA is a JSON/JSONL file of {\"messages\": [...]} rows (sft)")  # fmt: skip
    data.add_argument("--format", default=None, help="the file's format, if not its extension")
    data.add_argument("--eval-frac", type=float, default=None, metavar="F",
                      help=f"share of the rows held out for evaluation (default: "
                      f"{DEFAULT_EVAL_FRAC}, none under {MIN_ROWS_FOR_DEFAULT_SPLIT} rows)")  # fmt: skip
    p.add_argument("--reward", action="append", type=cli_flags.parse_reward, default=[],
                   metavar="TYPE[:key=value,...]",
                   help="grpo, repeatable: e.g. numeric, regex:pattern=^T-\\d{4},weight=2, "
                   "length:max_chars=300 (options as dragon.reward's)")  # fmt: skip
    cli_flags.add_flags(p, groups(), list(METHODS))
    run = p.add_argument_group("the run")
    run.add_argument("--name", default=None, help="the run's name (default: from the model)")
    run.add_argument("--run-dir", default=None, metavar="DIR",
                     help="the run's own folder, new or empty (default: a new one in --runs-dir)")  # fmt: skip
    run.add_argument("--n-samples", type=int, default=d["n_samples"], metavar="N",
                     help="held-out prompts answered after training, for a first look")  # fmt: skip
    run.add_argument("--revision", default=None, help="the Hub model's branch, tag or commit")
    run.add_argument("--trust-remote-code", action="store_true",
                     help="run the model repository's own Python code (only for repos you trust)")  # fmt: skip
    run.add_argument("--wait", action="store_true",
                     help="follow it with a progress bar; exit 1 unless it succeeds")  # fmt: skip


def pick_method(args: argparse.Namespace) -> str:
    if args.method:
        return str(args.method)
    if args.chosen or args.rejected:
        return "dpo"
    return "grpo" if args.reference or args.reward else "sft"


def _template(text: str | None) -> str | None:
    return None if text is None else text.replace("\\n", "\n").replace("\\t", "\t")


def load_dataset(args: argparse.Namespace, method: str) -> dragon.Dataset:
    """DATA, read and mapped the way `method` trains on it (and split with --eval-frac)."""
    kinds = METHODS[method].mapping_kinds
    given = [slot for slot in SLOTS if getattr(args, slot) is not None]
    if args.conversations:
        if "conversations" not in kinds:
            raise ValueError(f"--conversations is sft data; {method} trains on {kinds[0]}.")
        if given:
            raise ValueError(f"--{given[0]} maps table columns; a --conversations file has none.")
        ds = dragon.conversations(args.data)
    else:
        kind = next(k for k in kinds if k in MAPPERS)
        mapper, required, optional = MAPPERS[kind]
        unused = [s for s in given if s not in required + optional]
        if unused:
            wanted = ", ".join(f"--{s}" for s in required)
            maybe = " or ".join(f"--{s}" for s in optional)
            raise ValueError(
                f"--{unused[0]} does not apply to {method}, which reads {wanted} "
                f"(and optionally {maybe})."
            )
        ds = dragon.dataset(args.data, format=args.format)
        missing = [s for s in required if getattr(args, s) is None]
        if missing:
            raise ValueError(
                f"{method} needs --{' and --'.join(missing)}: which column (or template) holds "
                f"it. {ds.label} has the columns {', '.join(map(repr, ds.columns))}."
            )
        slots = {s: _template(getattr(args, s)) for s in required + optional}
        ds = getattr(ds, mapper)(**slots)
    return ds if args.eval_frac is None else ds.split(eval_frac=args.eval_frac)


def start(args: argparse.Namespace, model: Any) -> dragon.Run:
    """Build the run's spec from the flags and start it on `model` (a Run, or a model id or
    folder) through the one start function; the caller follows it."""
    method = pick_method(args)
    row, every = METHODS[method], groups()
    chosen = [g for g in every if method in g.defaults]
    unused = set(cli_flags.given_flags(args, every)) - set(cli_flags.given_flags(args, chosen))
    if unused:
        raise ValueError(f"{sorted(unused)[0]} does not apply to {method}.")
    grpo = row.settings is dragon.GrpoArgs  # its rewards come from --reward
    if args.reward and not grpo:
        raise ValueError(f"--reward is for grpo; this run is {method}.")
    if grpo and not args.reward:
        raise ValueError(f"{method} needs at least one --reward, e.g. --reward numeric.")
    fits = dragon.recommended(model, method)  # what a flag not given takes, as train() does
    base = {dragon.Lora: values_of(fits.lora), dragon.TrainArgs: values_of(fits.args)}
    settings = {g.cls: cli_flags.read_group(args, g, method, base.get(g.cls)) for g in chosen
                if g.cls is not row.settings}  # fmt: skip
    method_args = None
    if row.settings is not None:
        group = next(g for g in chosen if g.cls is row.settings)
        method_args = cli_flags.read_group(
            args, group, method, **({"rewards": args.reward} if grpo else {})
        )
    spec = dragon.RunSpec(
        method,
        load_dataset(args, method),
        model,
        lora=settings[dragon.Lora],
        args=settings[dragon.TrainArgs],
        hardware=settings[dragon.Hardware],
        method_args=method_args,
        name=args.name,
        n_samples=args.n_samples,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
    )
    return dragon.start(spec, run_dir=args.run_dir, runs_dir=args.runs_dir)
