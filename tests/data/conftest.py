"""Shared fixtures for the data-layer tests: small files written into tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write(tmp_path: Path):
    """write(name, text_or_bytes) -> path of a new file in tmp_path."""

    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")
        return path

    return _write


@pytest.fixture
def tickets_csv(write):
    """A small, clean tickets table with a column name that has a space."""
    rows = ["subject,body,first name,reply"]
    for i in range(1, 26):
        rows.append(f'Issue {i},"Body {i}, with a comma",Name{i},Reply number {i}')
    return write("tickets.csv", "\n".join(rows) + "\n")
