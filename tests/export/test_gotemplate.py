"""The Go-template renderer (dragonfarm_core.export.ollama.gotemplate) against real Go.

tests/export_templates/ollama_go_golden.json holds what Go's text/template printed (Ollama's
options: missingkey=zero) for the templates dragonfarm writes for Ollama and for small
templates using each supported construct; `make_golden.py` beside it regenerates it where `go`
is installed, and then the last test also runs Go itself on the same cases. Without Go (CI),
the stored outputs are the reference: the Python renderer must print exactly them.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dragonfarm_core.export.ollama import gotemplate
from dragonfarm_core.export.ollama.gotemplate import GoTemplateError, render

HERE = Path(__file__).resolve().parents[1] / "export_templates"
GOLDEN = json.loads((HERE / "ollama_go_golden.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_the_renderer_prints_what_go_printed(case):
    assert not case["output"].startswith(("PARSE ERROR", "EXEC ERROR")), case["output"]
    assert render(case["template"], case["data"]) == case["output"]


def test_the_golden_cases_cover_every_construct_and_family():
    names = {c["name"].split("/")[0] for c in GOLDEN}
    assert {"smollm2", "qwen2.5", "llama3", "llama3.2", "gemma2", "gemma3", "construct"} <= names
    constructs = " ".join(c["template"] for c in GOLDEN if c["name"].startswith("construct"))
    for word in ("range", "else if", "break", "continue", "with", ":=", " = ", "printf", "and",
                 "or", "not", "index", "slice", "len", "/*", "{{-", "-}}", "|", "`"):  # fmt: skip
        assert word in constructs, word


@pytest.mark.parametrize(
    "source, message",
    [
        ("{{ if .X }}open", "not closed"),
        ("{{ end }}", "without a block"),
        ('{{ template "x" }}', "not supported"),
        ("{{ upper .X }}", "function 'upper' is not supported"),
        ("{{ .X ", "unclosed action"),
        ("{{ $y }}", "undefined variable"),
        ("{{ break }}", "outside a range"),
    ],
)
def test_what_is_outside_the_subset_is_refused_not_guessed(source, message):
    with pytest.raises(GoTemplateError, match=message):
        render(source, {"X": 1})


def test_truth_and_printing_follow_go():
    assert [gotemplate.truth(v) for v in (0, "", [], {}, None, False, "0", [0], 0.5)] == [
        False, False, False, False, False, False, True, True, True,
    ]  # fmt: skip
    assert render(
        "{{ .A }} {{ .B }} {{ .C }} {{ .D }}", {"A": True, "B": None, "C": 3.0, "D": [1, 2]}
    ) == ("true <no value> 3 [1 2]")


@pytest.mark.skipif(shutil.which("go") is None, reason="needs Go (Debian: golang-go)")
def test_go_itself_still_prints_the_golden_outputs():
    spec = importlib.util.spec_from_file_location("make_golden", HERE / "make_golden.py")
    assert spec and spec.loader
    make_golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_golden)
    cases = [{"template": c["template"], "data": c["data"]} for c in GOLDEN]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "main.go").write_text(make_golden.GO)
        done = subprocess.run(
            ["go", "run", "main.go"], cwd=tmp, input=json.dumps(cases), capture_output=True,
            text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": tmp,
                                         "GOCACHE": f"{tmp}/cache", "GOFLAGS": "-mod=mod"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [c["output"] for c in GOLDEN]
