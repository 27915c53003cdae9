"""The lab profile's users file, its login throttle and its session expiry, and `dragonfarm
users` run as an admin runs it (`python -m dragonfarm_core.cli users ...` in a subprocess).

The file never holds a password, only salted scrypt hashes (two users with one password get
different ones); it is mode 0600; a wrong password, an unknown name and a locked name all fail.
The throttle and the token table are driven by a fake clock, so the windows are checked to the
second without waiting.
"""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import pytest

from dragonfarm_core.auth import users
from dragonfarm_core.auth.login_guard import ExpiringTokens
from dragonfarm_core.auth.login_throttle import FIRST_LOCK_S, FORGET_S, MAX_LOCK_S, LoginThrottle
from tests.cli.test_cli import cli

PASSWORD = "correct horse battery"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "lab" / users.USERS_FILE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_file_holds_salted_hashes_never_the_password(path: Path):
    users.add_user(path, "alice", PASSWORD, admin=True)
    users.add_user(path, "bob", PASSWORD)
    text = path.read_text()
    assert PASSWORD not in text and PASSWORD.encode().hex() not in text
    table = json.loads(text)["users"]
    assert table["alice"]["kdf"] == "scrypt" and table["alice"]["n"] >= 2**14
    assert table["alice"]["salt"] != table["bob"]["salt"]
    assert table["alice"]["hash"] != table["bob"]["hash"]  # one password, two hashes
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [(u["name"], u["admin"]) for u in users.list_users(path)] == [
        ("alice", True),
        ("bob", False),
    ]
    assert users.is_admin(path, "alice") and not users.is_admin(path, "bob")


@pytest.mark.slow
def test_verify_takes_only_the_right_password_of_a_known_user(path: Path):
    users.add_user(path, "alice", PASSWORD)
    assert users.verify(path, "alice", PASSWORD)
    assert not users.verify(path, "alice", PASSWORD + "!")
    assert not users.verify(path, "alice", "")
    assert not users.verify(path, "mallory", PASSWORD)  # unknown name
    assert not users.verify(path, "../alice", PASSWORD)  # not a name at all
    users.add_user(path, "alice", "a new password", replace=True)
    assert users.verify(path, "alice", "a new password")
    assert not users.verify(path, "alice", PASSWORD)
    users.remove_user(path, "alice")
    assert not users.verify(path, "alice", "a new password") and not users.exists(path, "alice")


@pytest.mark.parametrize("name", ["", ".hidden", "..", "a/b", "a b", "x" * 33, "é", "bob\n"])
def test_a_name_that_is_no_folder_name_is_refused(path: Path, name: str):
    with pytest.raises(ValueError, match="is not a user name"):
        users.add_user(path, name, PASSWORD)
    assert not path.exists()


def test_duplicates_short_passwords_and_unknown_removals_are_refused(path: Path):
    users.add_user(path, "alice", PASSWORD)
    with pytest.raises(ValueError, match="already a user 'alice'.*--replace"):
        users.add_user(path, "Alice", PASSWORD)  # one folder per name, whatever its case
    with pytest.raises(ValueError, match="at least 8 characters"):
        users.add_user(path, "bob", "short")
    with pytest.raises(LookupError, match="No user 'bob'"):
        users.remove_user(path, "bob")


@pytest.mark.slow
def test_concurrent_adds_lose_nobody(path: Path):
    names = [f"user{i}" for i in range(6)]
    threads = [threading.Thread(target=users.add_user, args=(path, n, PASSWORD)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [u["name"] for u in users.list_users(path)] == names


def test_an_older_cheaper_hash_still_checks_and_is_upgraded_at_login(path: Path, monkeypatch):
    with monkeypatch.context() as old:
        old.setattr(users, "SCRYPT_COST", {"n": 2**14, "r": 8, "p": 1})  # before Dec. 2026
        users.add_user(path, "alice", PASSWORD)
    assert users.SCRYPT_COST["n"] >= 2**17  # OWASP's figure for scrypt
    before = json.loads(path.read_text())["users"]["alice"]
    assert before["n"] == 2**14
    assert not users.verify(path, "alice", "wrong password")
    assert json.loads(path.read_text())["users"]["alice"] == before  # a wrong one changes nothing
    assert users.verify(path, "alice", PASSWORD)
    after = json.loads(path.read_text())["users"]["alice"]
    assert (after["n"], after["r"], after["p"]) == (2**17, 8, 1) and after["hash"] != before["hash"]
    assert after["added"] == before["added"] and users.verify(path, "alice", PASSWORD)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_checks_reserved_at_once_are_no_more_than_one_after_another():
    throttle = LoginThrottle(clock=Clock())
    let_through = [throttle.begin("alice", "10.0.0.1") == 0 for _ in range(60)]
    assert sum(let_through) == throttle.free_per_name + 1  # the free ones and the one that locks
    for _ in range(sum(let_through)):
        throttle.end("alice", "10.0.0.1", False)
    assert throttle.wait_s("alice", None) == FIRST_LOCK_S and throttle.in_flight == {}
    assert throttle.begin("bob", "10.0.0.1") == 0  # another name, the address still free
    throttle.end("bob", "10.0.0.1", True)


def test_a_name_is_locked_after_its_free_failures_for_a_doubling_window():
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    for _ in range(throttle.free_per_name):
        throttle.failed("alice", "10.0.0.1")
        assert throttle.wait_s("alice", "10.0.0.1") == 0  # typos are free
    throttle.failed("alice", "10.0.0.1")
    assert throttle.wait_s("alice", "10.0.0.2") == FIRST_LOCK_S  # from any address
    assert throttle.wait_s("ALICE ", None) == FIRST_LOCK_S  # the name as Gradio strips it
    assert throttle.wait_s("bob", "10.0.0.1") == 0  # the address is not locked yet
    clock.now += FIRST_LOCK_S
    assert throttle.wait_s("alice", "10.0.0.1") == 0
    throttle.failed("alice", "10.0.0.1")
    assert throttle.wait_s("alice", None) == 2 * FIRST_LOCK_S
    for _ in range(20):
        throttle.failed("alice", "10.0.0.1")
    assert throttle.wait_s("alice", None) == MAX_LOCK_S
    clock.now += MAX_LOCK_S
    throttle.succeeded("alice")
    assert throttle.wait_s("alice", None) == 0


def test_an_address_trying_many_names_is_locked_too():
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    for i in range(throttle.free_per_address + 1):
        throttle.failed(f"name{i}", "10.0.0.9")
    assert throttle.wait_s("someone-else", "10.0.0.9") == FIRST_LOCK_S
    assert throttle.wait_s("someone-else", "10.0.0.10") == 0


def test_failures_are_forgotten_an_hour_after_the_last():
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    for _ in range(throttle.free_per_name):
        throttle.failed("alice", None)
    clock.now += FORGET_S + 1
    throttle.failed("alice", None)  # counts as the first again
    assert throttle.wait_s("alice", None) == 0


def test_a_session_token_expires_and_ends_with_its_user():
    clock, present = Clock(), {"alice", "bob"}
    tokens = ExpiringTokens(12 * 3600, present.__contains__, clock=clock)
    tokens["t-alice"], tokens["t-bob"] = "alice", "bob"
    assert tokens.get("t-alice") == "alice" and "t-bob" in tokens
    clock.now += 12 * 3600 - 1
    assert tokens.get("t-alice") == "alice"
    present.discard("bob")  # `dragonfarm users remove bob`
    assert tokens.get("t-bob") is None and "t-bob" not in tokens
    clock.now += 2
    assert tokens.get("t-alice") is None and "t-alice" not in tokens
    assert tokens.get("never-issued") is None and len(tokens) == 0


@pytest.mark.slow
def test_users_commands_through_the_real_cli(tmp_path: Path):
    root = tmp_path / "lab"
    added = cli("users", "add", "alice", "--admin", "--password-stdin", "--lab-root", str(root),
                input=PASSWORD + "\n")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "Added alice as an admin" in added.stdout
    env_added = cli("users", "add", "bob", "--password-stdin", input=PASSWORD + "\n",
                    DRAGONFARM_LAB_ROOT=str(root))  # fmt: skip
    assert env_added.returncode == 0, env_added.stderr
    assert users.verify(root / users.USERS_FILE, "bob", PASSWORD)
    assert PASSWORD not in (root / users.USERS_FILE).read_text()

    listed = cli("users", "list", "--lab-root", str(root))
    lines = listed.stdout.splitlines()
    assert listed.returncode == 0 and len(lines) == 2
    assert lines[0].split()[:2] == ["alice", "admin"] and lines[1].split()[:2] == ["bob", "user"]

    bad = cli("users", "add", "../x", "--password-stdin", "--lab-root", str(root), input="x" * 9)
    assert bad.returncode == 2 and "is not a user name" in bad.stderr  # one line, no traceback

    removed = cli("users", "remove", "bob", "--lab-root", str(root))
    assert removed.returncode == 0 and "Removed bob" in removed.stdout
    assert [u["name"] for u in users.list_users(root / users.USERS_FILE)] == ["alice"]


def test_users_add_asks_twice_and_refuses_two_different_passwords(monkeypatch, path: Path):
    from dragonfarm_core.cli import users as cli_users

    answers = iter([PASSWORD, PASSWORD + "x"])
    monkeypatch.setattr(cli_users.getpass, "getpass", lambda prompt: next(answers))
    with pytest.raises(ValueError, match="passwords differ"):
        cli_users.read_password(from_stdin=False)
    answers = iter([PASSWORD, PASSWORD])
    assert cli_users.read_password(from_stdin=False) == PASSWORD
