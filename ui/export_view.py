"""Pure drawing for the Export tab: what a run's exports wrote (`ExportSummary`) in, the files
table and every check's verdict as markdown out (the merge's greedy tokens, the GGUF's template
round trip, the Ollama template's, with the first differing token when one failed).

Like `judge_view.py`, nothing here calls the API; `present` gives the hint when there is none.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dragonfarm_core.export.summary import ExportSummary
from ui import present


def size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def files_table(s: ExportSummary) -> pd.DataFrame:
    return pd.DataFrame(
        {"file": [p for p, _ in s.files], "size": [size_text(n) for _, n in s.files]}
    )


def _verdict(ok: bool | None) -> str:
    return "✅ pass" if ok else "❌ fail" if ok is False else "—"


def _token(side: Any) -> str:
    if not isinstance(side, dict):
        return "?"
    return f"`{side.get('text')!r}` (id {side.get('id')})"


def checks_markdown(s: ExportSummary) -> str:
    """Every check's verdict, with the first differing token when one failed."""
    lines = ["| check | result | detail |", "|---|---|---|"]
    m = s.merge_check
    if m:
        detail = f"{m.get('prompts')} {m.get('split')} prompts, greedy token ids compared"
        d = m.get("first_difference")
        if d:
            detail = (f"prompt {d.get('prompt')}, {d.get('in')} token {d.get('position')}: "
                      f"expected {_token(d.get('expected'))}, merged {_token(d.get('merged'))}")  # fmt: skip
        lines.append(
            f"| merge: merged = base + adapter | {_verdict(m.get('identical'))} | {detail} |"
        )
    for g in s.gguf_checks:
        d = g.get("first_difference")
        detail = (
            f"{g.get('prompts')} prompts; prompt tokens identical: "
            f"{'yes' if g.get('templates_identical') else 'no'}; greedy replies identical "
            f"{g.get('replies_identical')}/{g.get('prompts')} (shortest agreement "
            f"{g.get('min_agree_tokens')} of {g.get('max_new_tokens')} tokens)"
        )
        if isinstance(d, dict):
            where = "prompt (chat template)" if d.get("in") == "prompt" else "greedy reply"
            detail = (f"{where} {d.get('prompt')}, token {d.get('position')}: transformers "
                      f"{_token(d.get('hf'))}, llama.cpp {_token(d.get('gguf'))}")  # fmt: skip
        lines.append(f"| GGUF template round trip ({g.get('file')}) | "
                     f"{_verdict(g.get('passed'))} | {detail} |")  # fmt: skip
    t = s.template_check
    if t:
        if t.get("identical") is None:
            detail = "the GGUF's own template (not checked)"
        else:
            detail = f"{t.get('family')}: {t.get('checked')} conversations; {s.template_detail}"
        lines.append(f"| Ollama template = HF chat template | {_verdict(t.get('identical'))} | "
                     f"{detail.replace('|', '/')} |")  # fmt: skip
    if s.registered:
        r = s.registered
        lines.append(f"| registered with Ollama | ✅ | `{r.get('name')}` at {r.get('url')} |")
    if s.published:
        p = s.published
        lines.append(f"| published | ✅ | [{p.get('repo')}]({p.get('url')}) ({p.get('what')}) |")
    if len(lines) == 2:
        return present.hint_html("Nothing exported yet: merge the run first.")
    return "\n".join(lines)
