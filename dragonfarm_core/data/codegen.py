"""`dataset_code(spec)`: the Python that rebuilds a dataset from its `Dataset.spec()`.

    >>> print(dataset_code({"source": "/data/tickets.csv", "format": "csv", "name": "tickets",
    ...     "mapping": {"kind": "sft", "prompt": "{subject}\\n\\n{body}", "response": "reply"},
    ...     "eval_frac": 0.05, "seed": 42, "split_set": False, "n_rows": 200}))
    ds = dragon.dataset("/data/tickets.csv").map(prompt="{subject}\\n\\n{body}", response="reply")

Used by `dragon.code()` and the app's code panels, so what a person sees is what rebuilds the
data. A dataset that lived only in memory (a DataFrame, a list of conversations) has no file to
point at: the code then names a variable, with a comment saying what to put in it.

The pieces every code panel shares live here too: `literal`, the `runs_dir=` argument
(`runs_dir_argument`) and `portable` (the example file as `dragon.example_data()`).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

from dragonfarm_core.data.dataset import DEFAULT_EVAL_FRAC, DEFAULT_SEED
from dragonfarm_core.data.example import EXAMPLE_FILE
from dragonfarm_core.data.readers import EXTENSIONS
from dragonfarm_core.rundir import location

LINE_LIMIT = 100
_METHODS = {"sft": "map", "pairs": "map_pairs", "prompts": "map_prompts"}
_ARGS = {
    "sft": ("prompt", "response", "system"),
    "pairs": ("prompt", "chosen", "rejected", "system"),
    "prompts": ("prompt", "reference", "system"),
}


def literal(value: Any) -> str:
    """A Python literal for a str or number, in double quotes where that round-trips."""
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        try:
            if ast.literal_eval(text) == value:
                return text
        except (ValueError, SyntaxError):
            pass
    return repr(value)


def runs_dir_argument(runs_dir: str | os.PathLike[str]) -> str | None:
    """`runs_dir="..."` for generated code, or None when `runs_dir` is the configured one
    (`set_runs_dir()` / DRAGONFARM_RUNS_DIR), which the code then finds by itself."""
    if Path(runs_dir) == location.configured_runs_dir():
        return None
    return f"runs_dir={literal(str(runs_dir))}"


def portable(code: str) -> str:
    """`code` with the example file's absolute path as `dragon.example_data()`, so it runs on
    any machine."""
    return code.replace(literal(str(EXAMPLE_FILE)), "dragon.example_data()")


def _call(func: str, first: str | None, kwargs: dict[str, Any]) -> str:
    args = [first] if first else []
    args += [f"{k}={literal(v)}" for k, v in kwargs.items() if v is not None]
    return f"{func}({', '.join(args)})"


def _source_call(spec: dict[str, Any]) -> tuple[str, str | None]:
    """The reading call, and a comment when the data was not read from a file."""
    mapping = spec.get("mapping") or {}
    source, name = spec.get("source"), spec.get("name")
    func = "dragon.conversations" if mapping.get("kind") == "conversations" else "dragon.dataset"
    if source is None:
        var = "conversations" if func == "dragon.conversations" else "df"
        what = "list of conversations" if var == "conversations" else "pandas DataFrame"
        default = "conversations" if var == "conversations" else "dataframe"
        comment = (
            f"# `{var}`: the {what} this dataset was built from (it was not read from a file)."
        )
        return _call(func, var, {"name": name if name != default else None}), comment
    if spec.get("format") == "hub":  # a Hub dataset id, fetched again by load_dataset
        hub_name = name if name != source.rsplit("/", 1)[-1] else None
        return _call(
            func, literal(source), {"name": hub_name, "split": spec.get("hub_split")}
        ), None
    path = Path(source)
    kwargs: dict[str, Any] = {"name": name if name != path.stem else None}
    if func == "dragon.dataset":
        fmt = spec.get("format")
        kwargs = {
            "format": fmt if EXTENSIONS.get(path.suffix.lower()) != fmt else None,
            **kwargs,
            "max_bytes": spec.get("max_bytes"),
        }
    return _call(func, literal(source), kwargs), None


def dataset_code(spec: dict[str, Any], var: str = "ds") -> str:
    """Python lines (public API, `dragon.` prefix) that rebuild the dataset `spec` describes."""
    if not var.isidentifier():
        raise ValueError(f"var={var!r} is not a Python variable name.")
    first, comment = _source_call(spec)
    calls = [first]
    mapping = spec.get("mapping") or {}
    kind = mapping.get("kind")
    if kind in _METHODS:
        calls.append("." + _call(_METHODS[kind], None, {k: mapping.get(k) for k in _ARGS[kind]}))
    eval_frac, seed = spec.get("eval_frac", DEFAULT_EVAL_FRAC), spec.get("seed", DEFAULT_SEED)
    if spec.get("split_set", (eval_frac, seed) != (DEFAULT_EVAL_FRAC, DEFAULT_SEED)):
        calls.append("." + _call("split", None, {"eval_frac": eval_frac, "seed": seed}))
    one_line = f"{var} = {''.join(calls)}"
    if len(one_line) <= LINE_LIMIT or len(calls) == 1:
        code = one_line
    else:
        code = "\n".join([f"{var} = (", *(f"    {c}" for c in calls), ")"])
    return f"{comment}\n{code}" if comment else code
