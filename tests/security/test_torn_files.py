"""A torn or invalid run file never crashes a reader, never hides a run, never blames the
wrong file; a killed writer's temp file is cleaned up.

status.json is written atomically, so a torn one is damage (a hand edit, a bad copy, a disk
fault) or a momentary oddity: `read_status` reads it again for a moment and then reports the
state "damaged" with an error that says what is wrong and what to do. Every consumer copes:
run.status(), run.wait(), dragon.runs(), resume, the Monitor tab and its progress bar.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files, launch, store
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import Run, RunFailedError
from dragonfarm_core.trainers.common import RunReporter
from ui import charts, present
from ui.tabs import monitor

GOOD = {
    "state": "running",
    "queued_at": "2026-09-14T10:15:00+00:00",
    "started_at": "2026-09-14T10:15:01+00:00",
    "step": 3,
    "total_steps": 10,
}
GOOD_TEXT = json.dumps(GOOD, indent=2)
LINES = GOOD_TEXT.splitlines()
DAMAGE = {
    "truncated": GOOD_TEXT[: len(GOOD_TEXT) // 2].encode(),
    "a torn middle line": "\n".join([*LINES[:2], LINES[2][:9], *LINES[3:]]).encode(),
    "a middle line lost": "\n".join([LINES[0], *LINES[2:]]).encode(),  # parses, no state
    "a state that is a number": b'{"state": 3}',
    "an unknown state": b'{"state": "exploded"}',
    "a list": b'["running"]',
    "not UTF-8": b'{"state": "running", "error": "\xff\xfe"}',
    "zero bytes": b"",
    "a step that is text": b'{"state": "running", "step": "three", "total_steps": 10}',
    "metrics that are a list": b'{"state": "succeeded", "metrics": [1, 2]}',
}


@pytest.fixture
def run_dir(runs_root: Path, model_dir: Path, tmp_path: Path) -> Path:
    rows = [{"q": f"My device {i} reboots", "a": f"Reset it ({i})."} for i in range(8)]
    pd.DataFrame(rows).to_csv(tmp_path / "tickets.csv", index=False)
    ds = dragon.dataset(tmp_path / "tickets.csv").map(prompt="q", response="a")
    return create_run("sft", ds, str(model_dir), runs_dir=runs_root)


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "STATUS_RETRY_S", 0.001)


def _damage(run_dir: Path, data: bytes) -> None:
    (run_dir / files.STATUS).write_bytes(data)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_run_status_reports_damage_instead_of_raising(run_dir, damage):
    _damage(run_dir, DAMAGE[damage])
    status = Run(run_dir).status()
    assert status["state"] == files.DAMAGED == "damaged"
    assert status["error"].startswith("status.json is damaged: ")
    assert str(run_dir / files.STATUS) in status["error"] and "dragon.resume" in status["error"]
    assert files.CONFIG not in status["error"]
    assert status["state"] not in files.ACTIVE_STATES | files.TERMINAL_STATES


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_runs_lists_a_run_with_a_damaged_status_without_blaming_config(runs_root, run_dir, damage):
    _damage(run_dir, DAMAGE[damage])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "config.json cannot be read", no other warning
        table = store.runs(runs_root)
    assert list(table["id"]) == [run_dir.name]
    assert table.iloc[0]["state"] == "damaged" and table.iloc[0]["method"] == "sft"


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_the_monitor_shows_a_damaged_run(runs_root, run_dir, damage):
    _damage(run_dir, DAMAGE[damage])
    header, bar, *_, resume, error, _outcome, seen = monitor.show(str(run_dir), runs_dir=runs_root)
    assert header.startswith("**damaged**") and "status.json is damaged" in header
    assert 'data-state="damaged"' in bar and "status.json cannot be read" in bar
    assert resume["interactive"] is False and seen.active is False  # nothing to resume blind


def test_the_problem_is_said_precisely(run_dir):
    cases = {
        "a state that is a number": "it names the state 3, not one of queued, running",
        "a middle line lost": "it names no state",
        "a list": "it holds a JSON list, not an object",
        "not UTF-8": "is not UTF-8 text",
        "zero bytes": "it is empty",
        "truncated": "it is not valid JSON (",
        "a step that is text": "its step is 'three', not a whole number",
    }
    for damage, words in cases.items():
        _damage(run_dir, DAMAGE[damage])
        assert words in files.read_status(run_dir)["error"], damage


def test_a_momentary_bad_read_is_retried(run_dir, monkeypatch):
    _damage(run_dir, DAMAGE["truncated"])
    waits = []

    def repaired_meanwhile(seconds):  # the writer's replace lands while the reader waits
        waits.append(seconds)
        files.write_status(run_dir, GOOD)

    monkeypatch.setattr(files.time, "sleep", repaired_meanwhile)
    assert files.read_status(run_dir) == GOOD
    assert len(waits) == 1


def test_progress_bar_and_header_take_any_value():
    for state, step, total, eta in [
        (3, "x", [1], "soon"),
        (["running"], None, {"a": 1}, float("nan")),
        ("running", -2, 0, float("inf")),
        (None, True, 5.5, None),
    ]:
        assert 'class="df-progress"' in charts.progress_html(state, step, total, eta)
    config = {"id": "r", "method": "sft"}
    assert "status.json is damaged" in present.run_header(
        config, {"state": "damaged", "error": "status.json is damaged: it is empty."}
    )


def test_wait_and_resume_say_the_status_is_damaged(run_dir, monkeypatch):
    launched = []
    monkeypatch.setattr(launch, "start_run", lambda path, **fields: launched.append(path))
    _damage(run_dir, DAMAGE["a list"])
    with pytest.raises(RunFailedError, match="status.json is damaged") as caught:
        Run(run_dir).wait(timeout=5)
    assert caught.value.state == "damaged"
    # Its pid cannot be read, so a trainer may still be at work: no second one is started.
    with pytest.raises(RuntimeError, match="cannot be resumed as it is: status.json is damaged"):
        dragon.resume(run_dir)
    assert launched == []
    (run_dir / files.STATUS).unlink()  # what the message says to do once nothing trains it
    dragon.resume(run_dir)
    assert launched == [run_dir]


def test_a_writer_replaces_a_damaged_status_and_the_trainer_restores_its_fields(run_dir):
    _damage(run_dir, DAMAGE["truncated"])
    assert files.update_status(run_dir, state="failed") == {"state": "failed"}
    reporter = RunReporter(run_dir)
    reporter.update(state="running", pid=os.getpid(), step=4, total_steps=9)
    _damage(run_dir, DAMAGE["a torn middle line"])
    reporter.update(step=5)  # the next heartbeat or step brings every field back
    status = files.read_status(run_dir)
    assert (status["state"], status["pid"], status["step"], status["total_steps"]) == (
        "running", os.getpid(), 5, 9,
    )  # fmt: skip


def test_a_garbled_progress_line_or_value_is_skipped_not_raised(runs_root, run_dir):
    files.update_status(run_dir, state="succeeded", started_at="2026-09-14T10:15:00")  # no zone
    with open(run_dir / files.PROGRESS, "wb") as f:
        f.write(b'{"step": 1, "loss": 2.0}\n{"step": 2, "lo\n[1, 2]\n\xff\xfe\n')
        f.write(b'{"step": 3, "loss": "high", "eta_s": "soon"}\n{"step": 4, "loss": 1.0}\n')
    frame = Run(run_dir).progress()
    assert list(frame["step"]) == [1, 3, 4] and frame["loss"].isna().tolist() == [0, 1, 0]
    assert store.runs(runs_root).iloc[0]["final_loss"] == 1.0
    files.write_samples(run_dir, [])
    (run_dir / files.SAMPLES).write_bytes(b'[{"prompt": ')
    out = monitor.show(str(run_dir), runs_dir=runs_root)
    assert out[0].startswith("**succeeded**") and "samples.json cannot be read" in out[8]


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_killed_writers_temp_file_is_removed_once_stale(run_dir):
    stale = run_dir / ".status.json.k1ll3d.tmp"
    stale.write_bytes(b"")  # mkstemp made it, then the writer was killed
    _age(stale, files.TEMP_STALE_S + 5)
    stale_config = run_dir / ".config.json.abc123.tmp"
    stale_config.write_bytes(b'{"half": ')
    _age(stale_config, files.TEMP_STALE_S + 5)
    in_progress = run_dir / ".status.json.writing.tmp"  # another writer's, right now
    in_progress.write_bytes(b"")
    keep = [run_dir / ".locks", run_dir / ".tmp-adapter", run_dir / "notes.tmp"]
    keep[0].mkdir()
    keep[1].mkdir()
    keep[2].write_text("mine")
    for path in keep:
        _age(path, files.TEMP_STALE_S + 5)

    assert files.read_status(run_dir)["state"] == "queued"
    assert not stale.exists() and not stale_config.exists()
    assert in_progress.exists() and all(p.exists() for p in keep)


def test_a_write_cleans_its_folder_too(tmp_path):
    leftover = tmp_path / ".eval.json.x7.tmp"
    leftover.write_bytes(b"")
    _age(leftover, files.TEMP_STALE_S + 5)
    files.write_json(tmp_path / "eval.json", {"eval_loss": 1.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]


def _config_with(run_dir: Path, path: str, value: object) -> bytes:
    """The run's config.json with the field at `path` ("model.name") set to `value`."""
    config = json.loads((run_dir / files.CONFIG).read_text())
    *groups, key = path.split(".")
    target = config
    for group in groups:
        target = target[group]
    target[key] = value
    return json.dumps(config).encode()


# config.json damaged in every way a reader could trip on: (field, value) or whole bytes.
CONFIG_DAMAGE: dict[str, tuple[str, object] | bytes] = {
    "a list": b'[{"schema": 1, "method": "sft"}]',
    "not JSON": b'{"schema": 1, "method": "sft", "id": ',
    "not UTF-8": b'{"schema": 1, "method": "sft", "id": "\xff"}',
    "zero bytes": b"",
    **{f"{field} a list": (field, [1, 2]) for field in (
        "id", "name", "method", "created_at", "continued_from", "model", "dataset", "data",
        "lora", "args", "hardware", "method_args")},
    "model.name a list": ("model.name", ["a"]),
    "model.base a number": ("model.base", 3),
    "model.adapters a string": ("model.adapters", "/runs/parent/adapter"),
    "model.adapters of numbers": ("model.adapters", [1]),
    "data.n_eval text": ("data.n_eval", "five"),
    "args.batch_size a list": ("args.batch_size", [4]),
    "args.learning_rate text": ("args.learning_rate", "high"),
    "args.gradient_checkpointing a number": ("args.gradient_checkpointing", 2),
    "lora.r text": ("lora.r", "16"),
    "hardware.device a list": ("hardware.device", ["cpu"]),
    "schema text": ("schema", "1"),
    "n_samples a dict": ("n_samples", {}),
}  # fmt: skip


def _damage_config(run_dir: Path, damage: str) -> None:
    what = CONFIG_DAMAGE[damage]
    data = what if isinstance(what, bytes) else _config_with(run_dir, *what)
    (run_dir / files.CONFIG).write_bytes(data)


@pytest.mark.parametrize("damage", list(CONFIG_DAMAGE))
def test_a_run_with_a_damaged_config_stays_listed_as_damaged(runs_root, run_dir, damage):
    files.update_status(run_dir, state="succeeded", started_at="2026-09-14T10:15:00+00:00")
    _damage_config(run_dir, damage)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = store.runs(runs_root)
    assert list(table["id"]) == [run_dir.name] and table.iloc[0]["state"] == "damaged"
    run = dragon.open_run(run_dir.name, runs_dir=runs_root)
    status = run.status()
    assert status["state"] == files.DAMAGED and run.id == run_dir.name
    assert status["error"].startswith(f"{run_dir / files.CONFIG} is damaged: ")
    assert "delete the run" in status["error"] and len(run.progress()) == 0
    for reader in (lambda: run.config, lambda: dragon.code(run)):
        with pytest.raises(files.ConfigDamagedError, match="config.json is damaged: "):
            reader()
    with pytest.raises(RunFailedError, match="config.json is damaged"):
        run.wait(timeout=5)
    assert store.dependents(run_dir) == []
    dragon.delete_run(run_dir.name, runs_dir=runs_root)  # what the message offers
    assert not run_dir.exists()


@pytest.mark.parametrize("damage", ["a list", "not JSON", "model a list", "args a list"])
def test_the_monitor_shows_a_run_with_a_damaged_config(runs_root, run_dir, damage):
    files.update_status(run_dir, state="succeeded", started_at="2026-09-14T10:15:00+00:00")
    _damage_config(run_dir, damage)
    header, bar, _chart, _log, _samples, code, *_, resume, error, _outcome, seen = monitor.show(
        str(run_dir), runs_dir=runs_root
    )
    assert header.startswith("**damaged**") and "config.json is damaged" in header
    assert "delete the run" in header and run_dir.name in header
    assert 'data-state="damaged"' in bar and code == ""
    assert resume["interactive"] is False and seen.active is False


def test_the_config_problem_is_said_precisely(run_dir):
    cases = {
        "a list": "it holds a JSON list, not an object",
        "not JSON": "it is not valid JSON (",
        "not UTF-8": "is not UTF-8 text",
        "id a list": "its id is [1, 2], not a string",
        "model.adapters of numbers": "its model.adapters are not all folder names",
        "args.batch_size a list": "its args.batch_size is [4], not a whole number",
        "args.gradient_checkpointing a number": "gradient_checkpointing is 2, not true or false",
    }
    good = (run_dir / files.CONFIG).read_bytes()
    for damage, words in cases.items():
        _damage_config(run_dir, damage)
        with pytest.raises(files.ConfigDamagedError) as caught:
            files.read_config(run_dir)
        assert words in str(caught.value), damage
        (run_dir / files.CONFIG).write_bytes(good)


def test_a_model_folder_is_still_not_a_run(tmp_path):
    (tmp_path / files.CONFIG).write_text('{"model_type": "llama"}')
    assert not files.is_run_dir(tmp_path)  # no status.json beside it: a model, not a run
    (tmp_path / files.CONFIG).write_text("[1]")
    assert not files.is_run_dir(tmp_path)


@pytest.mark.parametrize(
    "row",
    [b'{"step": 2, "loss": "\\ud800"}', b'{"step": 2, "\\udfff": 1.0}', b'["\\ud800"]',
     b'{"step": 2, "note": "\\uDBFF and text"}'],
)  # fmt: skip
def test_a_progress_row_with_a_lone_surrogate_is_skipped(runs_root, run_dir, row):
    files.update_status(run_dir, state="succeeded", started_at="2026-09-14T10:15:00+00:00")
    with open(run_dir / files.PROGRESS, "wb") as f:
        f.write(b'{"step": 1, "loss": 2.0}\n' + row + b'\n{"step": 3, "loss": 1.0}\n')
        f.write(b'{"step": 4, "loss": 0.5, "note": "\\ud83d\\ude00 a pair is an emoji"}\n')
    frame = Run(run_dir).progress()
    assert list(frame["step"]) == [1, 3, 4] and frame["note"].iloc[-1].startswith("\U0001f600")
    table = store.runs(runs_root)
    assert table.iloc[0]["final_loss"] == 0.5 and table.iloc[0]["state"] == "succeeded"
    out = monitor.show(str(run_dir), runs_dir=runs_root)
    assert out[0].startswith("**succeeded**")
    json.dumps(out[2].to_plotly_json()).encode("utf-8")  # the chart reaches a page intact


@pytest.mark.parametrize("damage", ["truncated", "a list", "not UTF-8", "zero bytes"])
def test_a_torn_judgement_metrics_or_cached_answer_reads_as_missing(runs_root, run_dir, damage):
    """judge.json, metrics.json, a cached LLM answer and a measured agreement, damaged: read as
    never written (the Evaluate and Export pages, Compare, a judge asked again), never raised."""
    from dragonfarm_core.evaluation.evaluate import stored_metrics
    from dragonfarm_core.judging import agreement
    from dragonfarm_core.judging.judgement import read_judgement
    from tests.llm.llm_fakes import FakeOpenAI

    bad = DAMAGE[damage]
    (run_dir / files.JUDGE).write_bytes(bad)
    (run_dir / files.METRICS).write_bytes(bad)
    assert read_judgement(run_dir) is None and stored_metrics(Run(run_dir)) == {}
    cached = runs_root / files.LLM_CACHE_DIR / agreement.FOLDER / f"{'0' * 64}.json"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(bad)
    assert dragon.last_agreement({"provider": "openai", "model": "m"}, runs_root) is None

    with FakeOpenAI(answer=lambda prompt: {"text": "fine"}) as server:
        llm = dragon.llm_openai("m", server.url).caching_in(runs_root)
        assert llm(["Hello?"]) == ["fine"]
        (entry,) = (runs_root / files.LLM_CACHE_DIR).glob("??/*.json")
        entry.write_bytes(bad)
        assert llm(["Hello?"]) == ["fine"] and len(server.requests) == 2  # asked again
