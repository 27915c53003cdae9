"""The bundled example dataset, and the house style its replies follow.

`example_data()` is the path of assets/example_tickets.csv: 200 synthetic customer-support
tickets (columns subject, body, product, reply) written by `python scripts/make_example_data.py`
with a fixed seed. Every body is signed with the customer's first name and carries a ticket id
such as "T-1042" (in the subject or the body). Every reply follows one house style:

    Hi <FirstName>,

    Thanks for reaching out about your <product>. <one sentence on the problem>

    1. <step>
    2. <step>
    3. <step>

    <one closing sentence>

    Best regards,
    The Dragonfarm Support Team

`HOUSE_STYLE_PATTERN` is that style as a regular expression (anchored with \\A and \\Z, so
`re.search` and `re.fullmatch` agree; trailing whitespace is allowed). An evaluation measures
how often a model's reply matches it:

    re.search(HOUSE_STYLE_PATTERN, reply) is not None
"""

from __future__ import annotations

from pathlib import Path

HOUSE_STYLE_PATTERN = (
    r"\AHi [^\s,]+,\n\n"
    r"Thanks for reaching out about your [^\n]+?\.[^\n]*\n\n"
    r"1\. [^\n]+\n2\. [^\n]+\n3\. [^\n]+\n\n"
    r"[^\n]+\n\n"
    r"Best regards,\nThe Dragonfarm Support Team\s*\Z"
)

EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "assets" / "example_tickets.csv"


def example_data() -> str:
    """Path of the bundled example tickets CSV (subject, body, product, reply)."""
    if not EXAMPLE_FILE.is_file():
        raise FileNotFoundError(
            f"{EXAMPLE_FILE} is missing; recreate it with `python scripts/make_example_data.py`."
        )
    return str(EXAMPLE_FILE)
