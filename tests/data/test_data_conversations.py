"""conversations(): lists and files of whole chats, and every rule a conversation must follow."""

from __future__ import annotations

import json

import pytest

from dragonfarm_core.data import DatasetError, conversations


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


CHAT = [
    msg("system", "You are a support agent."),
    msg("user", "My thermostat drops off Wi-Fi."),
    msg("assistant", "Which router do you use?"),
    msg("user", "An Eero."),
    msg("assistant", "Make a 2.4 GHz-only network."),
]


def test_list_of_conversations():
    ds = conversations([CHAT, [msg("user", "Hi"), msg("assistant", "Hello!")]])
    assert ds.mapping.kind == "conversations" and len(ds) == 2
    assert ds.source is None and ds.format == "list" and ds.name == "conversations"
    assert ds.records()[0] == {"messages": CHAT}
    assert all(isinstance(c, str) for c in ds.frame["messages"])


def test_rows_with_a_messages_key_and_extra_message_keys_are_accepted():
    chat = [{"role": "user", "content": "Hi", "name": "ana"}, msg("assistant", "Hello")]
    ds = conversations([{"messages": chat, "id": 3}], name="chats")
    assert ds.records() == [{"messages": [msg("user", "Hi"), msg("assistant", "Hello")]}]
    assert ds.name == "chats"


def test_jsonl_and_json_files(write):
    lines = "\n".join(json.dumps({"messages": CHAT, "id": i}, ensure_ascii=False) for i in range(3))
    ds = conversations(write("chats.jsonl", lines + "\n"))
    assert len(ds) == 3 and ds.format == "jsonl" and ds.name == "chats"
    assert ds.source.endswith("chats.jsonl") and ds.records()[2]["messages"] == CHAT
    ds = conversations(write("chats.json", json.dumps([{"messages": CHAT}])))
    assert ds.format == "json" and ds.records() == [{"messages": CHAT}]


@pytest.mark.parametrize(
    ("conv", "pattern"),
    [
        ([msg("user", "Hi")], r"conversation 1, message 0: the conversation ends with a user turn"),
        ([msg("system", "S"), msg("assistant", "A")], r"conversation 1: there is no user turn"),
        (
            [msg("user", "Hi"), msg("bot", "Yo")],
            r"conversation 1, message 1: unknown role 'bot'.*'assistant'",
        ),
        (
            [msg("User", "Hi"), msg("assistant", "A")],
            r"message 0: unknown role 'User'.*Write 'user'",
        ),
        (
            [msg("user", "  "), msg("assistant", "A")],
            r"message 0 \(user\): content must be a non-empty string",
        ),
        (
            [msg("user", "Hi"), {"role": "assistant", "content": 3}],
            r"message 1 \(assistant\): content",
        ),
        (
            [msg("user", "Hi"), msg("system", "S"), msg("assistant", "A")],
            r"message 1: a system message may only come first",
        ),
        ([msg("user", "Hi"), "hello"], r"message 1: expected an object"),
        ([], r"conversation 1: a conversation must be a non-empty list"),
        ("just text", r"conversation 1: a conversation must be a non-empty list"),
    ],
)
def test_bad_conversations_name_conversation_and_message(conv, pattern):
    good = [msg("user", "Hi"), msg("assistant", "Hello")]
    with pytest.raises(DatasetError, match=pattern):
        conversations([good, conv])


def test_file_errors_name_the_line(write):
    good = json.dumps({"messages": [msg("user", "Hi"), msg("assistant", "Hello")]})
    bad = json.dumps({"messages": [msg("user", "Hi"), msg("user", "Again?")]})
    path = write("c.jsonl", f"{good}\n\n{bad}\n")
    with pytest.raises(
        DatasetError, match=r"c\.jsonl, line 3, message 1: the conversation ends with a user"
    ):
        conversations(path)
    path = write("s.jsonl", json.dumps({"conversations": [{"from": "human", "value": "x"}]}))
    with pytest.raises(DatasetError, match=r"s\.jsonl, line 1: no 'messages' list \(ShareGPT"):
        conversations(path)
    path = write("j.json", json.dumps([{"messages": [msg("human", "x"), msg("gpt", "y")]}]))
    with pytest.raises(
        DatasetError, match=r"j\.json, item 1, message 0: unknown role 'human'.*'user'"
    ):
        conversations(path)


def test_wrong_inputs(write, tmp_path):
    with pytest.raises(DatasetError, match="empty list"):
        conversations([])
    with pytest.raises(DatasetError, match="not csv"):
        conversations(write("c.csv", "a,b\n1,2\n"))
    with pytest.raises(DatasetError, match="no such file"):
        conversations(tmp_path / "missing.jsonl")
    with pytest.raises(DatasetError, match="takes a list of conversations"):
        conversations({"role": "user"})


def test_map_on_conversations_is_refused():
    ds = conversations([[msg("user", "Hi"), msg("assistant", "Hello")]])
    with pytest.raises(DatasetError, match="already holds whole conversations"):
        ds.map(prompt="messages", response="messages")
