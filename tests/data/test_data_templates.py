"""Column names versus templates: every edge case of how a mapped field reads a row."""

from __future__ import annotations

import pandas as pd
import pytest

from dragonfarm_core.data import DatasetError, dataset
from dragonfarm_core.data.templates import parse_template, resolve

COLUMNS = ["subject", "body", "first name", "Ünï", "{odd}", "reply"]


def render(value: str, row: dict[str, str | None], literal_ok: bool = False) -> str | None:
    return resolve(value, COLUMNS, "prompt", "t.csv", literal_ok=literal_ok).render(row)


def test_plain_column_name():
    assert render("subject", {"subject": "Hello {x}"}) == "Hello {x}"


def test_template_combines_columns():
    row = {"subject": "S", "body": "B"}
    assert render("{subject}\n\n{body}", row) == "S\n\nB"


def test_doubled_braces_are_literal():
    assert render("{{ {subject} }}", {"subject": "S"}) == "{ S }"
    assert render("{{{subject}}}", {"subject": "S"}) == "{S}"
    assert render('JSON: {{"a": {subject}}}', {"subject": "1"}) == 'JSON: {"a": 1}'


def test_column_with_space_unicode_and_padding_inside_braces():
    row = {"first name": "Ana", "Ünï": "ü", "subject": "S"}
    assert render("Hi {first name} {Ünï}", row) == "Hi Ana ü"
    assert render("{ subject }", row) == "S"


def test_a_column_literally_named_like_a_template_wins():
    assert render("{odd}", {"{odd}": "yes"}) == "yes"


def test_placeholder_columns_in_order_without_repeats():
    slot = resolve("{body} {subject} {body}", COLUMNS, "prompt", "t.csv")
    assert slot.columns == ("body", "subject")


def test_empty_or_missing_cell_renders_none():
    slot = resolve("{subject}: {body}", COLUMNS, "prompt", "t.csv")
    assert slot.render({"subject": "S", "body": None}) is None
    assert slot.render({"subject": "  ", "body": "B"}) is None


def test_missing_column_is_named_with_suggestion_and_available_columns():
    with pytest.raises(DatasetError) as err:
        resolve("{subjct}\n\n{body}", COLUMNS, "prompt", "t.csv")
    msg = str(err.value)
    assert "names the column 'subjct', which t.csv does not have" in msg
    assert "Did you mean 'subject'?" in msg
    assert "Available columns: 'subject', 'body', 'first name'" in msg


def test_neither_column_nor_template():
    with pytest.raises(DatasetError, match=r"response='replies' is neither a column.*'reply'"):
        resolve("replies", COLUMNS, "response", "t.csv")


def test_system_literal_text_and_escaped_braces():
    assert render("You are helpful.", {}, literal_ok=True) == "You are helpful."
    assert render("Answer in {{json}}.", {}, literal_ok=True) == "Answer in {json}."
    assert render("You help {first name}.", {"first name": "Bo"}, literal_ok=True) == "You help Bo."


def test_system_with_unknown_placeholder_is_refused():
    with pytest.raises(DatasetError, match=r"column '\"a\": 1'.*literal brace write '\{\{'"):
        resolve('Reply like {"a": 1}', COLUMNS, "system", "t.csv", literal_ok=True)


@pytest.mark.parametrize(
    ("template", "pattern"),
    [
        ("{subject", r"'\{' at position 0 is never closed"),
        ("a {sub{ject}", r"'\{' at position 2 is never closed"),
        ("subject}", r"unmatched '\}' at position 7"),
        ("x {} y", r"empty placeholder '\{\}' at position 2"),
        ("{  }", "empty placeholder"),
    ],
)
def test_unbalanced_braces(template, pattern):
    with pytest.raises(DatasetError, match=pattern):
        parse_template(template, "prompt template")


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_empty_or_non_string_values(bad):
    with pytest.raises(DatasetError, match="must be a column name or a template"):
        resolve(bad, COLUMNS, "prompt", "t.csv")


def test_map_validates_at_map_time_naming_file_and_columns(tickets_csv):
    ds = dataset(tickets_csv)
    with pytest.raises(DatasetError) as err:
        ds.map(prompt="{subject}", response="{answer}")
    assert str(tickets_csv) in str(err.value) and "'answer'" in str(err.value)
    assert "Available columns: 'subject', 'body', 'first name', 'reply'." in str(err.value)
    with pytest.raises(DatasetError, match="system template"):
        ds.map(prompt="subject", response="reply", system="Be kind to {customer}.")


def test_map_renders_templates_per_row():
    df = pd.DataFrame({"first name": ["Ana", "Bo"], "q": ["x", "y"], "a": ["1", "2"]})
    recs = dataset(df).map(prompt="{first name} asks: {q}", response="a").records()
    assert [r["messages"][0]["content"] for r in recs] == ["Ana asks: x", "Bo asks: y"]
