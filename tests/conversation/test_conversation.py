"""`chat`: history, streaming, undo/regenerate, feedback events, the context window, transcripts.

A scripted backend stands in for the model and records exactly what each turn sent, so these
run without a model. tests/inference/test_worker.py chats with a real tiny model (slow).
"""

import json

import pytest

from dragonfarm_core.conversation.chat import chat, chat_load
from dragonfarm_core.conversation.feedback_store import read_events
from dragonfarm_core.inference import InferenceError, backend_local


class Scripted:
    """Replies "reply <n> to <last user text>", word by word when streaming."""

    name = "server"
    model = "scripted-model"

    def __init__(self, fail=False):
        self.sent, self.fail = [], fail

    def chat(self, model, messages, sampling, on_token=None):
        self.sent.append([dict(m) for m in messages])
        if self.fail:
            raise InferenceError("the model is down")
        reply = f"reply {len(self.sent)} to {messages[-1]['content']}"
        if on_token:
            for i, word in enumerate(reply.split()):
                on_token(word if i == 0 else " " + word)
        return reply

    def generate(self, model, conversations, sampling):
        return [self.chat(model, c, sampling) for c in conversations]


@pytest.fixture
def backend():
    return Scripted()


def test_say_sends_the_whole_history(backend, tmp_path):
    c = chat(system="Be brief.", backend=backend, runs_dir=tmp_path)
    assert c.say("Hi") == "reply 1 to Hi"
    assert c.say("And then?") == "reply 2 to And then?"
    assert backend.sent[-1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "reply 1 to Hi"},
        {"role": "user", "content": "And then?"},
    ]
    assert c.history() == [
        *backend.sent[-1],
        {"role": "assistant", "content": "reply 2 to And then?"},
    ]


def test_say_streams_pieces(backend):
    pieces = []
    reply = chat(backend=backend).say("Hello there", on_token=pieces.append)
    assert len(pieces) == 5 and "".join(pieces) == reply


def test_a_failed_turn_leaves_the_history_alone():
    c = chat(backend=Scripted(fail=True))
    with pytest.raises(InferenceError, match="down"):
        c.say("Hi")
    assert c.history() == []


def test_undo_reset_and_regenerate(backend):
    c = chat(system="S", backend=backend)
    c.say("one")
    c.say("two")
    assert c.undo() == [
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "reply 2 to two"},
    ]
    assert [m["content"] for m in c.history()] == ["S", "one", "reply 1 to one"]
    assert c.regenerate() == "reply 3 to one"
    assert backend.sent[-1] == backend.sent[0]  # asked again with the same turns
    assert c.history()[-1]["content"] == "reply 3 to one" and len(c.history()) == 3
    c.reset()
    assert c.history() == [{"role": "system", "content": "S"}]
    with pytest.raises(ValueError, match="Nothing to undo"):
        c.undo()
    with pytest.raises(ValueError, match="Nothing to regenerate"):
        c.regenerate()


def test_rate_and_edit_save_feedback_events(backend, tmp_path):
    c = chat(system="S", backend=backend, runs_dir=tmp_path)
    c.say("Hi")
    up = c.rate("up")
    edited = c.edit("A better reply.")
    events = read_events(tmp_path)
    assert [e["id"] for e in events] == [up["id"], edited["id"]]
    assert up["verdict"] == "up" and up["reply"] == "reply 1 to Hi"
    assert up["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
    assert (up["model"], up["backend"], up["run"]) == ("scripted-model", "server", None)
    assert edited["kind"] == "edit" and edited["edited"] == "A better reply."
    assert edited["reply"] == "reply 1 to Hi" and edited["time"]
    assert c.history()[-1] == {"role": "assistant", "content": "A better reply."}
    assert (tmp_path / "feedback" / "events.jsonl").is_file()


def test_rate_and_edit_need_a_reply_and_valid_input(backend, tmp_path):
    c = chat(backend=backend, runs_dir=tmp_path)
    with pytest.raises(ValueError, match="no reply yet"):
        c.rate("up")
    c.say("Hi")
    with pytest.raises(ValueError, match="'up' or 'down'"):
        c.rate("meh")
    with pytest.raises(ValueError, match="empty"):
        c.edit("  ")
    assert read_events(tmp_path) == []


def test_context_window_drops_oldest_exchanges_but_keeps_system_and_latest(backend):
    c = chat(system="You are terse.", backend=backend, max_new_tokens=20, context_window=100)
    assert chat(backend=backend).context_usage() is None
    for i in range(6):
        c.say(f"message number {i} " + "words " * 4)
    sent = backend.sent[-1]
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert sent[-1]["content"].startswith("message number 5")
    assert len(sent) < 12 and sent[1]["role"] == "user"
    usage = c.context_usage()
    assert usage.window == 100 and 0 < usage.tokens <= 100 - 20  # the reply still fits
    assert usage.dropped_turns >= 2 and usage.dropped_turns % 2 == 0  # whole exchanges
    assert len(c.history()) == 13  # the history itself keeps everything


def test_context_window_must_hold_the_reply(backend):
    with pytest.raises(ValueError, match="above max_new_tokens"):
        chat(backend=backend, max_new_tokens=256, context_window=200)


def test_save_and_load_continue_the_conversation(backend, tmp_path):
    c = chat(system="S", backend=backend, temperature=0.2, context_window=4096)
    c.say("Hi")
    path = c.save(tmp_path / "talk.json")
    saved = json.loads(path.read_text())
    assert saved["messages"] == c.history() and saved["model"] == "scripted-model"
    loaded = chat_load(path, backend=backend)
    assert loaded.history() == c.history()
    assert loaded.sampling.temperature == 0.2 and loaded.context_window == 4096
    loaded.say("More?")
    assert backend.sent[-1][:3] == c.history()


def test_as_example_is_a_training_row_that_loads_back(backend, tmp_path):
    c = chat(backend=backend)
    with pytest.raises(ValueError, match="no reply yet"):
        c.as_example()
    c.say("Hi")
    row = c.as_example()
    assert row == {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "reply 1 to Hi"},
        ]
    }
    (tmp_path / "row.json").write_text(json.dumps(row))
    assert chat_load(tmp_path / "row.json", backend=backend).history() == row["messages"]


def test_load_names_the_bad_message(tmp_path, backend):
    (tmp_path / "bad.json").write_text(json.dumps({"messages": [{"role": "bot", "content": "x"}]}))
    with pytest.raises(ValueError, match="bad.json, message 0"):
        chat_load(tmp_path / "bad.json", backend=backend)


def test_local_backend_needs_a_model_and_servers_have_no_base(backend):
    with pytest.raises(ValueError, match="Which model"):
        chat(backend=backend_local())
    with pytest.raises(ValueError, match="base=True needs the local backend"):
        chat(backend=backend, base=True)
