"""Column names and templates: how one mapped field (prompt, response, ...) reads a row.

A value is, in this order: the name of a column ("reply"); a template whose {placeholders} name
columns ("{subject}\\n\\n{body}", "{first name}"); or, for a system prompt only, literal text
("You are helpful."). `{{` and `}}` are literal braces. A placeholder is everything between the
braces, so column names with spaces, colons or unicode work; there are no format specs.
Everything is checked against the columns when the mapping is made, not when rows are rendered.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dragonfarm_core.data.errors import DatasetError


@dataclass(frozen=True)
class Slot:
    """A resolved field: literal text pieces and column references, in order."""

    source: str
    parts: tuple[tuple[str, bool], ...]  # (text, is_column)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns this field reads, in order of first use."""
        return tuple(dict.fromkeys(text for text, is_col in self.parts if is_col))

    def render(self, row: Mapping[str, str | None]) -> str | None:
        """The field's text for one row; None when a column it reads is empty or missing."""
        out = []
        for text, is_col in self.parts:
            if is_col:
                value = row.get(text)
                if value is None or not value.strip():
                    return None
                out.append(value)
            else:
                out.append(text)
        return "".join(out)


def parse_template(text: str, where: str) -> list[tuple[str, bool]]:
    """Split a template into literal text and placeholder names; braces must balance."""
    parts: list[tuple[str, bool]] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "{}" and text[i : i + 2] == ch * 2:
            literal.append(ch)
            i += 2
        elif ch == "{":
            end = text.find("}", i + 1)
            inner = text[i + 1 : end] if end != -1 else ""
            if end == -1 or "{" in inner:
                raise DatasetError(
                    f"{where}: the '{{' at position {i} is never closed. Close the placeholder "
                    f"with '}}', or write '{{{{' for a literal brace."
                )
            if not inner.strip():
                raise DatasetError(
                    f"{where}: empty placeholder '{{}}' at position {i}; put a column name "
                    f"inside, or write '{{{{}}}}' for literal braces."
                )
            if literal:
                parts.append(("".join(literal), False))
                literal = []
            parts.append((inner, True))
            i = end + 1
        elif ch == "}":
            raise DatasetError(
                f"{where}: unmatched '}}' at position {i}; write '}}}}' for a literal brace."
            )
        else:
            literal.append(ch)
            i += 1
    if literal:
        parts.append(("".join(literal), False))
    return parts


def available(columns: Sequence[str]) -> str:
    """The column list that error messages end with."""
    return "Available columns: " + ", ".join(repr(c) for c in columns) + "."


def _suggest(name: str, columns: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(columns), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def resolve(
    value: str, columns: Sequence[str], field: str, source: str, literal_ok: bool = False
) -> Slot:
    """Resolve `field=value` against the dataset's columns, or raise naming what is missing."""
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(
            f"{field}= must be a column name or a template such as '{{subject}}', got {value!r}. "
            f"{available(columns)}"
        )
    if value in columns:
        return Slot(value, ((value, True),))
    where = f"{field} template {value!r}"
    parts = parse_template(value, where)
    resolved: list[tuple[str, bool]] = []
    for text, is_col in parts:
        if not is_col:
            resolved.append((text, False))
            continue
        name = text if text in columns else text.strip()
        if name not in columns:
            raise DatasetError(
                f"{where} names the column {text!r}, which {source} does not have."
                f"{_suggest(text, columns)} {available(columns)} For a literal brace write "
                f"'{{{{' or '}}}}'."
            )
        resolved.append((name, True))
    if not any(is_col for _, is_col in resolved) and not literal_ok:
        raise DatasetError(
            f"{field}={value!r} is neither a column of {source} nor a template with "
            f"{{placeholders}}.{_suggest(value, columns)} {available(columns)} "
            f"Combine columns with a template such as '{{{columns[0]}}}'."
        )
    return Slot(value, tuple(resolved))
