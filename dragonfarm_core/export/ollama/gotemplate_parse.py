"""Lexing and parsing Go's text/template, the subset Ollama's prompt templates use, into nodes
that `gotemplate` renders: text and actions (with `{{-` / `-}}` trimming and comments), the
blocks `if` / `else if` / `else`, `range`, `with`, `break`, `continue`, and pipelines of
fields, variables, literals and function calls. Anything else raises GoTemplateError.
Pure standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dragonfarm_core.export.ollama.gotemplate_funcs import FUNCTIONS, LAZY, GoTemplateError

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
class Pipe:
    """`$a, $b := cmd | cmd`: the declared or assigned variables and the commands."""

    variables: list[str] = field(default_factory=list)
    declare: bool = True
    commands: list[list[Any]] = field(default_factory=list)


@dataclass
class Text:
    text: str


@dataclass
class Action:
    pipe: Pipe


@dataclass
class If:
    branches: list[tuple[Pipe, list[Any]]]
    otherwise: list[Any] | None
    kind: str = "if"  # "with" sets dot to the value


@dataclass
class Range:
    pipe: Pipe
    body: list[Any]
    otherwise: list[Any] | None


@dataclass
class Jump:
    kind: str  # "break" | "continue"


@dataclass
class Literal:
    value: Any


@dataclass
class Field:
    base: str  # "." for dot, "$" or "$name" for a variable
    path: list[str]


@dataclass
class Call:
    name: str


@dataclass
class Group:
    pipe: Pipe
    path: list[str]


def _operand(tokens: list[tuple[str, str]], i: int) -> tuple[Any, int]:
    kind, text = tokens[i]
    if kind == "str":
        return Literal(_unquote(text)), i + 1
    if kind == "raw":
        return Literal(text[1:-1]), i + 1
    if kind == "char":
        return Literal(ord(_unquote(text))), i + 1
    if kind == "num":
        return Literal(float(text) if "." in text else int(text)), i + 1
    if kind == "field":
        return Field(".", [p for p in text.split(".") if p]), i + 1
    if kind == "var":
        name, *path = text.split(".")
        return Field(name, path), i + 1
    if kind == "ident":
        if text in ("true", "false"):
            return Literal(text == "true"), i + 1
        if text == "nil":
            return Literal(None), i + 1
        if text not in FUNCTIONS and text not in LAZY:
            raise GoTemplateError(f"function {text!r} is not supported")
        return Call(text), i + 1
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
        return Group(inner, fields), j
    raise GoTemplateError(f"unexpected {text!r}")


def _pipe(tokens: list[tuple[str, str]]) -> Pipe:
    pipe = Pipe()
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


def _else(
    stack: list[tuple[Any, list[Any]]], tokens: list[tuple[str, str]], content: str
) -> list[Any]:
    """An `{{ else }}` or `{{ else if ... }}` of the innermost open block: the list the next
    nodes go to."""
    if not stack:
        raise GoTemplateError("{{ else }} outside a block")
    node = stack[-1][0]
    if len(tokens) > 1 and tokens[1] == ("ident", "if") and isinstance(node, If):
        node.branches.append((_pipe(tokens[2:]), []))
        return node.branches[-1][1]
    if len(tokens) == 1:
        node.otherwise = []
        return node.otherwise
    raise GoTemplateError(f"unsupported {{{{{content}}}}}")


def parse_nodes(source: str) -> list[Any]:
    """The template as a list of nodes."""
    root: list[Any] = []
    # The open blocks: (node, the list the next nodes go to).
    stack: list[tuple[Any, list[Any]]] = []
    body = root
    for kind, content in _split(source):
        if kind == "text":
            if content:
                body.append(Text(content))
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
            branch = If([(_pipe(tokens[1:]), [])], None, kind=word)
            body.append(branch)
            stack.append((branch, body))
            body = branch.branches[0][1]
        elif word == "range":
            loop = Range(_pipe(tokens[1:]), [], None)
            body.append(loop)
            stack.append((loop, body))
            body = loop.body
        elif word == "else":
            body = _else(stack, tokens, content)
        elif word == "end":
            if not stack:
                raise GoTemplateError("{{ end }} without a block")
            _, body = stack.pop()
        elif word in ("break", "continue"):
            body.append(Jump(word))
        elif word in ("define", "template", "block"):
            raise GoTemplateError(f"{{{{ {word} }}}} is not supported")
        else:
            body.append(Action(_pipe(tokens)))
    if stack:
        raise GoTemplateError("a block is not closed with {{ end }}")
    return root
