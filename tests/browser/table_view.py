"""What the browser tests check about a wide table: every header on screen, on one line."""

from __future__ import annotations

from typing import Any

HEADER_BOXES = """els => els.map(e => {
    const text = e.querySelector('span') || e;
    const line = parseFloat(getComputedStyle(text).lineHeight) || 20;
    return [e.innerText.trim(), e.getBoundingClientRect().right,
            text.getBoundingClientRect().height / line];
})"""


def headers_out_of_view(page: Any, table: str, width: int) -> list[str]:
    """The headers of the table `table` (a selector) that end right of `width` px or wrap onto
    a second line (a header broken mid-word, "feedbac k")."""
    boxes = page.eval_on_selector_all(f"{table} thead th", HEADER_BOXES)
    assert boxes, f"no headers in {table}"
    return [name for name, right, lines in boxes if right > width or lines > 1.5]
