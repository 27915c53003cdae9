"""The bundle's notebook: assets/remote/dragonfarm.ipynb (nbformat 4), filled in for one run.

The template's cells install the pinned requirements, unpack the bundle, train with
`python -m dragonfarm_core.trainers RUN_DIR`, plot the loss and zip the results for download.
Filling it replaces {{RUN_ID}}, {{BUNDLE_NAME}} and {{RESULT_FILES}} in the cells' text (plain
JSON: nbformat is only needed by the test that executes it). {{RESULT_FILES}} is the list that
`results_check` accepts, so the notebook cannot zip a file the import would refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

from dragonfarm_core.bundles.results_check import RESULT_FILES


def template_path() -> Path:
    """The notebook template, kept with the other assets (like the bundled model)."""
    return Path(__file__).resolve().parents[2] / "assets" / "remote" / "dragonfarm.ipynb"


def notebook_text(run_id: str, bundle_name: str) -> str:
    """The template filled for a run whose bundle zip is called `bundle_name`."""
    notebook = json.loads(template_path().read_text(encoding="utf-8"))
    values = {"{{RUN_ID}}": run_id, "{{BUNDLE_NAME}}": bundle_name,
              "{{RESULT_FILES}}": json.dumps(sorted(RESULT_FILES))}  # fmt: skip
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        for key, value in values.items():
            text = text.replace(key, value)
        cell["source"] = text.splitlines(keepends=True)
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
