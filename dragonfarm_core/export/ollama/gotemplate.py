"""Render the part of Go's text/template that Ollama's prompt templates use, in Python.

    render('{{- range .Messages }}<|im_start|>{{ .Role }}\\n{{ .Content }}<|im_end|>\\n{{ end }}',
           {"Messages": [{"Role": "user", "Content": "Hi"}]})

Ollama renders a Modelfile's TEMPLATE with Go's text/template. dragonfarm translates a model's
chat template (Jinja) into one (`ollama_export`), and proves the translation by rendering both
for the same conversations and comparing the strings. There is no Go toolchain on the machines
this runs on, so this module renders the subset of the language those templates use:

- text and actions, `{{-` / `-}}` trimming (the neighbouring text's spaces, tabs, newlines),
  comments `{{/* ... */}}`;
- `if` / `else if` / `else` / `end`, `range` (with `$i, $v :=`, `else`, `break`, `continue`),
  `with`; variables (`$x := ...`, `$x = ...`, `$` for the data), fields (`.Role`,
  `$.System`, `$m.Content`), parenthesised pipelines and `|` pipes;
- string (interpreted and raw), number, `true` / `false` / `nil` literals;
- the functions `eq ne lt le gt ge and or not len index slice print printf` with Go's rules
  (`and` / `or` return an operand and stop early; `eq` compares with any of its later
  operands), and Go's truth (false, 0, "", nil and empty collections are false).

Data is plain Python: dicts are Go maps or structs (a field `.Role` reads the key "Role"); a
missing key is Go's zero value under Ollama's `missingkey=zero`. Anything outside the subset
raises GoTemplateError instead of guessing. tests/data/ollama_go_golden.json holds what real Go
printed for the templates dragonfarm writes, and the tests compare this renderer with it.
This module evaluates; `gotemplate_parse` lexes and parses, `gotemplate_funcs` holds the
functions. Pure standard library.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.export.ollama.gotemplate_funcs import (
    FUNCTIONS,
    LAZY,
    GoTemplateError,
    text_of,
    truth,
)
from dragonfarm_core.export.ollama.gotemplate_parse import (
    Action,
    Call,
    Field,
    Group,
    If,
    Jump,
    Literal,
    Pipe,
    Range,
    Text,
    parse_nodes,
)

# --- evaluation --------------------------------------------------------------------------------


class _Jumped(Exception):
    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Scope:
    """Variables, scoped like Go's: a block's declarations end with the block."""

    def __init__(self, data: Any) -> None:
        self.frames: list[dict[str, Any]] = [{"$": data}]

    def get(self, name: str) -> Any:
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise GoTemplateError(f"undefined variable {name}")

    def set(self, name: str, value: Any, declare: bool) -> None:
        if declare:
            self.frames[-1][name] = value
            return
        for frame in reversed(self.frames):
            if name in frame:
                frame[name] = value
                return
        raise GoTemplateError(f"undefined variable {name}")


def _field(value: Any, path: list[str]) -> Any:
    for name in path:
        if value is None:
            raise GoTemplateError(f"nil pointer evaluating .{name}")
        if not isinstance(value, dict):
            raise GoTemplateError(f"can't evaluate field {name} in {type(value).__name__}")
        value = value.get(name)  # missingkey=zero: a missing key is the zero value
    return value


class _Renderer:
    def __init__(self, data: Any) -> None:
        self.scope = _Scope(data)
        self.out: list[str] = []

    def value(self, node: Any, dot: Any) -> Any:
        if isinstance(node, Literal):
            return node.value
        if isinstance(node, Field):
            base = dot if node.base == "." else self.scope.get(node.base)
            return _field(base, node.path)
        if isinstance(node, Group):
            return _field(self.pipe(node.pipe, dot), node.path)
        if isinstance(node, Call):
            return self.call(node.name, [], dot)
        raise GoTemplateError(f"unexpected {node!r}")

    def call(self, name: str, args: list[Any], dot: Any, piped: list[Any] | None = None) -> Any:
        if name in LAZY:
            if not args and not piped:
                raise GoTemplateError(f"{name} needs arguments")
            result: Any = None
            for node in args:
                result = self.value(node, dot)
                if truth(result) == (name == "or"):
                    return result
            if piped:  # a piped value is the last operand
                result = piped[-1]
            return result
        values = [self.value(a, dot) for a in args] + list(piped or [])
        try:
            return FUNCTIONS[name](*values)
        except TypeError as e:
            raise GoTemplateError(f"wrong arguments for {name}: {e}") from None

    def command(self, command: list[Any], dot: Any, piped: list[Any] | None) -> Any:
        head = command[0]
        if isinstance(head, Call):
            return self.call(head.name, command[1:], dot, piped)
        if len(command) > 1 or piped:
            raise GoTemplateError("only a function takes arguments")
        return self.value(head, dot)

    def pipe(self, pipe: Pipe, dot: Any) -> Any:
        value: Any = None
        for i, command in enumerate(pipe.commands):
            value = self.command(command, dot, [value] if i else None)
        return value

    def run_pipe(self, pipe: Pipe, dot: Any) -> tuple[Any, bool]:
        """Evaluate; (its value, whether it prints): a declaration or assignment does not."""
        value = self.pipe(pipe, dot)
        for name in pipe.variables:
            self.scope.set(name, value, pipe.declare)
        return value, not pipe.variables

    def block(self, nodes: list[Any], dot: Any) -> None:
        self.scope.frames.append({})
        try:
            self.nodes(nodes, dot)
        finally:
            self.scope.frames.pop()

    def nodes(self, nodes: list[Any], dot: Any) -> None:
        for node in nodes:
            if isinstance(node, Text):
                self.out.append(node.text)
            elif isinstance(node, Action):
                value, prints = self.run_pipe(node.pipe, dot)
                if prints:
                    self.out.append(text_of(value))
            elif isinstance(node, If):
                self.if_(node, dot)
            elif isinstance(node, Range):
                self.range_(node, dot)
            elif isinstance(node, Jump):
                raise _Jumped(node.kind)

    def if_(self, node: If, dot: Any) -> None:
        self.scope.frames.append({})  # a variable declared in the condition lives in the block
        try:
            for pipe, body in node.branches:
                value, _ = self.run_pipe(pipe, dot)
                if truth(value):
                    self.block(body, value if node.kind == "with" else dot)
                    return
            if node.otherwise is not None:
                self.block(node.otherwise, dot)
        finally:
            self.scope.frames.pop()

    def range_(self, node: Range, dot: Any) -> None:
        pipe = node.pipe
        items = self.pipe(Pipe(commands=pipe.commands), dot)
        if items is None:
            items = []
        if isinstance(items, dict):
            pairs = sorted(items.items())
        elif isinstance(items, list | tuple):
            pairs = list(enumerate(items))
        elif isinstance(items, int):
            pairs = [(i, i) for i in range(items)]
        else:
            raise GoTemplateError(f"range can't iterate over {items!r}")
        if not pairs:
            if node.otherwise is not None:
                self.block(node.otherwise, dot)
            return
        if len(pipe.variables) > 2:
            raise GoTemplateError("range declares at most two variables")
        for key, item in pairs:
            self.scope.frames.append({})
            try:
                if len(pipe.variables) == 1:
                    self.scope.set(pipe.variables[0], item, True)
                elif len(pipe.variables) == 2:
                    self.scope.set(pipe.variables[0], key, True)
                    self.scope.set(pipe.variables[1], item, True)
                self.nodes(node.body, item)
            except _Jumped as jump:
                if jump.kind == "break":
                    break
            finally:
                self.scope.frames.pop()


def parse(source: str) -> list[Any]:
    """Check that `source` is in the supported subset; its parsed form (GoTemplateError if not)."""
    return parse_nodes(source)


def render(source: str, data: Any) -> str:
    """`source` executed on `data`, as Go's text/template (Ollama's options) would print it."""
    renderer = _Renderer(data)
    try:
        renderer.nodes(parse_nodes(source), data)
    except _Jumped as jump:
        raise GoTemplateError(f"{{{{ {jump.kind} }}}} outside a range") from None
    return "".join(renderer.out)
