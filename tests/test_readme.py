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
