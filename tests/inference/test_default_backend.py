"""The session default: set_backend, DRAGONFARM_BACKEND, and the local fallback."""

import pytest

from dragonfarm_core.inference import (
    LocalBackend,
    OllamaBackend,
    ServerBackend,
    backend,
    backend_ollama,
    set_backend,
)


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv("DRAGONFARM_BACKEND", raising=False)
    monkeypatch.delenv("DRAGONFARM_BACKEND_API_KEY", raising=False)
    previous = set_backend(None)
    yield
    set_backend(previous)


def test_local_by_default():
    assert isinstance(backend(), LocalBackend)


def test_set_backend_wins_and_none_restores():
    mine = backend_ollama("support")
    assert set_backend(mine) is None
    assert backend() is mine
    assert set_backend(None) is mine
    assert isinstance(backend(), LocalBackend)


def test_set_backend_refuses_other_things():
    with pytest.raises(TypeError, match="takes a backend"):
        set_backend("ollama:support")


def test_env_ollama_with_and_without_url(monkeypatch):
    monkeypatch.setenv("DRAGONFARM_BACKEND", "ollama:support:latest")
    b = backend()
    assert isinstance(b, OllamaBackend) and b.model == "support:latest"
    assert b.url == "http://localhost:11434"
    monkeypatch.setenv("DRAGONFARM_BACKEND", "ollama:support|http://gpu-box:11434")
    assert backend().url == "http://gpu-box:11434"


def test_env_server_takes_its_key_from_another_variable(monkeypatch):
    monkeypatch.setenv("DRAGONFARM_BACKEND", "server:http://pod:8000/v1|tejas/support-0.5b")
    monkeypatch.setenv("DRAGONFARM_BACKEND_API_KEY", "sk-hidden")
    b = backend()
    assert isinstance(b, ServerBackend)
    assert (b.url, b.model) == ("http://pod:8000/v1", "tejas/support-0.5b")
    assert "sk-hidden" not in repr(b) and "api_key='***'" in repr(b)


@pytest.mark.parametrize("value", ["vllm:x", "server:http://pod/v1", "ollama:", "server:|m"])
def test_env_mistakes_say_what_is_accepted(monkeypatch, value):
    monkeypatch.setenv("DRAGONFARM_BACKEND", value)
    with pytest.raises(ValueError, match=r"DRAGONFARM_BACKEND=.*'server:URL\|MODEL'"):
        backend()
