"""Formatting helpers: escaping, the preview's spans and legend, tables."""

from __future__ import annotations

import pandas as pd

from ui import present


def test_preview_escapes_text_and_shows_a_legend_for_the_kinds_used():
    html = present.chat_preview_html(
        [[("<b>user</b>\n", "masked"), ("reply & done", "learned")]], "m"
    )
    assert '<span class="df-masked"' in html and "&lt;b&gt;user&lt;/b&gt;" in html
    assert '<span class="df-learned"' in html and "reply &amp; done" in html
    assert "masked (context)" in html and "rejected" not in html
    assert "Nothing to preview" in present.chat_preview_html([], "m")


def test_error_box_is_empty_without_an_error():
    assert present.error_html(None) == "" and present.error_html("") == ""
    assert "a &lt;b&gt; c" in present.error_html("a <b> c")


def test_table_preview_shortens_long_cells_and_keeps_missing_ones_blank():
    frame = pd.DataFrame({"a": ["x" * 1000, None], "b": ["1", "2"]})
    table = present.table_preview(frame)
    assert len(table.loc[0, "a"]) == present.CELL_CHARS and table.loc[1, "a"] == ""


def test_python_code_makes_the_example_path_portable():
    from dragonfarm_core.data.example import EXAMPLE_FILE

    code = present.python_code(f'ds = dragon.dataset("{EXAMPLE_FILE}")', imports=("json",))
    assert (
        code
        == "import json\n\nimport dragonfarm_core as dragon\n\nds = dragon.dataset(dragon.example_data())\n"
    )


def test_messages_show_code_spans_as_code_not_backticks():
    box = present.error_html("Run `iconv -f latin1 <in> out`; a lone ` stays.")
    assert "<code>iconv -f latin1 &lt;in&gt; out</code>" in box  # escaped inside the span too
    assert box.count("`") == 1  # the unpaired backtick is plain text
    assert (
        present.user_file_names(
            "/srv/runs/uploads/a-2.csv: bad", {"/srv/runs/uploads/a-2.csv": "a.csv"}
        )
        == "a.csv: bad"
    )
