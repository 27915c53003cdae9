"""The bundled example tickets: shape, house style, names, ticket ids, reproducibility."""

from __future__ import annotations

import collections
import importlib.util
import re
from pathlib import Path

import pytest

from dragonfarm_core.data import HOUSE_STYLE_PATTERN, dataset, example_data

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_example_data.py"


@pytest.fixture(scope="module")
def tickets():
    return dataset(example_data()).frame


def test_example_data_is_two_hundred_tickets(tickets):
    assert Path(example_data()).is_file()
    assert list(tickets.columns) == ["subject", "body", "product", "reply"]
    assert len(tickets) == 200 and tickets.notna().all().all()
    counts = collections.Counter(tickets["product"])
    assert 4 <= len(counts) <= 8 and min(counts.values()) >= 15


def test_every_reply_follows_the_house_style(tickets):
    assert all(re.search(HOUSE_STYLE_PATTERN, r) for r in tickets["reply"])
    assert all(300 <= len(r) <= 700 for r in tickets["reply"])


def test_pattern_rejects_replies_off_style():
    good = (
        "Hi Maria,\n\nThanks for reaching out about your Glow Smart Bulb. Sorry!\n\n"
        "1. One.\n2. Two.\n3. Three.\n\nLet us know.\n\nBest regards,\nThe Dragonfarm Support Team\n"
    )
    assert re.search(HOUSE_STYLE_PATTERN, good)
    for bad in [
        good.replace("Hi Maria,", "Hello Maria,"),
        good.replace("3. Three.\n", ""),
        good.replace("Best regards", "Cheers"),
        good.replace("Let us know.\n\n", ""),
        "Sure! " + good,
    ]:
        assert not re.search(HOUSE_STYLE_PATTERN, bad), bad


def test_greeting_uses_the_signed_first_name_and_ids_are_unique(tickets):
    ids = []
    for subject, body, reply in zip(
        tickets["subject"], tickets["body"], tickets["reply"], strict=True
    ):
        name = re.match(r"Hi (\w+),", reply).group(1)
        assert body.rstrip().endswith(name)
        found = re.findall(r"T-\d{4}", subject + body)
        assert len(found) == 1
        ids.append(found[0])
    assert len(set(ids)) == 200


def test_tickets_are_varied(tickets):
    assert tickets["body"].nunique() == 200
    openers = {re.sub(r"\W+", " ", r.split("\n\n")[1]) for r in tickets["reply"]}
    assert len(openers) >= 40  # issue x product combinations
    report = dataset(example_data()).map(prompt="{subject}\n\n{body}", response="reply").report()
    assert report.exact_duplicates == 0 and report.near_duplicates <= 5


def test_script_reproduces_the_committed_file(tickets):
    spec = importlib.util.spec_from_file_location("make_example_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build_rows() == tickets.to_dict("records")
