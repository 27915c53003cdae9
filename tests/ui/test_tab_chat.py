"""Chat tab handlers: streaming replies, the run and its base side by side, feedback, undo,
reset, transcripts, settings mid-conversation, the server backend's key, the run picker.

A scripted backend (the local backend's shape: it loads what each call names) stands in for the
model, so no torch is needed; the server backend talks to a local fake OpenAI server.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import gradio as gr
import pytest

from dragonfarm_core.conversation.feedback_store import read_events
from dragonfarm_core.inference import InferenceError
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.rundir import files, location, store
from ui.tabs import chat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_fakes import REPLY, FakeOpenAI  # noqa: E402

VIEW = ["bot0", "bot1", "session", "message", "notice", "usage", "code", "error"]
SKIP = gr.skip()


class Scripted:
    """Answers "<who> says <n>: <last user text>" word by word; who is the run or its base."""

    name = "local"
    model = None

    def __init__(self) -> None:
        self.calls: list[tuple[Any, list[dict[str, str]], Any]] = []
        self.fail: set[str] = set()  # "tuned" and/or "base": those answers fail

    def chat(self, model, messages, sampling, on_token=None):
        self.calls.append((model, [dict(m) for m in messages], sampling))
        who = "tuned" if model.adapter and model.use_adapter else "base"
        if who in self.fail:
            raise InferenceError("the worker is down")
        reply = f"{who} says {len(self.calls)}: {messages[-1]['content']}"
        for i, word in enumerate(reply.split()):
            if on_token:
                on_token(word if i == 0 else " " + word)
        return reply

    def generate(self, model, conversations, sampling):
        return [self.chat(model, c, sampling) for c in conversations]


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Scripted:
    scripted = Scripted()
    monkeypatch.setattr(chat.dragon, "backend_local", lambda: scripted)
    return scripted


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    root = tmp_path / "runs"
    root.mkdir()
    return root


def make_run(runs_dir: Path, model: ResolvedModel, name: str, state: str = "succeeded") -> str:
    """A run folder as training leaves it: config, status and an adapter."""
    run_dir = runs_dir / f"20260101-00000{len(list(runs_dir.iterdir()))}-{name}"
    run_dir.mkdir()
    files.write_config(
        run_dir,
        {"schema": 1, "id": run_dir.name, "name": name, "method": "sft",
         "created_at": files.now_iso(), "continued_from": None,
         "model": {"name": model.name, "base": model.base, "revision": None,
                   "trust_remote_code": False, "adapters": []}},
    )  # fmt: skip
    files.write_status(run_dir, {"state": state, "finished_at": files.now_iso()})
    (run_dir / files.ADAPTER_DIR).mkdir()
    (run_dir / files.ADAPTER_DIR / "adapter_config.json").write_text("{}")
    return str(run_dir)


@pytest.fixture
def run(runs_dir: Path, chat_model: ResolvedModel) -> str:
    return make_run(runs_dir, chat_model, "tickets")


def widgets(run: str | None = "", mode: str = "run", **changed: Any) -> list[Any]:
    """Setup widget values in read_setup's order (after the model)."""
    values = {"backend": "local", "url": "", "served": "", "api_key": "", "ollama_model": "",
              "ollama_url": chat.OLLAMA_URL, "system": "Be brief.", "max_new_tokens": 64,
              "temperature": 0.7, "top_p": 0.9, "context_window": 0}  # fmt: skip
    return [run, mode, *{**values, **changed}.values()]


def last(outputs) -> dict[str, Any]:
    return dict(zip(VIEW, list(outputs)[-1], strict=False))


def send(session, text: str, model: ResolvedModel, runs_dir: Path, *values: Any) -> list:
    return list(chat.send(session, text, model, *values, runs_dir=runs_dir))


def test_a_reply_streams_in_and_the_code_holds_the_same_conversation(
    backend, run, chat_model, runs_dir
):
    steps = send(None, "My router blinks red.", chat_model, runs_dir, *widgets(run))
    partial = [dict(zip(VIEW, s, strict=False))["bot0"]["value"] for s in steps[:-1]]
    assert partial[0][-1]["content"] == "tuned"  # the first piece, before the rest came
    assert partial[0][0] == {"role": "user", "content": "My router blinks red."}
    end = last(steps)
    assert end["bot0"]["value"] == [
        {"role": "user", "content": "My router blinks red."},
        {"role": "assistant", "content": "tuned says 1: My router blinks red."},
    ]
    assert end["bot0"]["label"] == Path(run).name and end["message"] == "" and end["error"] == ""
    model, sent, sampling = backend.calls[0]
    assert sent[0] == {"role": "system", "content": "Be brief."} and sampling.max_new_tokens == 64
    assert model.adapter.endswith("adapter") and model.use_adapter
    assert f'c = dragon.chat("{run}", system="Be brief.", max_new_tokens=64' in end["code"]
    assert 'c.say("My router blinks red.")' in end["code"]
    compile(end["code"], "chat", "exec")
    # The next turn sees the first exchange.
    again = last(send(end["session"], "Still red.", chat_model, runs_dir, *widgets(run)))
    assert len(backend.calls[-1][1]) == 4 and len(again["bot0"]["value"]) == 4


def test_both_side_by_side_asks_the_run_then_its_base(backend, run, chat_model, runs_dir):
    end = last(send(None, "Hello", chat_model, runs_dir, *widgets(run, "both")))
    assert end["bot0"]["value"][-1]["content"] == "tuned says 1: Hello"
    assert end["bot1"]["value"][-1]["content"] == "base says 2: Hello"
    assert end["bot1"]["label"].endswith("(base)")
    assert f'b = dragon.chat("{run}", base=True, system=' in end["code"]
    assert 'c.say("Hello")\nb.say("Hello")' in end["code"]
    # Rating the base's reply down records it against the run's base.
    rated = dict(zip(VIEW, chat.rate(end["session"], 1, "down"), strict=False))
    (event,) = read_events(runs_dir)
    assert (event["verdict"], event["base"], event["reply"]) == ("down", True, "base says 2: Hello")
    assert 'b.rate("down")' in rated["code"] and "👎 Bad saved" in rated["notice"]


def test_base_mode_needs_a_run(backend, chat_model, runs_dir):
    end = last(send(None, "Hi", chat_model, runs_dir, *widgets("", "base")))
    assert "Pick a run" in end["error"] and end["session"] is None and backend.calls == []


def test_the_model_tab_model_answers_when_no_run_is_picked(backend, chat_model, runs_dir):
    end = last(send(None, "Hi", chat_model, runs_dir, *widgets("")))
    assert backend.calls[0][0].base == chat_model.base and backend.calls[0][0].adapter is None
    assert f"c = dragon.chat({json.dumps(chat_model.name)}" in end["code"]


def test_a_failed_reply_keeps_the_history_and_gives_the_message_back(
    backend, run, chat_model, runs_dir
):
    first = last(send(None, "one", chat_model, runs_dir, *widgets(run)))
    backend.fail = {"tuned"}
    end = last(send(first["session"], "two", chat_model, runs_dir, *widgets(run)))
    assert "the worker is down" in end["error"] and end["message"] == "two"
    assert [m["content"] for m in end["bot0"]["value"]] == ["one", "tuned says 1: one"]
    assert 'say("two")' not in end["code"]


def test_side_by_side_a_failed_base_keeps_the_run_reply(backend, run, chat_model, runs_dir):
    backend.fail = {"base"}
    end = last(send(None, "Hi", chat_model, runs_dir, *widgets(run, "both")))
    assert "No reply" in end["error"] and "(base)" in end["error"] and "kept" in end["error"]
    assert end["bot0"]["value"][-1]["content"] == "tuned says 1: Hi" and end["bot1"]["value"] == []
    assert end["message"] == SKIP  # the run got it: sending it again would ask the run twice
    assert 'c.say("Hi")' in end["code"] and 'b.say("Hi")' not in end["code"]


def test_an_empty_message_is_refused(backend, run, chat_model, runs_dir):
    end = last(send(None, "   ", chat_model, runs_dir, *widgets(run)))
    assert "Type a message" in end["error"] and backend.calls == []


def test_edit_rate_and_add_as_example_save_feedback(backend, run, chat_model, runs_dir):
    session = last(send(None, "Refund?", chat_model, runs_dir, *widgets(run)))["session"]
    box, save, error = chat.start_edit(session, 0)
    assert box["value"] == "tuned says 1: Refund?" and box["visible"] and save["visible"]
    refused = chat.save_edit(session, "  ", 0)
    assert "empty" in refused[VIEW.index("error")] and refused[-2:] == (SKIP, SKIP)
    saved = chat.save_edit(session, "Yes, within 30 days.", 0)
    shown = dict(zip(VIEW, saved, strict=False))
    assert shown["bot0"]["value"][-1]["content"] == "Yes, within 30 days."
    assert saved[-2]["visible"] is False and 'c.edit("Yes, within 30 days.")' in shown["code"]
    added = dict(zip(VIEW, chat.add_example(session, 0), strict=False))
    assert "3 messages" in added["notice"] and 'c.rate("up")' in added["code"]
    events = read_events(runs_dir)
    assert [e["kind"] for e in events] == ["edit", "rating"]
    assert events[0]["edited"] == "Yes, within 30 days." and events[0]["run"] == run
    assert events[1]["reply"] == "Yes, within 30 days." and events[1]["verdict"] == "up"
    assert (
        events[1]["messages"] + [session.chats[0].history()[-1]]
        == (session.chats[0].as_example()["messages"])
    )


def test_feedback_needs_a_reply(backend, chat_model, runs_dir):
    assert "send a message first" in chat.rate(None, 0, "up")[VIEW.index("error")]
    assert "send a message first" in chat.add_example(None, 0)[VIEW.index("error")]
    assert "send a message first" in chat.start_edit(None, 0)[2]
    assert read_events(runs_dir) == []


def test_regenerate_undo_and_reset(backend, run, chat_model, runs_dir):
    session = last(send(None, "one", chat_model, runs_dir, *widgets(run)))["session"]
    steps = list(chat.regenerate(session, 0))
    assert all(step[VIEW.index("message")] == SKIP for step in steps)  # a draft stays
    assert len(steps) > 2 and last(steps)["bot0"]["value"][-1]["content"] == "tuned says 2: one"
    assert len(last(steps)["bot0"]["value"]) == 2 and "c.regenerate()" in last(steps)["code"]
    undone = dict(zip(VIEW, chat.undo(session), strict=False))
    assert undone["bot0"]["value"] == [] and "c.undo()" in undone["code"]
    assert "Nothing to undo" in chat.undo(session)[VIEW.index("error")]
    assert "no reply yet" in last(chat.regenerate(session, 0))["error"]
    session = last(send(session, "two", chat_model, runs_dir, *widgets(run)))["session"]
    cleared = dict(zip(VIEW, chat.reset(session), strict=False))
    assert cleared["bot0"]["value"] == [] and session.chats[0].history()[0]["role"] == "system"


def test_settings_apply_to_the_next_turn_but_another_run_needs_a_reset(
    backend, run, chat_model, runs_dir
):
    other = make_run(runs_dir, chat_model, "other")
    session = last(send(None, "one", chat_model, runs_dir, *widgets(run)))["session"]
    end = last(send(session, "two", chat_model, runs_dir, *widgets(run, temperature=0.0)))
    assert backend.calls[-1][2].temperature == 0.0 and end["error"] == ""
    assert "c.sampling = Sampling(max_new_tokens=64, temperature=0.0, top_p=0.9)" in end["code"]
    assert "from dragonfarm_core.inference import Sampling" in end["code"]
    compile(end["code"], "chat", "exec")
    moved = last(send(end["session"], "three", chat_model, runs_dir, *widgets(other)))
    assert "Press Reset" in moved["error"] and moved["message"] == SKIP  # it stays typed
    assert len(backend.calls) == 2
    chat.reset(session)
    fresh = last(send(session, "three", chat_model, runs_dir, *widgets(other)))
    assert fresh["bot0"]["label"] == Path(other).name and f'dragon.chat("{other}"' in fresh["code"]


def test_an_invalid_setting_is_named(backend, run, chat_model, runs_dir):
    end = last(send(None, "Hi", chat_model, runs_dir, *widgets(run, context_window=32)))
    assert "context_window" in end["error"] and end["message"] == SKIP


def test_context_usage_is_shown_with_a_window(backend, run, chat_model, runs_dir):
    end = last(send(None, "Hi", chat_model, runs_dir, *widgets(run, context_window=1024)))
    assert "of 1,024 tokens" in end["usage"] and "context_window=1024" in end["code"]
    plain = last(send(None, "Hi", chat_model, runs_dir, *widgets(run)))
    assert plain["usage"] == ""


def test_transcripts_are_kept_in_the_users_folder_and_downloaded_from_the_apps_cache(
    backend, run, chat_model, runs_dir, tmp_path, monkeypatch
):
    cache = tmp_path / "app-cache"  # the app's own Gradio cache (ui.layout), removed at exit
    cache.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    nothing = chat.save_transcript(None, runs_dir=runs_dir)
    assert "Nothing to save" in nothing[VIEW.index("error")] and nothing[-1] == SKIP
    session = last(send(None, "Hi", chat_model, runs_dir, *widgets(run, "both")))["session"]
    out = chat.save_transcript(session, runs_dir=runs_dir)
    paths = [Path(p) for p in out[-1]["value"]]
    assert len(paths) == 2 and paths[1].name.endswith("-base.json")
    assert all(cache in p.parents for p in paths)  # served from the cache, not the runs folder
    kept = sorted((runs_dir / files.CHATS_DIR).iterdir())
    assert [p.name for p in kept] == sorted(p.name for p in paths)
    assert all((runs_dir / files.CHATS_DIR / p.name).read_bytes() == p.read_bytes() for p in paths)
    saved = json.loads(paths[0].read_text())
    assert saved["messages"][-1]["content"] == "tuned says 1: Hi" and saved["run"] == run
    assert 'c.save("chat-' in out[VIEW.index("code")]
    again = chat.save_transcript(session, runs_dir=runs_dir)  # the same second, most likely
    assert len(list((runs_dir / files.CHATS_DIR).iterdir())) == 4 and again[-1]["value"] != paths
    assert files.CHATS_DIR not in set(store.runs(runs_dir)["id"])  # never taken for a run


def test_the_server_backend_key_is_used_but_never_shown_or_saved(run, chat_model, runs_dir):
    secret = "sk-test-0123456789"
    with FakeOpenAI("served-model", api_key=secret) as server:
        values = widgets(run, backend="server", url=server.url, served="served-model",
                         api_key=secret)  # fmt: skip
        end = last(send(None, "Hi", chat_model, runs_dir, *values))
        assert end["error"] == "" and end["bot0"]["value"][-1]["content"] == REPLY
        assert server.requests[-1]["headers"]["authorization"] == f"Bearer {secret}"
        session = end["session"]
        rated = chat.rate(session, 0, "up")
        saved = Path(chat.save_transcript(session, runs_dir=runs_dir)[-1]["value"][0]).read_text()
    code = rated[VIEW.index("code")]
    assert 'api_key=os.environ["DRAGONFARM_BACKEND_API_KEY"]' in code and "import os" in code
    feedback_file = (runs_dir / "feedback" / "events.jsonl").read_text()
    assert all(secret not in text for text in (code, saved, feedback_file, repr(session)))
    # The base model needs the local backend: said so, nothing sent.
    refused = last(send(None, "Hi", chat_model, runs_dir, *widgets(run, "base", backend="server",
                        url="http://127.0.0.1:9/v1", served="m")))  # fmt: skip
    assert "local backend" in refused["error"]


def test_run_choices_list_finished_runs_and_a_first_look_picks_the_newest(
    run, chat_model, runs_dir
):
    make_run(runs_dir, chat_model, "running", state="running")
    newest = make_run(runs_dir, chat_model, "newer")
    choices = chat.run_choices(runs_dir)
    assert [v for _, v in choices] == ["", newest, run]
    picker, seen = chat.refresh_runs(runs_dir, None, None)
    assert picker["value"] == newest  # nothing picked yet: the newest run
    assert chat.refresh_runs(runs_dir, seen, newest) == (SKIP, SKIP)
    kept, _ = chat.refresh_runs(runs_dir, -1, "")  # "" picked on purpose stays picked
    assert kept["value"] == ""
    assert chat.follow(runs_dir, run)["value"] == run
    assert chat.follow(runs_dir, str(runs_dir / "nope")) == SKIP


def test_llama_cpp_serves_the_run_through_one_server_per_run(run, chat_model, runs_dir,
                                                             monkeypatch):  # fmt: skip
    from ui import chat_session

    made: list[str] = []

    def backend_llamacpp(source):
        made.append(source)
        scripted = Scripted()
        scripted.name = "llamacpp"
        return scripted

    monkeypatch.setattr(chat_session, "_LLAMACPP", {})
    monkeypatch.setattr(chat_session.dragon, "backend_llamacpp", backend_llamacpp)
    end = last(send(None, "Hello", chat_model, runs_dir, *widgets(run, backend="llamacpp")))
    assert end["error"] == "" and end["bot0"]["value"][-1]["content"] == "tuned says 1: Hello"
    assert made == [run]
    assert f'backend = dragon.backend_llamacpp("{run}")' in end["code"]
    assert "backend=backend" in end["code"]
    compile(end["code"], "chat", "exec")
    # A new conversation with the same run talks to the same llama-server.
    chat.reset(end["session"])
    again = last(send(None, "Again", chat_model, runs_dir, *widgets(run, backend="llamacpp")))
    assert again["error"] == "" and made == [run]
    outside = runs_dir.parent / "elsewhere" / Path(run).name  # a run folder outside the runs dir
    shutil.copytree(run, outside)
    refused = last(
        send(None, "Hi", chat_model, runs_dir, *widgets(str(outside), backend="llamacpp"))
    )
    assert "outside" in refused["error"] and made == [run]  # never exported, never served
    no_run = last(send(None, "Hi", chat_model, runs_dir, *widgets("", backend="llamacpp")))
    assert "Pick a run: llama.cpp serves a run" in no_run["error"]  # nothing written
    for mode in ("base", "both"):  # one GGUF: the run's, not its base's
        refused = last(send(None, "Hi", chat_model, runs_dir,
                            *widgets(run, mode, backend="llamacpp")))  # fmt: skip
        assert "llama.cpp serves one GGUF" in refused["error"] and made == [run]


@pytest.mark.parametrize("shared", ["lab", "spaces"])
def test_a_shared_app_reaches_no_private_address_unless_the_admin_allows_it(
    shared, run, chat_model, runs_dir, monkeypatch
):
    from dragonfarm_core.auth import url_guard
    from dragonfarm_core.auth.profiles import get_profile

    monkeypatch.delenv(url_guard.ALLOW_ENV, raising=False)
    profile = get_profile(shared, runs_dir / "lab")
    with FakeOpenAI("served-model") as server:  # on 127.0.0.1: inside the app's machine
        asked = widgets(run, backend="server", url=server.url, served="served-model")
        refused = last(chat.send(None, "Hi", chat_model, *asked, runs_dir=runs_dir,
                                 profile=profile))  # fmt: skip
        assert "Refused" in refused["error"] and url_guard.ALLOW_ENV in refused["error"]
        assert server.requests == []  # nothing was sent
        for url in ("http://10.0.0.7:8000/v1", "http://169.254.169.254/v1", "http://[::1]:1/v1",
                    "http://localhost:11434"):  # fmt: skip
            values = widgets(run, backend="server", url=url, served="m")
            said = last(chat.send(None, "Hi", chat_model, *values, runs_dir=runs_dir,
                                  profile=profile))  # fmt: skip
            assert "Refused" in said["error"], url
        ollama = last(chat.send(None, "Hi", chat_model, *widgets(run, backend="ollama",
                      ollama_model="m"), runs_dir=runs_dir, profile=profile))  # fmt: skip
        assert "Refused" in ollama["error"]  # its default address is this machine's
        monkeypatch.setenv(url_guard.ALLOW_ENV, "127.0.0.1")  # the admin allows it
        allowed = last(chat.send(None, "Hi", chat_model, *asked, runs_dir=runs_dir,
                                 profile=profile))  # fmt: skip
        assert allowed["error"] == "" and allowed["bot0"]["value"][-1]["content"] == REPLY
        # On one's own machine (local) nothing is refused.
        monkeypatch.delenv(url_guard.ALLOW_ENV)
        own = last(chat.send(None, "Hi", chat_model, *asked, runs_dir=runs_dir,
                             profile=get_profile("local")))  # fmt: skip
        assert own["error"] == ""


def test_an_empty_chat_says_what_to_do():
    """A new user's walk: the Chat tab opened on a blank 420 px box; it now says where to type,
    who answers and what rating does, and the side-by-side column says what it is for."""
    with gr.Blocks():
        run_column, base_column = chat._column(0), chat._column(1)
    assert run_column.bot.placeholder == chat.EMPTY_CHAT[0]
    assert "press Send" in run_column.bot.placeholder and "Feedback" in run_column.bot.placeholder
    assert base_column.bot.placeholder == chat.EMPTY_CHAT[1]
