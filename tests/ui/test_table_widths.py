"""Column widths for wide tables: every column fits 1400 px, no header narrower than its words."""

from __future__ import annotations

import pandas as pd
import pytest

from ui import present
from ui.table_widths import CHAR_PX, PAD_PX, TABLE_PX, column_widths
from ui.tabs import feedback

LONG = "My laptop cannot connect to the VPN since this morning; the client says it failed. " * 2


def pixels(widths: list[str | int]) -> list[float]:
    """Percentages of the table as pixels of a 1400 px window's table."""
    return [float(w.rstrip("%")) / 100 * TABLE_PX if isinstance(w, str) else w for w in widths]


def test_long_text_columns_share_the_row_and_short_ones_keep_their_header():
    frame = pd.DataFrame(
        [{"ticket_id": "IT-1", "requester_department": "Finance", "subject": "VPN failed",
          "description": LONG, "resolution_summary": LONG, "duration_minutes": "35"}] * 3
    )  # fmt: skip
    widths = column_widths(frame)
    assert all(isinstance(w, str) and w.endswith("%") for w in widths)
    assert sum(float(w.rstrip("%")) for w in widths) == pytest.approx(100, abs=0.5)
    px = dict(zip(frame.columns, pixels(widths), strict=True))
    for column in frame.columns:  # the header's longest word fits unbroken
        assert px[column] >= len(column) * CHAR_PX + PAD_PX - 1, column
    assert px["description"] > 2 * px["ticket_id"]  # the text gets the room


def test_too_many_columns_scroll_in_pixels_rather_than_break_their_headers():
    frame = pd.DataFrame({f"measurement_number_{i}": ["1"] for i in range(12)})
    widths = column_widths(frame)
    assert all(isinstance(w, int) for w in widths) and sum(pixels(widths)) > TABLE_PX
    assert column_widths(pd.DataFrame()) == []


def test_the_feedback_table_has_a_width_per_column():
    columns = present.feedback_table([]).columns
    assert len(feedback.COLUMN_WIDTHS) == len(columns)
    assert sum(float(w.rstrip("%")) for w in feedback.COLUMN_WIDTHS) == 100


def test_a_scrolling_table_gives_short_cells_their_room():
    """Compare's 18 columns scroll: its run ids (28 characters) got the room of the header "id"
    and stood a few letters a line; now a cell gets up to a short text's room (20 characters),
    a long text no more, and a header still its longest word."""
    run_id = "20261207-045331-tiny-support"
    frame = pd.DataFrame([{"id": run_id, "notes": LONG}
                          | {f"measurement_number_{i}": "1" for i in range(12)}])  # fmt: skip
    px = dict(zip(frame.columns, column_widths(frame), strict=True))
    assert px["id"] == round(20 * CHAR_PX + PAD_PX) == px["notes"]
    assert px["measurement_number_0"] == round(len("measurement_number_0") * CHAR_PX + PAD_PX)
