"""The README's promises to a newcomer: its first command installs what it then uses, and the
repository's docs stand on their own (a clone has no ../shared folder)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_first_command_installs_the_dragonfarm_command() -> None:
    first = _bash_blocks((ROOT / "README.md").read_text(encoding="utf-8"))[0]
    installs = [
        shlex.split(part)
        for part in re.split(r"&&|;|\n", first)
        if re.search(r"\bpip install\b", part)
    ]
    assert installs, f"the README's first command installs nothing: {first!r}"
    # `pip install -r requirements.txt` alone leaves `dragonfarm` undefined; the package itself
    # (editable or not) must be installed by the same command.
    assert any("." in argv[argv.index("install") + 1 :] for argv in installs), first
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.get("dragonfarm") == "dragonfarm_core.cli:main"
    assert "venv" in first, "the first command should make a virtual environment"


def test_ci_runs_the_readmes_test_command() -> None:
    second = _bash_blocks((ROOT / "README.md").read_text(encoding="utf-8"))[1].strip()
    assert second in (ROOT / ".ci" / "run").read_text()


def test_docs_do_not_point_outside_the_repository() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text, f"{doc.name} points to ../shared, which a clone lacks"
        for link in re.findall(r"`((?:docs|scripts|bench|assets)/[\w./-]+)`", text):
            assert (ROOT / link).exists(), f"{doc.name} names {link}, which does not exist"


# A link's target: inline [text](target "title") or ![alt](target), a reference definition
# [label]: target, an HTML src/href, and a path in backticks that climbs out (`../x`).
LINKS = (
    re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)"),
    re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M),
    re.compile(r"""\b(?:src|href)=["']([^"']+)["']"""),
    re.compile(r"`(\.\./[^`\s]*)`"),
)


def _relative_links(text: str) -> list[str]:
    """Every link target in a markdown text that is not a URL or an anchor in the same page."""
    found = [m for pattern in LINKS for m in pattern.findall(text)]
    return [t for t in found if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:|#", t)]


def test_every_relative_link_in_the_docs_resolves_inside_the_repository() -> None:
    assert _relative_links("[a](docs/x.md#part) ![b](<../y.png> 'c') `../z`\n[d]: e.md") == [
        "docs/x.md#part", "../y.png", "e.md", "../z",
    ]  # fmt: skip
    assert _relative_links("[a](https://x.org) [b](#top) [c](mailto:a@b.c)") == []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for link in _relative_links(doc.read_text(encoding="utf-8")):
            target = (doc.parent / re.split(r"[#?]", link)[0]).resolve()
            assert target.is_relative_to(ROOT), f"{doc.name} links {link}, outside the repository"
            assert target.exists(), f"{doc.name} links {link}, which does not exist"
