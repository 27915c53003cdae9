"""The `dragonfarm` command line: a thin layer over the public API (`import dragonfarm_core`).

dragonfarm train DATA --model MODEL --prompt T --response T [--epochs 2 ...] [--wait]
dragonfarm generate RUN_OR_MODEL PROMPT... [--file prompts.txt]   # replies, printed
dragonfarm chat RUN_OR_MODEL                     # talk in the terminal (/help lists commands)
dragonfarm runs | status RUN | cancel RUN | resume RUN [--wait]
dragonfarm lineage RUN_OR_FILE [--json]          # what it came from, what came from it
dragonfarm merge RUN [--out DIR]                 # a standalone model folder (plain transformers)
dragonfarm export-gguf RUN_OR_DIR [--quant q8_0] [--out FILE]   # llama.cpp's GGUF, checked
dragonfarm publish RUN REPO [--what adapter] [--private]   # to the Hugging Face Hub, with a card
dragonfarm check | app | serve RUN_OR_MODEL      # the machine, the Gradio app, an OpenAI API
                                                 # (serve: a merged folder or a GGUF too)
dragonfarm users add NAME [--admin] | list | remove NAME   # who may log in (app --profile lab)

Runs live in --runs-dir, else DRAGONFARM_RUNS_DIR, else ./dragonfarm_runs (as for the app); a
RUN is a run's id there or its folder. Exit codes: 0 done, 1 a run failed or no reply came,
2 bad input (one line saying what is wrong), 130 interrupted. `dragonfarm COMMAND --help`
shows every flag with its default.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.auth.http_guard import ALLOWED_HOSTS_HELP, FORWARDED_ALLOW_IPS_HELP
from dragonfarm_core.auth.profiles import profile_names
from dragonfarm_core.cli import lineage as cli_lineage
from dragonfarm_core.cli import pack as cli_pack
from dragonfarm_core.cli import pipeline as cli_pipeline
from dragonfarm_core.cli import sweep as cli_sweep
from dragonfarm_core.cli import talk as cli_talk
from dragonfarm_core.cli import train as cli_train
from dragonfarm_core.cli import users as cli_users
from dragonfarm_core.inference import InferenceError
from dragonfarm_core.llamacpp import build as llama_cpp_build
from dragonfarm_core.rundir import files, location

DEFAULT_RUNS_DIR = "dragonfarm_runs"  # the local profile's (dragonfarm_core/auth/profiles.py)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Each flag's default after its help (none where it is unset, off or empty, which says
    nothing); descriptions and epilogs keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help, default = action.help or "", action.default
        if "%(default)" in help or not action.option_strings or default is argparse.SUPPRESS:
            return help
        if default is None or default is False or default == []:
            return help
        return f"{help} (default: %(default)s)"


def runs_dir_default() -> str:
    return os.environ.get(location.ENV_VAR, "").strip() or DEFAULT_RUNS_DIR


def open_run(ref: str, runs_dir: str) -> dragon.Run:
    """A run by its folder, or by its id in the runs dir (confined to it, as the app is)."""
    if files.is_run_dir(Path(ref).expanduser()):
        return dragon.open_run(ref)
    return dragon.open_run(ref, runs_dir=runs_dir)


def run_or_model(ref: str, runs_dir: str) -> Any:
    """A Run (a run folder, or an id in the runs dir), else the text as a model id or folder."""
    if Path(ref).expanduser().exists():
        return dragon.open_run(ref) if files.is_run_dir(Path(ref).expanduser()) else ref
    try:
        return dragon.open_run(ref, runs_dir=runs_dir)
    except (FileNotFoundError, ValueError):
        return ref  # a preset or Hub id; resolve_model says what is wrong with it


def _ref(run: dragon.Run, runs_dir: str) -> str:
    """How to name the run to the other commands: its id (with --runs-dir unless it is the
    default), or its folder when it lives elsewhere."""
    if run.dir.parent != Path(runs_dir).expanduser().resolve():
        return str(run.dir)
    return run.id if runs_dir == runs_dir_default() else f"{run.id} --runs-dir {runs_dir}"


def report_finished(run: dragon.Run, wait: bool, runs_dir: str) -> int:
    """Say where the run is; with `wait`, follow it (a progress bar) to its final state."""
    if not wait:
        print(f"Started run {run.id} in {run.dir}")
        print(f"Follow it with: dragonfarm status {_ref(run, runs_dir)}")
        return 0
    try:
        run.wait()
    except dragon.RunFailedError as e:
        print(f"dragonfarm: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nRun {run.id} keeps going; stop it with: dragonfarm cancel {_ref(run, runs_dir)}",
              file=sys.stderr)  # fmt: skip
        return 130
    metrics = run.status().get("metrics") or {}
    shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in metrics.items())  # fmt: skip
    print(f"Run {run.id} succeeded{': ' + shown if shown else ''} ({run.dir})")
    return 0


# --- commands --------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    facts = dragon.check(runs_dir=args.runs_dir, verbose=not args.json)
    if args.json:
        print(json.dumps(facts, indent=2))
    return 0


def _app(args: argparse.Namespace) -> int:
    from ui.layout import launch

    launch(
        runs_dir=args.runs_dir,
        host=args.host,
        port=args.port,
        profile=args.profile,
        allowed_hosts=args.allowed_hosts,
        forwarded_allow_ips=args.forwarded_allow_ips,
    )
    return 0


def _train(args: argparse.Namespace) -> int:
    run = cli_train.start(args, run_or_model(args.model, args.runs_dir))
    return report_finished(run, args.wait, args.runs_dir)


def _runs(args: argparse.Namespace) -> int:
    table = (dragon.archived_runs if args.archived else dragon.runs)(runs_dir=args.runs_dir)
    print(table.to_string(index=False) if len(table) else f"No runs in {args.runs_dir}.")
    return 0


def _status(args: argparse.Namespace) -> int:
    print(json.dumps(open_run(args.run, args.runs_dir).status(), indent=2))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    run = open_run(args.run, args.runs_dir)
    state = run.state
    if state not in files.ACTIVE_STATES:
        print(f"Run {run.id} is {state}; there is nothing to cancel.")
        return 0
    print(f"Run {run.id}: {dragon.cancel(run, timeout=args.timeout).state}")
    return 0


def _resume(args: argparse.Namespace) -> int:
    run = dragon.resume(open_run(args.run, args.runs_dir))
    return report_finished(run, args.wait, args.runs_dir)


def _merge(args: argparse.Namespace) -> int:
    from dragonfarm_core.export.merge import MergeError, merge_check

    try:
        path = dragon.merge(open_run(args.run, args.runs_dir), out_dir=args.out)
    except MergeError as e:
        print(f"dragonfarm merge: {e}", file=sys.stderr)
        return 1
    check = merge_check(path) or {}
    print(f"Merged into {path} (check: {check.get('prompts')} prompts, greedy tokens identical)")
    return 0


def _export_gguf(args: argparse.Namespace) -> int:
    from dragonfarm_core.export.gguf import GGUFError, LlamaCppMissing, describe_check, read_check

    path = Path(args.target).expanduser()
    source = path if path.is_dir() and not files.is_run_dir(path) else None
    try:
        target = source or open_run(args.target, args.runs_dir)
        out = dragon.export_gguf(target, out_file=args.out, quant=args.quant,
                                 llama_cpp_dir=args.llama_cpp)  # fmt: skip
    except (GGUFError, LlamaCppMissing) as e:
        print(f"dragonfarm export-gguf: {e}", file=sys.stderr)
        return 1
    record = read_check(out)
    size = out.stat().st_size / 2**20
    print(f"Exported {out} ({size:.1f} MiB); {describe_check(record) if record else 'unchecked'}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    from dragonfarm_core.export.publishing import PublishError

    try:
        url = dragon.publish(open_run(args.run, args.runs_dir), args.repo, what=args.what,
                             private=args.private, commit_message=args.message,
                             gguf=not args.no_gguf)  # fmt: skip
    except PublishError as e:
        print(f"dragonfarm publish: {e}", file=sys.stderr)
        return 1
    print(f"Published at {url}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    return cli_talk.generate(args, run_or_model(args.target, args.runs_dir))


def _chat(args: argparse.Namespace) -> int:
    return cli_talk.chat(args, run_or_model(args.target, args.runs_dir))


# --- the parser ------------------------------------------------------------------------------


def _command(sub: Any, name: str, help: str, func: Any, **kwargs: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help[:1].upper() + help[1:] + ".", formatter_class=Formatter,
        **kwargs,
    )  # fmt: skip
    p.set_defaults(func=func)
    return p


def _runs_dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", default=runs_dir_default(), metavar="DIR",
                   help=f"where runs live (${location.ENV_VAR}, else ./{DEFAULT_RUNS_DIR})")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dragonfarm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(sub, "train", "train a LoRA adapter on a dataset file", _train,
                 usage="dragonfarm train DATA --model MODEL [mapping] [settings] [--wait]")  # fmt: skip
    cli_train.add_arguments(p)
    _runs_dir_flag(p)

    p = _command(sub, "generate", "print replies from a run or a model", _generate)
    cli_talk.add_generate_arguments(p)
    _runs_dir_flag(p)
    p = _command(sub, "chat", "talk to a run or a model in the terminal, replies streaming", _chat,
                 epilog="In the chat:\n" + cli_talk.CHAT_HELP)  # fmt: skip
    cli_talk.add_chat_arguments(p)
    _runs_dir_flag(p)

    p = _command(sub, "runs", "list runs, newest first", _runs)
    p.add_argument("--archived", action="store_true", help="list the archived runs instead")
    _runs_dir_flag(p)

    for name, help, func in (
        ("status", "print a run's status as JSON", _status),
        ("cancel", "stop a run after its current step (a checkpoint is kept)", _cancel),
        ("resume", "continue a failed or cancelled run from its newest checkpoint", _resume),
    ):
        p = _command(sub, name, help, func)
        p.add_argument("run", metavar="RUN", help="the run's id in the runs dir, or its folder")
        _runs_dir_flag(p)
    sub.choices["cancel"].add_argument(
        "--timeout", type=float, default=inspect.signature(dragon.cancel).parameters["timeout"].default, metavar="S",
        help="seconds to wait for the trainer to stop before its processes are killed",
    )  # fmt: skip
    sub.choices["resume"].add_argument(
        "--wait", action="store_true", help="follow it to the end; exit 1 unless it succeeds"
    )

    p = _command(sub, "merge", "fold a run's adapters into its base: a standalone model", _merge)
    p.add_argument("run", metavar="RUN", help="the run's id in the runs dir, or its folder")
    p.add_argument("--out", default=None, metavar="DIR", help="default: the run's merged/ folder")
    _runs_dir_flag(p)

    p = _command(sub, "export-gguf", "convert a run's merged model (or a model folder) to GGUF "
                 "with llama.cpp, checked against it", _export_gguf,
                 epilog="llama.cpp: --llama-cpp, else LLAMA_CPP_DIR, else the cache that "
                 "dragonfarm build-llama-cpp builds (dragonfarm check says which).")  # fmt: skip
    p.add_argument("target", metavar="RUN_OR_DIR",
                   help="a run (merged first if needed) or a merged model folder")  # fmt: skip
    p.add_argument("--quant", default="q8_0", metavar="TYPE",
                   help="f16, bf16, q8_0, or a llama-quantize type such as q4_k_m")  # fmt: skip
    p.add_argument("--out", default=None, metavar="FILE",
                   help="default: beside the folder, <folder>-<quant>.gguf")  # fmt: skip
    p.add_argument("--llama-cpp", default=None, metavar="DIR", help="a llama.cpp tree, built")
    _runs_dir_flag(p)

    p = _command(sub, "build-llama-cpp", "build llama.cpp's converter and CPU binaries for GGUF "
                 "export, once (about 10 minutes on 2 cores)", llama_cpp_build.run,
                 epilog="The pinned llama-cpp-python source distribution is fetched with pip; "
                 "a complete build is reused, an interrupted one resumed.")  # fmt: skip
    llama_cpp_build.add_arguments(p)

    p = _command(sub, "publish", "upload a run's model to the Hugging Face Hub, with a model card",
                 _publish, epilog="The token: HF_TOKEN, else the login cache (`hf auth login`); "
                 "HF_ENDPOINT for another hub.")  # fmt: skip
    p.add_argument("run", metavar="RUN", help="the run's id in the runs dir, or its folder")
    p.add_argument("repo", metavar="REPO", help="the repo: yourname/model, or model (yours)")
    p.add_argument("--what", default="merged", choices=["merged", "adapter"],
                   help="the merged model (merged first if needed), or the LoRA adapter alone")  # fmt: skip
    p.add_argument("--private", action="store_true", help="create the repo private")
    p.add_argument("--message", default=None, help="the commit message")
    p.add_argument("--no-gguf", action="store_true", help="leave the run's GGUF files out")
    _runs_dir_flag(p)

    cli_pipeline.add_commands(sub, _command, _runs_dir_flag)
    cli_sweep.add_commands(sub, _command, _runs_dir_flag)
    cli_pack.add_commands(sub, _command, _runs_dir_flag)
    cli_lineage.add_commands(sub, _command, runs_dir_default)
    cli_users.add_commands(sub, _command)

    p = _command(sub, "check", "report versions, the training device and why", _check)
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    _runs_dir_flag(p)
    p = _command(sub, "app", "start the Gradio app", _app)
    p.add_argument("--runs-dir", default=None, metavar="DIR",
                   help=f"${location.ENV_VAR}, else the profile's (./{DEFAULT_RUNS_DIR} locally); "
                   "with --profile lab the lab's root (unless $DRAGONFARM_LAB_ROOT)")  # fmt: skip
    p.add_argument("--host", default=None, help="default: the profile's (127.0.0.1 locally)")
    p.add_argument("--port", type=int, default=7860, help="the port to listen on")
    p.add_argument("--profile", default=None, choices=profile_names(),
                   help="defaults for where it runs (default: local)")  # fmt: skip
    p.add_argument("--allowed-hosts", default=None, metavar="NAMES", help=ALLOWED_HOSTS_HELP)
    p.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                   help=FORWARDED_ALLOW_IPS_HELP)  # fmt: skip
    sub.add_parser(
        "serve",
        help="serve a run, a model, a merged folder or a GGUF as an OpenAI-compatible API "
        "(dragonfarm serve --help)",
    )
    return parser


def _warn(message: Any, category: Any, *_: Any, **__: Any) -> None:
    """Warnings (rows dropped from a dataset, ...) as one line, without the source line."""
    print(f"dragonfarm: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # serve owns its flags (see dragonfarm_core/serve/server.py)
        from dragonfarm_core.serve.server import main as serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    warnings.showwarning = _warn
    try:
        return int(args.func(args))
    except dragon.RunFailedError as e:
        print(f"dragonfarm: {e}", file=sys.stderr)
        return 1
    except InferenceError as e:
        print(f"dragonfarm {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ndragonfarm: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, LookupError, OSError, RuntimeError) as e:
        # The package's own errors (SettingsError, DatasetError, ModelError, RewardError, ...)
        # say what is wrong and what to do; a traceback would only hide that.
        print(f"dragonfarm {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
