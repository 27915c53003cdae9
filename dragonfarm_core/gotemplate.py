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
Pure standard library.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class GoTemplateError(ValueError):
    """A template outside the supported subset, or an error while rendering it."""


# --- lexing: text and actions ------------------------------------------------------------------

_SPACE = " \t\r\n"


def _split(source: str) -> list[tuple[str, str]]:
    """[("text", s) | ("action", inner)], with `{{-` / `-}}` trimming applied to the text."""
    parts: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    while True:
        start = source.find("{{", pos)
        text = source[pos:] if start < 0 else source[pos:start]
        if trim_next:
            text = text.lstrip(_SPACE)
        if start < 0:
            parts.append(("text", text))
            return parts
        inner_start = start + 2
        if source.startswith("- ", inner_start) or (
            source.startswith("-", inner_start)
            and source[inner_start + 1 : inner_start + 2] in ("\t", "\r", "\n")
        ):
            text = text.rstrip(_SPACE)
            inner_start += 1
        parts.append(("text", text))
        end = _action_end(source, inner_start)
        inner = source[inner_start:end]
        trim_next = False
        if len(inner) >= 2 and inner[-1] == "-" and inner[-2] in _SPACE:
            inner, trim_next = inner[:-1], True
        parts.append(("action", inner))
        pos = end + 2


def _action_end(source: str, pos: int) -> int:
    """Where the action starting at `pos` closes (its `}}`), skipping strings and comments."""
    i = pos
    while i < len(source):
        c = source[i]
        if source.startswith("/*", i):
            close = source.find("*/", i + 2)
            if close < 0:
                raise GoTemplateError("unclosed comment")
            i = close + 2
            continue
        if c in "\"`'":
            i = _string_end(source, i) + 1
            continue
        if source.startswith("}}", i):
            return i
        i += 1
    raise GoTemplateError(f"unclosed action at {pos}: {source[pos - 2 : pos + 30]!r}")


def _string_end(source: str, i: int) -> int:
    quote, j = source[i], i + 1
    while j < len(source):
        if source[j] == "\\" and quote != "`":
            j += 2
            continue
        if source[j] == quote:
            return j
        j += 1
    raise GoTemplateError(f"unterminated string at {i}")


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<raw>`[^`]*`)
    | (?P<char>'(?:[^'\\]|\\.)')
    | (?P<num>-?\d+(?:\.\d+)?)
    | (?P<decl>:=)
    | (?P<assign>=)
    | (?P<punct>[(),|])
    | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
    | (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def _unquote(text: str) -> str:
    out, i = [], 1
    while i < len(text) - 1:
        c = text[i]
        if c == "\\":
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise GoTemplateError(f"unsupported escape \\{nxt} in {text}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _tokens(inner: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    inner = inner.rstrip(_SPACE)
    while pos < len(inner):
        m = _TOKEN.match(inner, pos)
        if not m or m.end() == pos:
            raise GoTemplateError(f"cannot read {inner[pos:]!r} in {{{{{inner}}}}}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


# --- parsing: a tree of nodes ------------------------------------------------------------------


@dataclass
class _Pipe:
    """`$a, $b := cmd | cmd`: the declared or assigned variables and the commands."""

    variables: list[str] = field(default_factory=list)
    declare: bool = True
    commands: list[list[Any]] = field(default_factory=list)


@dataclass
class _Text:
    text: str


@dataclass
class _Action:
    pipe: _Pipe


@dataclass
class _If:
    branches: list[tuple[_Pipe, list[Any]]]
    otherwise: list[Any] | None
    kind: str = "if"  # "with" sets dot to the value


@dataclass
class _Range:
    pipe: _Pipe
    body: list[Any]
    otherwise: list[Any] | None


@dataclass
class _Jump:
    kind: str  # "break" | "continue"


@dataclass
class _Literal:
    value: Any


@dataclass
class _Field:
    base: str  # "." for dot, "$" or "$name" for a variable
    path: list[str]


@dataclass
class _Call:
    name: str


@dataclass
class _Group:
    pipe: _Pipe
    path: list[str]


def _operand(tokens: list[tuple[str, str]], i: int) -> tuple[Any, int]:
    kind, text = tokens[i]
    if kind == "str":
        return _Literal(_unquote(text)), i + 1
    if kind == "raw":
        return _Literal(text[1:-1]), i + 1
    if kind == "char":
        return _Literal(ord(_unquote(text))), i + 1
    if kind == "num":
        return _Literal(float(text) if "." in text else int(text)), i + 1
    if kind == "field":
        return _Field(".", [p for p in text.split(".") if p]), i + 1
    if kind == "var":
        name, *path = text.split(".")
        return _Field(name, path), i + 1
    if kind == "ident":
        if text in ("true", "false"):
            return _Literal(text == "true"), i + 1
        if text == "nil":
            return _Literal(None), i + 1
        if text not in FUNCTIONS and text not in LAZY:
            raise GoTemplateError(f"function {text!r} is not supported")
        return _Call(text), i + 1
    if text == "(":
        depth, j = 1, i + 1
        while j < len(tokens) and depth:
            depth += {"(": 1, ")": -1}.get(tokens[j][1], 0) if tokens[j][0] == "punct" else 0
            j += 1
        if depth:
            raise GoTemplateError("unclosed parenthesis")
        inner = _pipe(tokens[i + 1 : j - 1])
        fields: list[str] = []
        if j < len(tokens) and tokens[j][0] == "field" and tokens[j][1] != ".":
            fields = [p for p in tokens[j][1].split(".") if p]
            j += 1
        return _Group(inner, fields), j
    raise GoTemplateError(f"unexpected {text!r}")


def _pipe(tokens: list[tuple[str, str]]) -> _Pipe:
    pipe = _Pipe()
    kinds = [k for k, _ in tokens]
    for marker in ("decl", "assign"):
        if marker in kinds:
            at = kinds.index(marker)
            names = [t for k, t in tokens[:at] if k == "var"]
            if not names or any(k not in ("var", "punct") for k in kinds[:at]):
                raise GoTemplateError("only variables may be declared or assigned")
            pipe.variables, pipe.declare = names, marker == "decl"
            tokens = tokens[at + 1 :]
            break
    command: list[Any] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == ("punct", "|"):
            pipe.commands.append(command)
            command, i = [], i + 1
            continue
        node, i = _operand(tokens, i)
        command.append(node)
    if not command:
        raise GoTemplateError("empty command")
    pipe.commands.append(command)
    return pipe


def _parse(source: str) -> list[Any]:
    """The template as a list of nodes."""
    root: list[Any] = []
    # The open blocks: (node, the list the next nodes go to).
    stack: list[tuple[Any, list[Any]]] = []
    body = root
    for kind, content in _split(source):
        if kind == "text":
            if content:
                body.append(_Text(content))
            continue
        stripped = content.strip(_SPACE)
        if stripped.startswith("/*"):
            if not stripped.endswith("*/"):
                raise GoTemplateError(f"a comment must fill its action: {{{{{content}}}}}")
            continue
        tokens = _tokens(content)
        if not tokens:
            raise GoTemplateError("empty action {{}}")
        word = tokens[0][1] if tokens[0][0] == "ident" else ""
        if word in ("if", "with"):
            branch = _If([(_pipe(tokens[1:]), [])], None, kind=word)
            body.append(branch)
            stack.append((branch, body))
            body = branch.branches[0][1]
        elif word == "range":
            loop = _Range(_pipe(tokens[1:]), [], None)
            body.append(loop)
            stack.append((loop, body))
            body = loop.body
        elif word == "else":
            if not stack:
                raise GoTemplateError("{{ else }} outside a block")
            node = stack[-1][0]
            if len(tokens) > 1 and tokens[1] == ("ident", "if") and isinstance(node, _If):
                node.branches.append((_pipe(tokens[2:]), []))
                body = node.branches[-1][1]
            elif len(tokens) == 1:
                node.otherwise = []
                body = node.otherwise
            else:
                raise GoTemplateError(f"unsupported {{{{{content}}}}}")
        elif word == "end":
            if not stack:
                raise GoTemplateError("{{ end }} without a block")
            _, body = stack.pop()
        elif word in ("break", "continue"):
            body.append(_Jump(word))
        elif word in ("define", "template", "block"):
            raise GoTemplateError(f"{{{{ {word} }}}} is not supported")
        else:
            body.append(_Action(_pipe(tokens)))
    if stack:
        raise GoTemplateError("a block is not closed with {{ end }}")
    return root


# --- evaluation --------------------------------------------------------------------------------


def truth(value: Any) -> bool:
    """Go's truth: false, 0, "", nil and empty collections are false."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float | str | list | tuple | dict):
        return bool(value)
    return True


def text_of(value: Any) -> str:
    """How Go prints a value in a template."""
    if value is None:
        return "<no value>"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return "[" + " ".join(text_of(v) for v in value) + "]"
    return str(value)


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise GoTemplateError("eq needs at least two arguments")
    return any(a == b for b in others)


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        if type(a) is not type(b) and not (
            isinstance(a, int | float) and isinstance(b, int | float)
        ):
            raise GoTemplateError(f"incompatible types for comparison: {a!r}, {b!r}")
        return op(a, b)

    return compare


def _len(value: Any) -> int:
    if not isinstance(value, str | list | tuple | dict):
        raise GoTemplateError(f"len of {type(value).__name__}")
    return len(value.encode() if isinstance(value, str) else value)


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list | tuple | str):
            if not isinstance(key, int) or not 0 <= key < len(value):
                raise GoTemplateError(f"index {key!r} out of range")
            value = value[key]
        else:
            raise GoTemplateError(f"cannot index {type(value).__name__}")
    return value


def _slice(value: Any, *bounds: int) -> Any:
    if not isinstance(value, str | list | tuple) or len(bounds) > 2:
        raise GoTemplateError("slice takes a string or a list and up to two bounds")
    lo = bounds[0] if bounds else 0
    hi = bounds[1] if len(bounds) > 1 else len(value)
    if not 0 <= lo <= hi <= len(value):
        raise GoTemplateError(f"slice bounds {lo}:{hi} out of range")
    return value[lo:hi]


def _print(*values: Any) -> str:
    # fmt.Sprint: a space between operands when neither is a string.
    out = ""
    for i, v in enumerate(values):
        if i and not isinstance(v, str) and not isinstance(values[i - 1], str):
            out += " "
        out += text_of(v)
    return out


def _printf(form: str, *values: Any) -> str:
    pieces = re.split(r"(%[svdq%])", form)
    out, args = [], list(values)
    for piece in pieces:
        if piece == "%%":
            out.append("%")
        elif piece in ("%s", "%v", "%d"):
            if not args:
                out.append(f"%!{piece[1]}(MISSING)")
            else:
                out.append(text_of(args.pop(0)))
        elif piece == "%q":
            out.append('"' + str(args.pop(0)).replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            out.append(piece)
    return "".join(out)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "not": lambda a: not truth(a),
    "len": _len,
    "index": _index,
    "slice": _slice,
    "print": _print,
    "printf": _printf,
}
# Evaluated by the renderer itself: they stop at the first operand that decides (Go 1.18+).
LAZY = frozenset({"and", "or"})


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
        if isinstance(node, _Literal):
            return node.value
        if isinstance(node, _Field):
            base = dot if node.base == "." else self.scope.get(node.base)
            return _field(base, node.path)
        if isinstance(node, _Group):
            return _field(self.pipe(node.pipe, dot), node.path)
        if isinstance(node, _Call):
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
        if isinstance(head, _Call):
            return self.call(head.name, command[1:], dot, piped)
        if len(command) > 1 or piped:
            raise GoTemplateError("only a function takes arguments")
        return self.value(head, dot)

    def pipe(self, pipe: _Pipe, dot: Any) -> Any:
        value: Any = None
        for i, command in enumerate(pipe.commands):
            value = self.command(command, dot, [value] if i else None)
        return value

    def run_pipe(self, pipe: _Pipe, dot: Any) -> tuple[Any, bool]:
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
            if isinstance(node, _Text):
                self.out.append(node.text)
            elif isinstance(node, _Action):
                value, prints = self.run_pipe(node.pipe, dot)
                if prints:
                    self.out.append(text_of(value))
            elif isinstance(node, _If):
                self.if_(node, dot)
            elif isinstance(node, _Range):
                self.range_(node, dot)
            elif isinstance(node, _Jump):
                raise _Jumped(node.kind)

    def if_(self, node: _If, dot: Any) -> None:
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

    def range_(self, node: _Range, dot: Any) -> None:
        pipe = node.pipe
        items = self.pipe(_Pipe(commands=pipe.commands), dot)
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
    return _parse(source)


def render(source: str, data: Any) -> str:
    """`source` executed on `data`, as Go's text/template (Ollama's options) would print it."""
    renderer = _Renderer(data)
    try:
        renderer.nodes(_parse(source), data)
    except _Jumped as jump:
        raise GoTemplateError(f"{{{{ {jump.kind} }}}} outside a range") from None
    return "".join(renderer.out)
