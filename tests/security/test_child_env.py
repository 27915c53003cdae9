"""Every child process gets an allow-listed environment: what Python, torch, the Hugging Face
libraries and a run need, and no secret, whatever its name looks like."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dragonfarm_core.evaluation import evaluate as evaluation
from dragonfarm_core.inference import backend_local, worker_stop
from dragonfarm_core.rundir import launch

HERE = Path(__file__).resolve().parent
NEEDED = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TMPDIR": "/tmp/u",
    "CUDA_VISIBLE_DEVICES": "1",
    "HIP_VISIBLE_DEVICES": "0",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "OMP_NUM_THREADS": "4",
    "MKL_NUM_THREADS": "4",
    "HF_HOME": "/cache/hf",
    "HF_HUB_CACHE": "/cache/hf/hub",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_CACHE": "/cache/tf",
    "XDG_CACHE_HOME": "/cache",
    "DRAGONFARM_MAX_CONCURRENT": "2",
    "DRAGONFARM_TRAINER_MODULE": "fake_trainer",
    "HTTPS_PROXY": "http://proxy.internal:3128",
    "TOKENIZERS_PARALLELISM": "false",
}
SECRETS = {
    "HF_TOKEN": "hf_secret",
    "HUGGING_FACE_HUB_TOKEN": "hf_secret",
    "DATABASE_URI": "postgres://u:p@db/x",
    "MY_SERVICE_PAT": "pat",
    "AWS_ACCESS_KEY_ID": "AKIA",
    "AWS_SECRET_ACCESS_KEY": "s",
    "OPENAI_API_KEY": "sk",
    "DRAGONFARM_BACKEND_API_KEY": "sk",
    "HF_HUB_TOKEN_SOMETHING": "x",
    "CUDA_SECRET": "x",
    "GITHUB_TOKEN": "ghp",
    "SLACK_WEBHOOK": "https://hooks.slack.com/x",
    "HTTP_PROXY": "http://user:password@proxy.internal:3128",
}


def test_child_env_passes_what_a_run_needs_and_nothing_else():
    env = launch.child_env({**NEEDED, **SECRETS})
    assert {k: env[k] for k in NEEDED} == NEEDED
    assert not set(SECRETS) & set(env)
    assert set(env) == set(NEEDED) | {"PYTHONPATH", "PYTHONUNBUFFERED"}


def test_the_package_stays_importable_after_the_callers_pythonpath():
    env = launch.child_env({"PYTHONPATH": "/a:/b"})
    package_parent = str(Path(launch.__file__).resolve().parents[2])
    assert env["PYTHONPATH"].split(os.pathsep) == [package_parent, "/a", "/b"]
    assert env["PYTHONUNBUFFERED"] == "1"


def test_dragonfarm_pass_env_adds_the_variables_it_names():
    environ = {"MY_SETTING": "1", "FAKE_A": "2", "FAKE_B": "3", "OTHER": "4"}
    env = launch.child_env({**environ, launch.PASS_ENV_VAR: "MY_SETTING, FAKE_*"})
    assert {k: env.get(k) for k in environ} == {
        "MY_SETTING": "1",
        "FAKE_A": "2",
        "FAKE_B": "3",
        "OTHER": None,
    }


def test_the_worker_gets_the_allow_listed_environment(monkeypatch):
    monkeypatch.setenv("DRAGONFARM_WORKER_MODULE", "snoop_worker")
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    worker_stop()
    try:
        status = backend_local().status()
    finally:
        worker_stop()
    assert not set(SECRETS) & set(status["environ"])
    assert not any(f"{name}=" in status["proc_environ"] for name in SECRETS)
    assert status["environ"]["PATH"] == os.environ["PATH"]


def test_the_evaluator_gets_the_allow_listed_environment(monkeypatch, tmp_path):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    seen = {}

    class Spawned(Exception):
        pass

    def popen(argv, **kwargs):
        seen.update(kwargs)
        raise Spawned

    monkeypatch.setattr(subprocess, "Popen", popen)
    run = type("R", (), {"dir": tmp_path, "id": "r", "config": {"hardware": {"device": "cpu"}}})()
    with pytest.raises(Spawned):
        evaluation.start_recompute(run, 2)  # a job (rundir.jobs), as every background process
    assert seen["env"] == launch.child_env()
    assert not set(SECRETS) & set(seen["env"])
