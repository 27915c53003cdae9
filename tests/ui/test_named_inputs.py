"""UI handlers read their widgets by name (issue 41 item 5), so adding a widget cannot shift
another: no handler in ui/ or app.py takes a variable-length list of values, Gradio hands a
`ui.named` handler the right value under each name whatever widgets sit beside it, and each
form's generated groups (Train settings, rewards, mapping slots, pipeline steps) name every
widget by the field it is read into."""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
from pathlib import Path

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from ui import named
from ui.layout import build_app
from ui.tabs import mapping, train

ROOT = Path(__file__).resolve().parents[2]
# Wrappers that pass their arguments on untouched: per_user's per-request binding and
# launch()'s pass-through to gr.Blocks.launch. No event handler is among them.
PASS_THROUGH = {("ui/per_user.py", "stream"), ("ui/per_user.py", "call"),
                ("ui/layout.py", "launch")}  # fmt: skip


def _sources() -> list[Path]:
    return [*sorted((ROOT / "ui").rglob("*.py")), ROOT / "app.py"]


def test_no_function_in_the_app_takes_values_by_position():
    """`def f(*values)` or `lambda *a` is how a handler came to read `values[10:18]`."""
    found = []
    for path in _sources():
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node.args.vararg:
                name = getattr(node, "name", "<lambda>")
                if (where, name) not in PASS_THROUGH:
                    found.append(f"{where}:{node.lineno} {name}(*{node.args.vararg.arg})")
    assert found == [], "read widgets by name (ui/named.py), not by position"


def _target(fn):
    fn = named.called(fn)
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return build_app(tmp_path_factory.mktemp("named") / "runs")


def test_no_wired_handler_takes_a_variable_list(app):
    takes = []
    for block_fn in app.fns.values():
        if block_fn.fn is None:
            continue
        params = inspect.signature(_target(block_fn.fn)).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            takes.append(block_fn.name)
    assert takes == []


def _handlers(app, fn) -> list:
    return [d for d in app.fns.values() if _target(d.fn) is fn]


def test_the_train_settings_are_named_by_the_field_they_fill(app):
    for handler in (train.start, train.preview_changed, train.memory):
        [dep] = _handlers(app, handler)
        form = named.form_of(dep.fn)
        for group, widgets in form["settings"].items():
            assert widgets, group
            for field, widget in widgets.items():
                assert widget.elem_id == f"train-{group.lower()}-{field}"
        assert form["beta"].elem_id == "train-preferenceargs-beta"
        assert form["method"].elem_id == "train-method" and form["parent"].elem_id == "train-parent"


def test_every_generated_group_is_named_by_its_fields(app):
    forms = [named.form_of(d.fn) for d in app.fns.values() if named.form_of(d.fn)]
    [chips] = [f for f in forms if "column" in f]
    assert {n: w.elem_id for n, w in chips["slots"].items()} == {
        n: f"mapping-{n}" for n in mapping.SLOTS
    }
    rewards = [f["values"] for f in forms if "reward_type" in f]
    assert len(rewards) == 2  # the Train tab's builder and the Pipelines tab's
    for options in rewards:
        assert all(w.elem_id.endswith(f"-reward-{n}") for n, w in options.items())
    [steps] = [f for f in forms if "fields" in f]
    for kind, widgets in steps["fields"].items():
        assert all(w.elem_id == f"pipe-{kind}-{n}" for n, w in widgets.items()), kind
    assert all(w.elem_id == f"pipe-args-{n}" for n, w in steps["args"].items())


def test_gradio_passes_each_value_under_its_name_with_a_widget_inserted_before_it():
    """Built as a tab builds a form, then a widget added in the middle: the handler still gets
    each value by its name, through Gradio's own call."""
    seen = {}

    def handler(first, second, settings):
        seen.update(first=first, second=second, settings=settings)
        return f"{first}|{second}|{settings['lr']}"

    with gr.Blocks() as demo:
        first = gr.Textbox("a")
        inserted = gr.Textbox("NOT-SECOND")  # a new widget, created between the two
        second = gr.Textbox("b")
        lr = gr.Number(0.5)
        out = gr.Textbox()
        form = {"first": first, "inserted": inserted, "second": second, "settings": {"lr": lr}}
        go = gr.Button()
        go.click(named.handler(lambda inserted, **rest: handler(**rest), form),
                 named.inputs(form), out)  # fmt: skip
    [block_fn] = [d for d in demo.fns.values() if d.fn is not None]
    assert block_fn.inputs_as_dict
    values = [{first: "a", inserted: "x", second: "b", lr: 0.5}[b] for b in block_fn.inputs]
    result = asyncio.run(demo.call_function(block_fn, values, state=SessionState(demo)))
    assert result["prediction"] == "a|b|0.5"
    assert seen == {"first": "a", "second": "b", "settings": {"lr": 0.5}}


def test_a_streaming_handler_stays_a_generator():
    def stream(x):
        yield x

    assert inspect.isgeneratorfunction(named.handler(stream, {"x": object()}))
    assert not inspect.isgeneratorfunction(named.handler(lambda x: x, {"x": object()}))
