"""`dragonfarm users add|list|remove`: who may log in to the lab profile's app.

    dragonfarm users add alice --admin          # asks for the password twice
    echo "$PASSWORD" | dragonfarm users add bob --password-stdin
    dragonfarm users list
    dragonfarm users remove bob                 # their runs stay in users/bob/

The users file is `<lab root>/users.json`; the lab root is --lab-root, else DRAGONFARM_LAB_ROOT,
else ./dragonfarm_lab (the app's: `dragonfarm app --profile lab [--runs-dir ROOT]`).
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core.auth import users
from dragonfarm_core.auth.profiles import DEFAULT_LAB_ROOT, LAB_ROOT_ENV, lab_root_for


def users_file(args: argparse.Namespace) -> Path:
    root = Path(args.lab_root).expanduser().resolve() if args.lab_root else lab_root_for(None)
    return root / users.USERS_FILE


def read_password(from_stdin: bool) -> str:
    """The new password: one line of stdin, or asked twice at the terminal (not echoed)."""
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("Password: ")
    if getpass.getpass("Password again: ") != first:
        raise ValueError("The two passwords differ; nothing was changed. Try again.")
    return first


def _add(args: argparse.Namespace) -> int:
    path = users_file(args)
    users.add_user(path, args.name, read_password(args.password_stdin), admin=args.admin,
                   replace=args.replace)  # fmt: skip
    role = "an admin" if args.admin else "a user"
    print(f"Added {args.name} as {role} to {path}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    path = users_file(args)
    rows = users.list_users(path)
    if not rows:
        print(f"No users in {path}; add one with: dragonfarm users add NAME --admin")
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        added = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["added"])) if r["added"] else ""
        print(f"{r['name']:<{width}}  {'admin' if r['admin'] else 'user ':5}  added {added}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    path = users_file(args)
    users.remove_user(path, args.name)
    print(f"Removed {args.name} from {path}; their runs stay in {path.parent / 'users'}.")
    return 0


def _no_action(args: argparse.Namespace) -> int:
    print("dragonfarm users: give an action: add, list or remove (see dragonfarm users --help)",
          file=sys.stderr)  # fmt: skip
    return 2


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """`dragonfarm users` and its three subcommands, made with cli.py's `_command`."""
    p = command(sub, "users", "manage who may log in to the lab profile's app", _no_action,
                epilog=__doc__.split("\n\n")[1])  # fmt: skip
    inner = p.add_subparsers(dest="users_command", metavar="ACTION")
    for name, help, func in (
        ("add", "add a user (asks for the password twice)", _add),
        ("list", "list the users and who is admin", _list),
        ("remove", "remove a user (their runs stay)", _remove),
    ):
        q = command(inner, name, help, func)
        if name != "list":
            q.add_argument("name", metavar="NAME", help="1-32 letters, digits, '-', '_' or '.'")
        q.add_argument("--lab-root", default=None, metavar="DIR",
                       help=f"the lab's root (${LAB_ROOT_ENV}, else ./{DEFAULT_LAB_ROOT})")  # fmt: skip
    add = inner.choices["add"]
    add.add_argument("--admin", action="store_true", help="may see every user's runs, read-only")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from one line of stdin (for scripts)")  # fmt: skip
    add.add_argument("--replace", action="store_true", help="set a new password for a user")
