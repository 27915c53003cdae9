"""Event handlers that read their widgets by name, so that adding a widget cannot shift another.

A form is a dict from a name to a widget (or to a dict of them, read as a dict of values):

    form = {"mapped": ctx.mapped, "method": method, "settings": {"Lora": {"r": r_box}}}
    go.click(named.handler(partial(start, runs_dir=ctx.runs_dir), form), named.inputs(form), out)

Gradio passes the values of a set of inputs as one dict keyed by component; `handler` turns it
back into the form's names and calls `fn(method=..., mapped=..., settings={"Lora": {"r": 8}})`.
The handler is a `functools.partial`, so `ui.per_user` still rebinds the runs folder bound in
`fn`, and a generator function stays one (Gradio streams by what the function is).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

Form = Mapping[str, Any]  # name -> component, or name -> a Form


def components(form: Form) -> list[Any]:
    """Every component of the form, nested forms included, in the form's order."""
    found: list[Any] = []
    for widget in form.values():
        found += components(widget) if isinstance(widget, Mapping) else [widget]
    return found


def inputs(form: Form) -> set[Any]:
    """The form's components as a set: Gradio then calls the handler with one dict."""
    return set(components(form))


def read(form: Form, data: Mapping[Any, Any]) -> dict[str, Any]:
    """Gradio's dict of values (keyed by component) -> the same values keyed by the form's
    names, nested as the form is."""
    return {
        name: read(widget, data) if isinstance(widget, Mapping) else data[widget]
        for name, widget in form.items()
    }


def _call(form: Form, fn: Callable[..., Any], data: Mapping[Any, Any]) -> Any:
    return fn(**read(form, data))


def _stream(form: Form, fn: Callable[..., Any], data: Mapping[Any, Any]) -> Iterator[Any]:
    yield from fn(**read(form, data))


def handler(fn: Callable[..., Any], form: Form) -> Callable[[Mapping[Any, Any]], Any]:
    """`fn` as the handler of an event whose inputs are `inputs(form)`: it gets each value as
    the keyword its name in the form says."""
    return partial(_stream if inspect.isgeneratorfunction(fn) else _call, dict(form), fn)


def called(fn: Any) -> Any:
    """The function a `handler` calls (what was passed to it); any other `fn` as it is."""
    if isinstance(fn, partial) and fn.func in (_call, _stream):
        return fn.args[1]
    return fn


def form_of(fn: Any) -> Form | None:
    """The form a `handler` reads (None for any other `fn`)."""
    if isinstance(fn, partial) and fn.func in (_call, _stream):
        return fn.args[0]
    return None
