"""The `dragonfarm` command line: a thin layer over the public API.

dragonfarm check                      # what this machine trains on, and why
dragonfarm app [--runs-dir DIR]       # the Gradio app (same as `python app.py`)
dragonfarm runs [--runs-dir DIR]      # the runs table
dragonfarm status RUN_DIR             # one run's status, as JSON
dragonfarm serve RUN_OR_MODEL [--host 127.0.0.1] [--port 8000]   # an OpenAI-compatible API
"""

from __future__ import annotations

import argparse
import json
import sys

from dragonfarm_core.http_guard import ALLOWED_HOSTS_HELP


def _check(args: argparse.Namespace) -> int:
    from dragonfarm_core.environment import check

    facts = check(runs_dir=args.runs_dir, verbose=not args.json)
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
    )
    return 0


def _runs(args: argparse.Namespace) -> int:
    import dragonfarm_core as dragon

    table = dragon.runs(runs_dir=args.runs_dir)
    print(table.to_string(index=False) if len(table) else "No runs yet.")
    return 0


def _status(args: argparse.Namespace) -> int:
    import dragonfarm_core as dragon

    print(json.dumps(dragon.open_run(args.run).status(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dragonfarm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="report versions, the training device and why")
    p.add_argument("--runs-dir", default=None)
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    p.set_defaults(func=_check)
    p = sub.add_parser("app", help="start the Gradio app")
    p.add_argument("--runs-dir", default=None)
    p.add_argument("--host", default=None, help="default: the profile's (127.0.0.1 locally)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--profile", default=None, choices=["local", "lab", "spaces"])
    p.add_argument("--allowed-hosts", default=None, metavar="NAMES", help=ALLOWED_HOSTS_HELP)
    p.set_defaults(func=_app)
    p = sub.add_parser("runs", help="list runs, newest first")
    p.add_argument("--runs-dir", default=None)
    p.set_defaults(func=_runs)
    p = sub.add_parser("status", help="print a run's status as JSON")
    p.add_argument("run", help="the run directory")
    p.set_defaults(func=_status)
    sub.add_parser(
        "serve", help="serve a run or model as an OpenAI-compatible API (dragonfarm serve --help)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # serve owns its flags (see dragonfarm_core/serve.py)
        from dragonfarm_core.serve import main as serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"dragonfarm: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
