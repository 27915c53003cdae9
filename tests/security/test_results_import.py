"""import_results() treats a results zip as hostile: every refusal leaves the run untouched.

One parametrized case per refusal (each also one hostile archive of the 18+ the issue asks
for, counted in test_at_least_18_hostile_archives_are_all_refused), each checked for its
reason and for the run being byte for byte what it was, still "bundled". Then a good zip
imports, and the caps on sizes are checked with lowered caps.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from results_fakes import (
    adapter_shapes,
    bundled_run,
    good_results,
    safetensors_bytes,
    tree_digest,
    write_zip,
)

import dragonfarm_core as dragon
from dragonfarm_core.bundles import results_check
from ui import present

# Duplicate names are one of the hostile cases; zipfile warns as it writes them.
pytestmark = pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")
Members = list[tuple[str | zipfile.ZipInfo, bytes]]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dragon.Run:
    return bundled_run(tmp_path_factory.mktemp("runs"))


def _info(name: str, mode: int = 0, method: int = zipfile.ZIP_DEFLATED) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr, info.compress_type = mode << 16, method
    return info


def _with(good: dict[str, bytes], changes: dict[str, bytes]) -> Members:
    """The good members with some replaced."""
    return list({**good, **changes}.items())


def _manifest(good: dict[str, bytes], **changes: str) -> bytes:
    return json.dumps({**json.loads(good["bundle.json"]), **changes}).encode()


def _wrong_shapes() -> bytes:
    shapes = adapter_shapes()
    shapes["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = [16, 300]
    return safetensors_bytes(shapes)


# (label, the members built from the good ones, or raw bytes for the file, expected reason)
CASES: list[tuple[str, Callable[[dict[str, bytes]], Members | bytes], str]] = [
    ("parent dir", lambda g: [*g.items(), ("../escape.txt", b"x")], "'..' part"),
    ("nested parent", lambda g: [*g.items(), ("adapter/../../x.json", b"x")], "'..' part"),
    ("absolute", lambda g: [*g.items(), ("/etc/cron.d/x", b"x")], "absolute path"),
    ("drive letter", lambda g: [*g.items(), ("C:/Windows/x.txt", b"x")], "absolute path"),
    ("backslash", lambda g: [*g.items(), ("adapter\\..\\..\\x", b"x")], "backslash"),
    ("control char", lambda g: [*g.items(), ("train\x01.log", b"x")], "control characters"),
    (
        "symlink",
        lambda g: [*g.items(), (_info("metrics.json", stat.S_IFLNK | 0o777), b"/etc")],
        "symbolic link",
    ),
    (
        "fifo / hard link",
        lambda g: [*g.items(), (_info("metrics.json", stat.S_IFIFO | 0o644), b"{}")],
        "not a regular file",
    ),
    ("duplicate", lambda g: [*g.items(), ("status.json", g["status.json"])], "twice"),
    (
        "unexpected file",
        lambda g: [*g.items(), ("sitecustomize.py", b"import os")],
        "not one of the files",
    ),
    ("unexpected folder", lambda g: [*g.items(), ("checkpoints/", b"")], "unexpected folder"),
    (
        "pickled weights",
        lambda g: [*g.items(), ("adapter/adapter_model.bin", b"\x80\x04.")],
        "pickled weights",
    ),
    (
        "pickle as safetensors",
        lambda g: _with(g, {"adapter/adapter_model.safetensors": b"\x80\x04cos\nsystem\n." * 4}),
        "not a safetensors",
    ),
    ("encrypted", lambda g: _encrypted(g), "encrypted"),
    (
        "bzip2",
        lambda g: [*g.items(), (_info("metrics.json", method=zipfile.ZIP_BZIP2), b"{}")],
        "compression method",
    ),
    ("zip bomb", lambda g: _with(g, {"train.log": bytes(64 * 1024**2)}), "zip bomb"),
    (
        "too many members",
        lambda g: [*g.items(), *((f"x{n}.txt", b"") for n in range(40))],
        "members",
    ),
    ("not a zip", lambda g: b"PK this is not really a zip file at all", "not a zip"),
    ("truncated", lambda g: _zip_bytes(list(g.items()))[:-100], "not a zip"),
    ("cut in the data", lambda g: _cut_data(g), "truncated"),
    (
        "no manifest",
        lambda g: [(k, v) for k, v in g.items() if k != "bundle.json"],
        "no bundle.json",
    ),
    (
        "another run",
        lambda g: _with(g, {"bundle.json": _manifest(g, run_id="20990101-other")}),
        "not of run",
    ),
    (
        "older bundle",
        lambda g: _with(g, {"bundle.json": _manifest(g, bundle_id="0" * 32)}),
        "older bundle",
    ),
    (
        "different config",
        lambda g: _with(g, {"bundle.json": _manifest(g, config_sha256="0" * 64)}),
        "different config",
    ),
    ("unfinished", lambda g: _with(g, {"status.json": b'{"state": "running"}'}), "not finished"),
    (
        "damaged status",
        lambda g: _with(g, {"status.json": b'{"state": '}),
        "status.json is refused",
    ),
    ("garbled progress", lambda g: _with(g, {"progress.jsonl": b"{oops\n{}\n"}), "JSON lines"),
    (
        "incomplete adapter",
        lambda g: [(k, v) for k, v in g.items() if not k.endswith("ors")],
        "incomplete",
    ),
    ("wrong rank", lambda g: _with(g, {"adapter/adapter_config.json": b'{"r": 8}'}), "rank 8"),
    (
        "wrong shapes",
        lambda g: _with(g, {"adapter/adapter_model.safetensors": _wrong_shapes()}),
        "300 in-features",
    ),
    (
        "too many layers",
        lambda g: _with(
            g, {"adapter/adapter_model.safetensors": safetensors_bytes(adapter_shapes(layers=7))}
        ),
        "6 layers",
    ),
]


def _zip_bytes(members: Members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            z.writestr(name, data)
    return buffer.getvalue()


def _encrypted(good: dict[str, bytes]) -> bytes:
    """metrics.json marked encrypted (bit 0 of its flags, in both headers): zipfile's writer
    clears the flags it is given, so the bytes are patched."""
    data = bytearray(_zip_bytes([*good.items(), ("metrics.json", b"{}")]))
    for signature, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            name_at = start + (30 if at == 6 else 46)
            if data[name_at : name_at + 12] == b"metrics.json":
                data[start + at] |= 1
            start += 4
    return bytes(data)


def _cut_data(good: dict[str, bytes]) -> bytes:
    """A zip whose central directory is intact but whose weights' bytes are damaged."""
    data = bytearray(_zip_bytes(list(good.items())))
    start = data.find(b"adapter/adapter_model.safetensors") + 40  # into its deflate stream
    data[start : start + 16] = b"\xff" * 16
    return bytes(data)


def _hostile_zip(tmp_path: Path, run: dragon.Run, build: Callable) -> Path:
    made = build(good_results(run))
    path = tmp_path / f"dragonfarm-results-{run.id}.zip"
    if isinstance(made, bytes):
        path.write_bytes(made)
        return path
    return write_zip(path, made)


@pytest.mark.parametrize(("label", "build", "reason"), CASES, ids=[c[0] for c in CASES])
def test_a_hostile_results_zip_is_refused_and_the_run_is_untouched(
    tmp_path, run, label, build, reason
):
    before = tree_digest(run.dir)
    with pytest.raises(dragon.ResultsRefused, match=None) as refused:
        dragon.import_results(run, _hostile_zip(tmp_path, run, build))
    assert reason in str(refused.value), f"{label}: {refused.value}"
    assert tree_digest(run.dir) == before
    assert run.status()["state"] == "bundled"


def test_at_least_18_hostile_archives_are_all_refused(tmp_path, run):
    before, refused = tree_digest(run.dir), []
    for n, (label, build, _) in enumerate(CASES):
        folder = tmp_path / str(n)
        folder.mkdir()
        with pytest.raises(dragon.ResultsRefused):
            dragon.import_results(run, _hostile_zip(folder, run, build))
        refused.append(label)
    assert len(refused) >= 18
    assert tree_digest(run.dir) == before


def test_a_member_over_the_size_cap_is_refused(tmp_path, run, monkeypatch):
    monkeypatch.setattr(results_check, "MAX_FILE_BYTES", 1000)
    members = good_results(run) | {"train.log": b"step\n" * 400}
    before = tree_digest(run.dir)
    with pytest.raises(dragon.ResultsRefused, match="over the cap of 1000"):
        dragon.import_results(run, write_zip(tmp_path / "r.zip", members))
    assert tree_digest(run.dir) == before


def test_a_total_over_the_cap_is_refused(tmp_path, run, monkeypatch):
    monkeypatch.setattr(results_check, "MAX_TOTAL_BYTES", 10_000)
    with pytest.raises(dragon.ResultsRefused, match="unpacks to .* over the cap"):
        dragon.import_results(run, write_zip(tmp_path / "r.zip", good_results(run)))


def test_a_missing_file_is_refused(tmp_path, run):
    with pytest.raises(dragon.ResultsRefused, match="is not a file"):
        dragon.import_results(run, tmp_path / "nothing.zip")


def test_good_results_import_and_the_run_behaves_as_a_finished_one(tmp_path):
    run = bundled_run(tmp_path / "runs")
    dragon.import_results(run, write_zip(tmp_path / "r.zip", good_results(run)))
    status = run.status()
    assert status["state"] == "succeeded"
    assert status["trained_on"] == "remote (cuda)"
    assert "pid" not in status  # a pid of the remote machine means nothing here
    assert (run.dir / "adapter" / "adapter_model.safetensors").is_file()
    assert list(run.progress()["loss"]) == [2.0, 1.0]
    listed = dragon.runs(tmp_path / "runs").iloc[0]
    assert (listed["state"], listed["trained_on"]) == ("succeeded", "remote (cuda)")
    shown = present.runs_table(dragon.runs(tmp_path / "runs"))  # the Runs tab's table
    assert shown.iloc[0]["trained on"] == "remote (cuda)"
    assert not list((run.dir / "bundle").glob(".import-*"))
    with pytest.raises(dragon.ResultsRefused, match="not bundled"):  # a second import
        dragon.import_results(run, write_zip(tmp_path / "r2.zip", good_results(run)))


def test_a_failed_remote_run_imports_without_an_adapter(tmp_path):
    run = bundled_run(tmp_path / "runs")
    members = {k: v for k, v in good_results(run, "failed").items() if "adapter" not in k}
    dragon.import_results(run, write_zip(tmp_path / "r.zip", members))
    assert run.status()["state"] == "failed"
    assert not (run.dir / "adapter").exists()
