"""The local backend's process handling, with a fake worker that speaks the same protocol.

The real worker is exercised in test_worker.py (slow); here a torch-free stand-in makes the
worker hang, fail, die once or die every time, so restarts, timeouts and worker_stop are
checked in well under a second each.
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from dragonfarm_core.inference import (
    InferenceError,
    InferenceTimeout,
    ModelSpec,
    Sampling,
    backend_local,
    local,
    worker_stop,
)

HERE = Path(__file__).resolve().parent
SPEC = ModelSpec(base="/models/tiny")


@pytest.fixture(autouse=True)
def fake_worker(monkeypatch, tmp_path):
    monkeypatch.setenv("DRAGONFARM_WORKER_MODULE", "fake_worker")
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.setenv("FAKE_WORKER_MARKER", str(tmp_path / "marker"))
    worker_stop()
    yield
    worker_stop()


def say(text):
    return [{"role": "user", "content": text}]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill 0; its status file says whether it is gone
    state = Path(f"/proc/{pid}/stat")
    return state.exists() and state.read_text().split()[2] != "Z"


def test_chat_streams_and_generate_batches_in_one_worker():
    b = backend_local()
    pieces = []
    assert (
        b.chat(SPEC, say("hello big world"), Sampling(), pieces.append) == "echo: hello big world"
    )
    assert "".join(pieces) == "echo: hello big world"
    assert b.generate(SPEC, [say("a"), say("b")], Sampling()) == ["echo: a", "echo: b"]
    assert b.generate(SPEC, [], Sampling()) == []
    status = b.status()
    assert status["calls"] == 3  # one process answered all of them
    assert status["argv"] == ["--device", "auto", "--dtype", "auto"]


def test_worker_error_is_reported_and_the_worker_lives_on():
    b = backend_local()
    pid = b.status()["pid"]
    with pytest.raises(InferenceError, match="asked to fail"):
        b.chat(SPEC, say("fail"), Sampling())
    assert b.status()["pid"] == pid


def test_a_worker_that_dies_once_is_restarted_and_the_request_retried():
    b = backend_local()
    first = b.status()["pid"]
    assert b.chat(SPEC, say("die-once"), Sampling()) == "echo: die-once"
    assert b.status()["pid"] != first


def test_a_worker_that_dies_twice_is_a_clear_error():
    b = backend_local()
    with pytest.raises(InferenceError, match="(?s)died twice.*fake worker starting"):
        b.chat(SPEC, say("die"), Sampling())
    assert local._worker is None
    assert b.chat(SPEC, say("back"), Sampling()) == "echo: back"  # the next call starts afresh


def test_killing_the_worker_mid_request_restarts_it():
    b = backend_local()
    pid = b.status()["pid"]
    pieces = []

    def on_token(piece):
        pieces.append(piece)
        if len(pieces) == 1:  # the first piece arrived: the worker is mid-request
            os.kill(pid, signal.SIGKILL)

    reply = b.chat(SPEC, say("slow-once"), Sampling(), on_token)
    assert reply == "echo: slow-once"
    assert not alive(pid) and b.status()["pid"] != pid


def test_a_silent_worker_times_out_and_is_stopped():
    b = backend_local(timeout=0.5)
    pid = b.status()["pid"]
    started = time.monotonic()
    with pytest.raises(InferenceTimeout, match="silent for 0.5 s"):
        b.chat(SPEC, say("hang"), Sampling())
    assert time.monotonic() - started < 5
    assert local._worker is None and not alive(pid)


def test_worker_stop_frees_it_and_the_next_call_starts_it():
    b = backend_local()
    pid = b.status()["pid"]
    assert worker_stop() is True
    assert not alive(pid)
    assert worker_stop() is False
    assert b.chat(SPEC, say("again"), Sampling()) == "echo: again"
    assert b.status()["pid"] != pid


def test_keep_loaded_false_stops_after_each_call():
    b = backend_local(keep_loaded=False)
    assert b.chat(SPEC, say("once"), Sampling()) == "echo: once"
    assert local._worker is None


def test_other_settings_restart_the_worker():
    pid = backend_local().status()["pid"]
    status = backend_local(device="cpu", dtype="float32").status()
    assert status["pid"] != pid and status["argv"] == ["--device", "cpu", "--dtype", "float32"]


def test_requests_from_threads_take_turns():
    b = backend_local()
    replies = {}

    def ask(i):
        replies[i] = b.chat(SPEC, say(f"n{i}"), Sampling())

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert replies == {i: f"echo: n{i}" for i in range(6)}


def test_no_model_and_bad_settings_are_refused():
    with pytest.raises(ValueError, match="needs a model"):
        backend_local().chat(None, say("x"), Sampling())
    with pytest.raises(ValueError, match="device"):
        backend_local(device="tpu")
    with pytest.raises(ValueError, match="dtype"):
        backend_local(dtype="int3")
    assert repr(backend_local()) == "backend_local(keep_loaded=True, device='auto', dtype='auto')"
