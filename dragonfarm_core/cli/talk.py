"""`dragonfarm generate` and `dragonfarm chat`: replies from a run or a model, in the terminal.

    dragonfarm generate RUN_OR_MODEL "My thermostat keeps dropping off Wi-Fi." --temperature 0
    dragonfarm chat RUN_OR_MODEL --system "You are a concise support agent."

Both go through the public API (`dragon.generate`, `dragon.chat(...).say(text, on_token=...)`),
so they answer through the session's backend like Python does; their flags' defaults are read
from those functions' signatures. The chat prints each reply as it streams and takes a few
/commands; a turn that fails is reported and the conversation goes on.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.inference import InferenceError

CHAT_HELP = """\
/reset        forget the conversation (the system prompt stays)
/undo         drop the last exchange
/retry        ask again for the last reply
/up, /down    rate the last reply (saved as feedback in the runs dir)
/save PATH    write the transcript as JSON
/exit         end (so do Ctrl-D and Ctrl-C)"""


def _sampling_flags(p: argparse.ArgumentParser, fn: Any) -> None:
    d = {k: v.default for k, v in inspect.signature(fn).parameters.items()}
    p.add_argument("target", metavar="RUN_OR_MODEL",
                   help="a run (id or folder), a preset or Hub id, or a model folder")  # fmt: skip
    p.add_argument("--system", default=None, help="a system prompt")
    p.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"], metavar="N",
                   help="longest reply, in tokens")  # fmt: skip
    p.add_argument("--temperature", type=float, default=d["temperature"], metavar="T",
                   help="0 is greedy (the same reply every time); higher is more varied")  # fmt: skip
    p.add_argument("--top-p", type=float, default=d["top_p"], metavar="P",
                   help="sample among the likeliest tokens that cover this probability")  # fmt: skip
    p.add_argument("--base", action="store_true",
                   help="answer with a run's base model, without its adapter")  # fmt: skip


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    _sampling_flags(p, dragon.generate)
    p.add_argument("prompt", nargs="*", metavar="PROMPT", default=[],
                   help="prompts to answer, each one argument")  # fmt: skip
    p.add_argument("--file", metavar="PATH", default=None,
                   help="more prompts, one per line ('-' reads them from stdin)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print [{prompt, reply}, ...] as JSON")


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    _sampling_flags(p, dragon.chat)
    p.add_argument("--context-window", type=int, default=None, metavar="TOKENS",
                   help="leave the oldest turns out once the prompt would pass this size")  # fmt: skip


def _prompts(args: argparse.Namespace) -> list[str]:
    prompts = list(args.prompt)
    if args.file is not None:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        prompts += [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError("Nothing to answer: give PROMPT arguments, or --file with one per line.")
    return prompts


def generate(args: argparse.Namespace, target: Any) -> int:
    """Print the replies of `target` (a Run, or a model id or folder) to the prompts."""
    prompts = _prompts(args)
    replies = dragon.generate(
        target,
        prompts,
        system=args.system,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        base=args.base,
    )
    pairs = list(zip(prompts, replies, strict=True))
    if args.json:
        print(json.dumps([{"prompt": p, "reply": r} for p, r in pairs], indent=2))
    elif len(pairs) == 1:
        print(pairs[0][1])
    else:
        print("\n\n".join(f"> {p}\n{r}" for p, r in pairs))
    return 0


def _say(talk: dragon.Chat, text: str, regenerate: bool = False) -> None:
    """One reply, printed as it streams; a failed turn is reported and the loop goes on."""

    def show(piece: str) -> None:
        print(piece, end="", flush=True)

    try:
        talk.regenerate(on_token=show) if regenerate else talk.say(text, on_token=show)
    except (InferenceError, ValueError) as e:
        print(f"dragonfarm: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print(" [stopped]", end="")  # the turn was not kept; the conversation goes on
    print(flush=True)


def _command(talk: dragon.Chat, line: str) -> bool:
    """Run a /command; False when the chat should end."""
    command, _, rest = line.partition(" ")
    try:
        if command in ("/exit", "/quit"):
            return False
        if command == "/reset":
            talk.reset()
            print("(conversation forgotten)")
        elif command == "/undo":
            talk.undo()
            print("(last exchange dropped)")
        elif command == "/retry":
            _say(talk, "", regenerate=True)
        elif command in ("/up", "/down"):
            talk.rate(command[1:])
            print(f"(rated {command[1:]})")
        elif command == "/save" and rest.strip():
            print(f"(saved {talk.save(rest.strip())})")
        else:
            print(CHAT_HELP)
    except (ValueError, OSError) as e:
        print(f"dragonfarm: {e}", file=sys.stderr)
    return True


def chat(args: argparse.Namespace, target: Any) -> int:
    """Talk to `target` until /exit or the end of the input."""
    talk = dragon.chat(
        target,
        system=args.system,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        base=args.base,
        runs_dir=args.runs_dir,
        context_window=args.context_window,
    )
    interactive = sys.stdin.isatty()  # piped input gets no prompt in its output
    print(f"Chatting with {talk.model_name}; /help lists commands, Ctrl-D ends.", file=sys.stderr)
    while True:
        try:
            line = input("you> " if interactive else "").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if line.startswith("/"):
            if not _command(talk, line):
                return 0
        elif line:
            _say(talk, line)
