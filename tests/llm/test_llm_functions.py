"""Language models as functions, driven through the official clients against local servers."""

from __future__ import annotations

import json
import pickle

import pytest
from llm_fakes import FakeAnthropic, FakeOpenAI

import dragonfarm_core as dragon
from dragonfarm_core.inference import InferenceError, backend_server
from dragonfarm_core.llm import JUDGE_SYSTEM
from dragonfarm_core.rundir import files

CANARY = "sk-ant-canary-5f0c1e-do-not-write"


def claude(server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, **kwargs):
    """llm_anthropic against `server`, with the key and URL from the environment."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    judge = kwargs.pop("judge", False)
    f = (dragon.judge_anthropic if judge else dragon.llm_anthropic)(**kwargs)
    f.backoff = 0.01  # the tests measure retry-after, not the default backoff
    return f


def gpt(server: FakeOpenAI, **kwargs):
    judge = kwargs.pop("judge", False)
    f = (dragon.judge_openai if judge else dragon.llm_openai)("test-model", server.url, **kwargs)
    f.backoff = 0.01
    return f


def sent_key(request: dict) -> str | None:
    """The key a request carried: this client version sends it as a bearer token."""
    headers = request["headers"]
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def make(kind: str, server, monkeypatch, **kwargs):
    return claude(server, monkeypatch, **kwargs) if kind == "anthropic" else gpt(server, **kwargs)


SERVERS = {"anthropic": FakeAnthropic, "openai": FakeOpenAI}


# -- plain replies and what was sent --------------------------------------------------------------


def test_anthropic_reply_request_and_usage(monkeypatch):
    with FakeAnthropic() as server:
        f = claude(server, monkeypatch, system="Be brief.", max_tokens=64, temperature=0.3)
        replies = f(["one", "two"])
    assert [r.text for r in replies] == ["echo: one", "echo: two"]
    assert all(r.ok and not r.cached for r in replies)
    body = server.requests[0]["body"]
    assert body["model"] == "claude-opus-5" and body["max_tokens"] == 64
    assert body["system"] == "Be brief." and body["temperature"] == 0.3
    assert body["messages"] == [{"role": "user", "content": body["messages"][0]["content"]}]
    assert sent_key(server.requests[0]) == CANARY
    assert f.usage["input_tokens"] == 20 and f.usage["output_tokens"] == 10
    assert f.usage["requests"] == 2


def test_openai_reply_request_and_usage():
    with FakeOpenAI() as server:
        f = gpt(server, system="Be brief.", api_key="sk-local", max_tokens=32)
        replies = f(["hello"])
    assert replies[0].text == "echo: hello" and replies[0].ok
    body = server.requests[0]["body"]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert body["max_tokens"] == 32 and "temperature" not in body
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-local"
    assert (f.usage["input_tokens"], f.usage["output_tokens"]) == (10, 5)


def test_a_single_string_is_refused_with_a_hint():
    f = dragon.llm_openai("m", "http://127.0.0.1:9/v1")
    with pytest.raises(TypeError, match=r"f\(\[prompt\]\)"):
        f("just one")


# -- replies are strings -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SERVERS)
def test_replies_are_strings_that_keep_their_fields(kind, monkeypatch):
    with SERVERS[kind]() as server:
        f = make(kind, server, monkeypatch)
        replies = f(["a", "b"])
        cached = make(kind, server, monkeypatch)(["a"])
    assert replies == ["echo: a", "echo: b"] and cached == ["echo: a"]  # the manual's promise
    one = replies[0]
    assert isinstance(one, str) and type(one.upper()) is str and one.upper() == "ECHO: A"
    assert f"<{one}|{one:>9.4}>" == "<echo: a|     echo>" and "+".join([one, one]) == f"{one}+{one}"
    assert one.startswith("echo") and one.split(": ") == ["echo", "a"] and str(one) == one.text
    assert one.ok and one.text == "echo: a" and one.input_tokens == 10 and not one.cached
    assert cached[0].cached and cached[0].input_tokens == replies[0].input_tokens
    assert json.dumps(replies) == '["echo: a", "echo: b"]'  # JSON writes the text ...
    assert one.as_dict()["input_tokens"] == 10  # ... as_dict() the whole record
    assert {r: 1 for r in [*replies, *cached]} == {"echo: a": 1, "echo: b": 1}
    shown = f"input_tokens=10, output_tokens=5, stop_reason={one.stop_reason!r}"
    assert repr(one) == f"Reply('echo: a', {shown})"  # the text first, then what says more


def test_reply_equality_is_the_texts_and_every_field_survives_a_copy():
    import copy
    import dataclasses

    from dragonfarm_core.llm import Reply

    refusal = Reply("No.", refusal=True, stop_reason="refusal")
    assert refusal == "No." and refusal == Reply("No.") and hash(refusal) == hash("No.")
    assert refusal.as_dict() != Reply("No.").as_dict() and not refusal.ok
    judged = Reply('{"score": 8}', data={"score": 8})
    assert judged in {judged} and judged.data == {"score": 8}  # hashable with a dict inside
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(judged, protocol))
        assert type(back) is Reply and back.as_dict() == judged.as_dict()
    assert copy.deepcopy(refusal).as_dict() == refusal.as_dict()
    empty = dataclasses.replace(Reply("  "), empty=True)
    assert empty.empty and empty == "  " and empty.text == "  "
    with pytest.raises(dataclasses.FrozenInstanceError):
        refusal.text = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError, match="must be a str"):
        Reply(None)  # type: ignore[arg-type]


# -- retries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.slow
def test_429_is_retried_after_the_retry_after_wait(kind, monkeypatch):
    script = [{"status": 429, "headers": {"retry-after": "1"}}]
    with SERVERS[kind](script) as server:
        f = make(kind, server, monkeypatch, cache=False)
        (reply,) = f(["q"])
    assert reply.ok and reply.text == "echo: q"
    assert len(server.requests) == 2 and f.usage["retries"] == 1
    gap = server.requests[1]["at"] - server.requests[0]["at"]
    assert gap >= 0.95  # the backoff alone would be 0.01 s


@pytest.mark.parametrize("kind", SERVERS)
def test_500s_are_retried_with_backoff_until_success(kind, monkeypatch):
    script = [{"status": 500}, {"status": 503}]
    with SERVERS[kind](script) as server:
        f = make(kind, server, monkeypatch, cache=False)
        (reply,) = f(["q"])
    assert reply.ok and len(server.requests) == 3 and f.usage["retries"] == 2


@pytest.mark.parametrize("kind", SERVERS)
def test_a_stall_past_the_timeout_is_retried(kind, monkeypatch):
    with SERVERS[kind]([{"stall": 2.0}]) as server:
        f = make(kind, server, monkeypatch, cache=False, timeout=0.5)
        (reply,) = f(["q"])
    assert reply.ok and len(server.requests) == 2 and f.usage["retries"] == 1


@pytest.mark.parametrize("kind", SERVERS)
def test_giving_up_is_recorded_as_an_error_not_a_reply(kind, monkeypatch):
    with SERVERS[kind]([{"status": 500}] * 5) as server:
        f = make(kind, server, monkeypatch, retries=2)
        (reply,) = f(["q"])
        assert len(server.requests) == 3
    assert not reply.ok and reply.text == ""
    assert "HTTP 500" in reply.error and "3 tries" in reply.error
    assert f.usage["errors"] == 1
    assert not list(files_under(f)), "an error must not be cached"


def test_a_wrong_key_stops_the_batch_names_the_variable_and_hides_the_key(monkeypatch):
    with FakeAnthropic([{"status": 401}]) as server:
        f = claude(server, monkeypatch)
        with pytest.raises(InferenceError, match="ANTHROPIC_API_KEY") as caught:
            f(["q"])
    assert "401" in str(caught.value) and CANARY not in str(caught.value)
    assert len(server.requests) == 1  # not retried


def test_no_key_says_where_to_put_one():
    f = dragon.llm_anthropic(base_url="http://127.0.0.1:9")
    with pytest.raises(InferenceError, match="set ANTHROPIC_API_KEY"):
        f(["q"])


# -- concurrency ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("max_active", [1, 3])
@pytest.mark.slow
def test_max_active_bounds_requests_in_flight(kind, max_active, monkeypatch):
    with SERVERS[kind](delay=0.15) as server:
        f = make(kind, server, monkeypatch, max_active=max_active, cache=False)
        replies = f([f"p{i}" for i in range(8)])
    assert [r.text for r in replies] == [f"echo: p{i}" for i in range(8)]  # in order
    assert server.peak == max_active


# -- refusals and empty replies ------------------------------------------------------------------


def test_anthropic_refusal_is_recorded_not_returned_as_a_reply(monkeypatch):
    with FakeAnthropic(answer=lambda p: {"text": "", "refusal": True}) as server:
        f = claude(server, monkeypatch)
        (reply,) = f(["q"])
    assert reply.refusal and not reply.ok and reply.stop_reason == "refusal"
    assert f.usage["refusals"] == 1 and f.usage["empty"] == 0


@pytest.mark.parametrize(
    "step", [{"refusal": True}, {"text": "filtered", "finish_reason": "content_filter"}]
)
def test_openai_refusal_field_and_content_filter_are_refusals(step):
    with FakeOpenAI(answer=lambda p: step) as server:
        f = gpt(server)
        (reply,) = f(["q"])
    assert reply.refusal and not reply.ok and f.usage["refusals"] == 1


@pytest.mark.parametrize("kind", SERVERS)
def test_an_empty_reply_is_recorded_as_empty(kind, monkeypatch):
    with SERVERS[kind](answer=lambda p: {"text": "  "}) as server:
        f = make(kind, server, monkeypatch)
        (reply,) = f(["q"])
    assert reply.empty and not reply.ok and f.usage["empty"] == 1


# -- judges -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SERVERS)
def test_judges_ask_for_json_and_parse_it(kind, monkeypatch):
    def answer(prompt):
        return {"text": '{"score": 8, "why": "clear"}' if prompt == "good" else "Score: 8/10"}

    with SERVERS[kind](answer=answer) as server:
        f = make(kind, server, monkeypatch, judge=True, system="Score 1-10.")
        good, bad = f(["good", "bad"])
        sent = server.requests[0]["body"]
    system = sent["system"] if kind == "anthropic" else sent["messages"][0]["content"]
    assert system.startswith(JUDGE_SYSTEM) and system.endswith("Score 1-10.")
    assert good.ok and good.data == {"score": 8, "why": "clear"}
    assert not bad.ok and bad.data is None and "not JSON" in bad.parse_error
    assert f.usage["parse_errors"] == 1


def test_a_fenced_json_answer_parses_and_an_unparsed_one_is_asked_again(monkeypatch):
    answers = iter(["```json\n[1, 2]\n```", "nope", "nope"])
    with FakeAnthropic(answer=lambda p: {"text": next(answers)}) as server:
        f = claude(server, monkeypatch, judge=True)
        assert f(["a"])[0].data == [1, 2]
        assert f(["b"])[0].parse_error
        assert f(["b"])[0].parse_error  # not served from the cache: a second request
        assert len(server.requests) == 3


# -- the response cache ------------------------------------------------------------------------


def files_under(f) -> list:
    root = dragon.runs_dir() / files.LLM_CACHE_DIR
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.mark.parametrize("kind", SERVERS)
def test_a_rerun_is_answered_from_the_cache_without_a_request(kind, monkeypatch):
    with SERVERS[kind]() as server:
        first = make(kind, server, monkeypatch)(["a", "b"])
        again = make(kind, server, monkeypatch)
        second = again(["b", "a"])
        assert len(server.requests) == 2
    assert [r.text for r in second] == ["echo: b", "echo: a"]
    assert all(r.cached for r in second) and not any(r.cached for r in first)
    assert again.usage["cached"] == 2 and again.usage["input_tokens"] == 0
    assert len(files_under(again)) == 2


@pytest.mark.parametrize("kind", SERVERS)
def test_cache_false_asks_again(kind, monkeypatch):
    with SERVERS[kind]() as server:
        make(kind, server, monkeypatch)(["a"])
        make(kind, server, monkeypatch, cache=False)(["a"])
        make(kind, server, monkeypatch)(["a"], cache=False)
        assert len(server.requests) == 3


def test_the_cache_keys_on_system_sampling_and_judge_mode(monkeypatch):
    with FakeAnthropic() as server:
        claude(server, monkeypatch)(["a"])
        claude(server, monkeypatch, system="Other.")(["a"])
        claude(server, monkeypatch, temperature=0.9)(["a"])
        claude(server, monkeypatch, model="claude-haiku-5")(["a"])
        claude(server, monkeypatch, judge=True)(["a"])
        assert len(server.requests) == 5
        claude(server, monkeypatch, temperature=0.9)(["a"])
        assert len(server.requests) == 5


def test_a_repeated_prompt_is_sampled_once_per_repeat_and_cached_that_way(monkeypatch):
    counter = iter(range(100))
    with FakeOpenAI(answer=lambda p: {"text": f"sample {next(counter)}"}) as server:
        f = gpt(server, temperature=1.0, max_active=1)
        first = [r.text for r in f(["p", "p", "p"])]
        second = [r.text for r in gpt(server, temperature=1.0)(["p", "p", "p"])]
        assert len(server.requests) == 3
    assert first == ["sample 0", "sample 1", "sample 2"] and second == first


def test_the_cache_folder_is_reserved():
    assert files.LLM_CACHE_DIR == "llm_cache" and files.LLM_CACHE_DIR in files.RESERVED


# -- secrets -----------------------------------------------------------------------------------


def test_no_key_in_cache_files_describe_or_a_pickle(monkeypatch):
    with FakeAnthropic(answer=lambda p: {"text": json.dumps({"prompt": p})}) as server:
        f = claude(server, monkeypatch, judge=True)
        f(["a", "b"])
        typed = dragon.llm_openai("m", "http://127.0.0.1:9/v1", api_key=CANARY + "-typed")
    written = [p.read_text() for p in files_under(f)]
    assert len(written) == 2
    assert all(CANARY not in text for text in written)
    for g in (f, typed):
        shown = json.dumps(g.describe()) + repr(g)
        assert CANARY not in shown
        assert CANARY.encode() not in pickle.dumps(g)
    assert f.describe()["api_key_env"] == "ANTHROPIC_API_KEY"
    assert typed.describe()["api_key_env"] is None and "not recorded" in typed.describe()["api_key"]


def test_an_unpickled_llm_reads_the_key_from_the_environment_again(monkeypatch):
    with FakeAnthropic() as server:
        f = claude(server, monkeypatch, cache=False)
        copy = pickle.loads(pickle.dumps(f))
        assert copy(["x"])[0].text == "echo: x"
        assert sent_key(server.requests[-1]) == CANARY


# -- chatlas and local models -------------------------------------------------------------------


class FakeChat:
    """The part of a chatlas Chat that llm_chatlas uses: chat(), system_prompt, last turn."""

    def __init__(self):
        self.turns: list[str] = []
        self.system_prompt = None
        self.seen: list[tuple] = []  # shared by copies: what each copy had when asked

    def __deepcopy__(self, memo):
        other = FakeChat()
        other.turns, other.system_prompt, other.seen = (
            list(self.turns),
            self.system_prompt,
            self.seen,
        )
        return other

    def chat(self, prompt, echo="output", stream=True):
        self.turns.append(prompt)
        self.seen.append((self.system_prompt, tuple(self.turns)))
        return f"reply to {prompt}"

    def get_last_turn(self):
        class Turn:
            tokens = (7, 3, 0)
            finish_reason = "success"

        return Turn()


def test_llm_chatlas_asks_a_fresh_copy_per_prompt():
    chat = FakeChat()
    f = dragon.llm_chatlas(chat, system="Be kind.")
    replies = f(["one", "two"])
    assert [r.text for r in replies] == ["reply to one", "reply to two"]
    assert chat.seen == [("Be kind.", ("one",)), ("Be kind.", ("two",))]
    assert chat.turns == [] and chat.system_prompt is None  # the original is untouched
    assert f.usage["input_tokens"] == 14 and f.usage["output_tokens"] == 6


def test_llm_chatlas_against_the_anthropic_server(monkeypatch):
    chatlas = pytest.importorskip("chatlas")
    with FakeAnthropic(answer=lambda p: {"text": '{"ok": true}'}) as server:
        chat = chatlas.ChatAnthropic(
            model="claude-opus-5", api_key=CANARY, kwargs={"base_url": server.url}
        )
        f = dragon.judge_chatlas(chat)
        replies = f(["a", "b"])
        bodies = [r["body"] for r in server.requests]
    assert [r.data for r in replies] == [{"ok": True}, {"ok": True}]
    assert all(len(b["messages"]) == 1 for b in bodies)  # no history from the first question
    assert JUDGE_SYSTEM in json.dumps(bodies[0]["system"])


def test_llm_local_goes_through_generate_and_the_backend():
    with FakeOpenAI() as server:
        f = dragon.llm_local(
            "served-model", system="Sys.", backend=backend_server(server.url, "served-model")
        )
        replies = f(["a", "b"])
        bodies = [r["body"] for r in server.requests]
    assert [r.text for r in replies] == ["echo: a", "echo: b"]
    assert all(b["messages"][0] == {"role": "system", "content": "Sys."} for b in bodies)
    assert f.describe()["provider"] == "local" and f.describe()["model"] == "served-model"
