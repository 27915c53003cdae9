"""code(pipeline) from a record edited by hand: only quoted values reach the code (it parses, and
a payload hidden in a stored value never runs), and a record that is not a pipeline's says
what is wrong, in the Pipelines tab too."""

from __future__ import annotations

import ast

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import pipeline_record

PAYLOAD = "import pathlib; pathlib.Path({mark!r}).write_text('ran')"
# Every way a stored value could end a comment line or a string literal.
BREAKS = ["\n", "\r", "\r\n", "\u2028", "\x0c", '"""', "'''", "\x00\n"]


def record(runs_root, specs: list) -> str:
    path = pipeline_record.create(runs_root, "by-hand", "dragonfarm/tiny-support", [], False)
    pipeline_record.update(path, steps=pipeline_record.step_entries(specs))
    return str(path)


def run_code(source: str, monkeypatch, **names) -> dict:
    """Execute generated code with dragon.pipeline captured (nothing starts)."""
    seen: dict = {}
    monkeypatch.setattr(dragon, "pipeline", lambda model, steps, **kw: seen.update(steps=steps))
    monkeypatch.setattr(dragon, "pipeline_status", lambda p: {"status": "queued"})
    exec(compile(source, "<code(pipeline)>", "exec"), {**names})
    return seen


def imports(source: str) -> list[str]:
    tree = ast.parse(source)
    return [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


@pytest.mark.parametrize("cut", BREAKS)
def test_a_function_judges_name_stays_in_its_comment(runs_root, tmp_path, monkeypatch, cut):
    mark = tmp_path / "ran"
    name = f"mine.judge{cut}{PAYLOAD.format(mark=str(mark))}"
    spec = {"kind": "judge", "judge": {"provider": "function", "model": name}, "n": 3}
    source = dragon.code(record(runs_root, [spec]))
    assert imports(source) == ["import dragonfarm_core as dragon"]  # the payload is no code
    assert "\x00" not in source and repr(name) in source

    def judge(prompts):
        return ["{}"] * len(prompts)

    seen = run_code(source, monkeypatch, judge=judge)
    assert seen["steps"][0].judge is judge and seen["steps"][0].n == 3
    assert not mark.exists()


def test_a_plain_function_name_reads_as_it_is(runs_root):
    spec = {"kind": "judge", "judge": {"provider": "function", "model": "tests.my_judge"}}
    source = dragon.code(record(runs_root, [spec]))
    assert "# `judge`: the Python function tests.my_judge (prompts -> answers)." in source


def test_stored_settings_are_quoted_values_only(runs_root, tmp_path, monkeypatch):
    mark = tmp_path / "ran"
    payload = f"1); {PAYLOAD.format(mark=str(mark))}; (" + "\n"
    judge = {"provider": "openai", "model": "m", "url": "http://127.0.0.1:9/v1", "judge": True,
             "sampling": {"max_tokens": payload}}  # fmt: skip
    spec = {"kind": "judge", "judge": judge}
    source = dragon.code(record(runs_root, [spec]))
    assert imports(source) == ["import dragonfarm_core as dragon"]
    with pytest.raises(ValueError, match="max_tokens"):  # the real call refuses the text
        run_code(source, monkeypatch)
    assert not mark.exists()


def test_a_reward_field_that_is_no_setting_is_refused_not_written(runs_root, tmp_path):
    rewards = [{"type": "numeric", "x=__import__('os').getcwd(),y": 1}]
    spec = {"kind": "reinforce", "dataset": {"source": str(tmp_path / "p.csv")}, "rewards": rewards}
    with pytest.raises(ValueError, match=r"step 1 \(reinforce\).*reward 1 has a field .x="):
        dragon.code(record(runs_root, [spec]))


def test_a_keyword_in_extra_settings_stays_inside_extra(runs_root, tmp_path):
    spec = {"kind": "train", "dataset": {"source": str(tmp_path / "d.csv")},
            "lora": {"r": 8, "extra": {"import": 1}}}  # fmt: skip
    source = dragon.code(record(runs_root, [spec]))
    ast.parse(source)
    assert "dragon.Lora(r=8, extra={'import': 1})" in source


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"kind": "publish"}, r"step 1 \(publish\).* no 'repo', which a publish step needs"),
        ({"kind": "train"}, r"no 'dataset', which a train step needs"),
        ({"kind": "nope"}, r"step 1 has kind 'nope'; a step is one of train, prefer, "),
        ({"kind": "__class__"}, r"kind '__class__'"),
        ({"kind": "train", "dataset": {}, "lora": [1]}, r"Lora settings must be a mapping"),
        ({"kind": "judge", "judge": {"provider": "openai", "sampling": [1]}}, "sampling must be"),
    ],
)
def test_a_record_that_is_no_pipeline_says_what_is_wrong(runs_root, spec, said):
    path = record(runs_root, [spec])
    with pytest.raises(ValueError, match=said) as caught:
        dragon.code(path)
    assert "inspect._empty" not in str(caught.value) and path in str(caught.value)


def test_a_step_entry_without_a_spec_is_named(runs_root):
    path = record(runs_root, [])
    pipeline_record.update(path, steps=[{"kind": "train"}, "text"])
    with pytest.raises(ValueError, match="step 1 has no step spec"):
        dragon.code(path)


def test_the_pipelines_tab_shows_why_as_comments(runs_root):
    from ui.tabs import pipelines as tab

    path = record(runs_root, [{"kind": "nope\nimport os"}])
    shown = tab._code(pipeline_record.find(path))
    assert shown.startswith("# The code cannot be written for this pipeline:")
    assert "kind 'nope\\nimport os'" in shown and "one of train, prefer" in shown
    assert all(line.startswith("#") for line in shown.splitlines())
    assert imports(shown) == []
