"""A failed feedback write never makes feedback unreadable, and loses no acknowledged event.

The write is made to fail for real: a child process appends an event under a file-size limit
(RLIMIT_FSIZE) just past the events file's end, so the kernel takes part of the line and then
refuses the rest (EFBIG), as a full disk does with ENOSPC. The torn line stays; the next event
starts on a fresh line, the readers (`dragon.feedback()`, the Feedback tab) skip the torn line
and say so, and every event that was acknowledged is read back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.conversation import feedback_store
from dragonfarm_core.conversation.feedback_store import (
    EVENTS_FILE,
    feedback_dir,
    read_events,
    record_event,
)
from dragonfarm_core.rundir import files
from ui.tabs import feedback as feedback_tab

ASK = [{"role": "user", "content": "My order arrived damaged."}]
# The child: append one event with only `room` more bytes allowed in any file it writes.
CUT_SHORT = textwrap.dedent("""
    import resource, signal, sys
    from dragonfarm_core.conversation.feedback_store import record_event
    runs_dir, room = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))
    try:
        record_event(runs_dir, kind="rating", messages=[{"role": "user", "content": "Hi"}],
                     reply="x" * 4000, verdict="down")
    except OSError as e:
        print(e.errno)
""")


def _rate(runs_dir: Path, reply: str, verdict: str = "up") -> dict:
    return record_event(runs_dir, kind="rating", messages=ASK, reply=reply, verdict=verdict)


def _fail_a_write(runs_dir: Path) -> None:
    """Append an event in a child process whose write the kernel cuts short."""
    events = feedback_dir(runs_dir) / EVENTS_FILE
    room = events.stat().st_size + 100  # the new line is ~4 KB: it gets 100 bytes
    done = subprocess.run([sys.executable, "-c", CUT_SHORT, str(runs_dir), str(room)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "27"  # EFBIG: the write failed, the caller was told
    assert events.stat().st_size == room and not events.read_bytes().endswith(b"\n")


def test_an_event_after_a_torn_write_is_kept_and_the_torn_line_reported(tmp_path):
    first = _rate(tmp_path, "Sorry! A new one is on its way.")
    _fail_a_write(tmp_path)
    second = _rate(tmp_path, "Please send a photo.", "down")  # acknowledged: it returned

    assert [e["id"] for e in read_events(tmp_path)] == [first["id"], second["id"]]
    events, damaged = feedback_store.read_events_checked(tmp_path)
    assert len(events) == 2 and len(damaged) == 1 and damaged[0].startswith("line 2: ")
    with pytest.warns(UserWarning, match=r"1 line\(s\) of .*events.jsonl cannot be read"):
        fb = dragon.feedback(tmp_path)
    assert list(fb.records["id"]) == [first["id"], second["id"]] and fb.damaged == damaged
    assert "1 damaged lines skipped" in repr(fb)
    assert len(fb.sft) == 1 and len(fb.pairs) == 1  # the liked and the disliked reply

    table, counts, _ = feedback_tab.show(tmp_path)
    assert len(table) == 2 and "**2 feedback events:**" in counts
    assert "cannot be read and are skipped" in counts and "line 2:" in counts


def test_appends_start_on_a_fresh_line_after_any_torn_one(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2, "b": "cut sh')  # a writer died mid-line
    files.append_jsonl(path, {"a": 3})
    files.append_jsonl(path, {"a": 4})
    assert path.read_bytes().endswith(b'cut sh\n{"a": 3}\n{"a": 4}\n')
    rows, problems = files.read_jsonl_checked(path)
    assert rows == [{"a": 1}, {"a": 3}, {"a": 4}]
    assert len(problems) == 1 and problems[0].startswith("line 2: it is not JSON (")


def test_damaged_and_odd_event_lines_are_skipped_and_said(tmp_path):
    kept = _rate(tmp_path, "Sorry!")
    odd = [b"\xff\xfe", b"[1, 2]", b'{"messages": 3, "reply": "x"}', b'{"reply": "\\ud800"}',
           json.dumps({**kept, "id": "e2", "reply": ["not", "text"]}).encode()]  # fmt: skip
    with open(feedback_dir(tmp_path) / EVENTS_FILE, "ab") as f:
        f.write(b"\n".join(odd) + b"\n")
    events, damaged = feedback_store.read_events_checked(tmp_path)
    assert [e["id"] for e in events] == [kept["id"]]
    where = [p.split(":")[0] for p in damaged]
    assert where == ["line 2", "line 3", "line 5", "an event without an id", "event e2"]
    assert "not UTF-8" in damaged[0] and "not an object" in damaged[1]
    assert "lone surrogate" in damaged[2] and "messages" in damaged[3] and "reply" in damaged[4]
    with pytest.warns(UserWarning):
        assert len(dragon.feedback(tmp_path).records) == 1


def test_two_feedback_calls_in_the_same_second_keep_both_files(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "now_iso", lambda: "2026-12-07T04:00:00+00:00")
    _rate(tmp_path, "Sorry! A new one is on its way.")
    first = dragon.feedback(tmp_path)
    _rate(tmp_path, "We will refund you.")
    second = dragon.feedback(tmp_path)
    assert first.sft_path != second.sft_path
    assert first.sft_path.name.startswith("sft-20261207-040000-")
    assert len(files.read_jsonl(first.sft_path)) == 1  # not overwritten by the second call
    assert len(files.read_jsonl(second.sft_path)) == 2
