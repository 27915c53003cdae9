"""What the browser tests check about a wide table: every header on screen, on one line, and
every cell of its first row inside the window."""

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


# (text, right edge) of each cell of a table's first shown row: Gradio's grid cells (a hidden
# sizing copy of the rows, aria-hidden, is left out).
ROW_RIGHTS = """t => {
    const cells = Array.from(t.querySelectorAll('[role=gridcell], td'))
        .filter(c => !c.closest('[aria-hidden="true"]'));
    const row = cells.length ? cells[0].closest('[role=row], tr') : null;
    return cells.filter(c => c.closest('[role=row], tr') === row)
        .map(c => [c.innerText.trim().slice(0, 30), c.getBoundingClientRect().right]);
}"""


def first_row_cells(page: Any, table: str) -> list[tuple[str, float]]:
    """(text, right edge) of each cell of the first row of the table `table` (a selector)."""
    return [(text, right) for text, right in page.eval_on_selector(table, ROW_RIGHTS)]
