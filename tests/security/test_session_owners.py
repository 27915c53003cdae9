"""What a login (or a Space visitor) owns, as the handlers' check sees it (issue 40, item 21).

The served checks (another login's session hash, an upload fetched by its path) are in
test_lab_login.py and tests/spaces/; here the rules under them: the first owner of a session
hash keeps it, a handler handed another owner's upload path (at any depth of its arguments)
is refused, and a Space visitor is the cookie's, else the page's own.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from dragonfarm_core.auth import session_owners, visitors


def test_a_session_hash_is_its_first_owners():
    session = secrets.token_hex(8)
    assert session_owners.call_refusal(session, "bob", []) is None
    assert session_owners.call_refusal(session, "bob", []) is None
    assert session_owners.call_refusal(session, "alice", []) == session_owners.NOT_YOURS
    assert session_owners.call_refusal(None, "alice", []) is None  # no session: nothing to own


def test_a_handler_given_another_owners_upload_is_refused(tmp_path: Path):
    upload = tmp_path / "gradio" / "0123abcd" / "bobs.csv"
    upload.parent.mkdir(parents=True)
    upload.write_text("prompt,response\nsecret,secret\n")
    session_owners.uploads.add(str(upload.resolve()), "bob")
    via_link = tmp_path / "link.csv"
    via_link.symlink_to(upload)
    for args in ([str(upload)], [upload], [[{"path": str(upload)}]], ["x", (str(via_link),)]):
        refusal = session_owners.call_refusal(None, "alice", args)
        assert refusal and "uploaded by someone else" in refusal, args
        assert session_owners.call_refusal(None, "bob", args) is None
    same = session_owners.Owners()
    same.add("k", "bob")
    same.add("k", "alice")  # one file sent by both: both's
    assert not same.refuses("k", "alice") and same.refuses("k", "carol")
    assert session_owners.call_refusal(None, "alice", [str(tmp_path / "nobodys.csv")]) is None


def test_a_space_visitor_is_the_cookies_else_the_pages_own():
    visitor, page = secrets.token_hex(16), secrets.token_hex(5)
    assert visitors.owner_of(f"{visitors.COOKIE}={visitor}", page) == visitor
    assert visitors.owner_of(f"{visitors.COOKIE}-unsecure={visitor}; x=1", None) == visitor
    by_page = visitors.owner_of(f"{visitors.COOKIE}=../{visitor}", page)  # no id: the page's
    assert by_page == visitors.page_visitor(page) != visitor
    assert visitors.ID_RE.fullmatch(by_page or "")
    assert visitors.owner_of(None, None) is None
