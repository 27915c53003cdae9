"""What the run-path attack tests share: a runs dir, runs outside it that a page tries to reach,
the ways a page names them, and a snapshot that proves they were not touched.

    scene = make_scene(tmp_path)        # runs/ (the app's), elsewhere/ (victims beside it)
    for how, ref in scene.refs(scene.failed).items(): ...
    assert snapshot(scene.failed) == before

`elsewhere/` sits next to `runs/`, so `../elsewhere/<id>` leaves the runs dir by one `..`.
Every victim is a real run folder (config.json with method and schema), so code that locates a
run by path alone would act on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files

SAMPLES = [{"prompt": "Device 1 reboots", "reference": "Reset it (1).", "generated": "Reset it."}]


def write_run(parent: Path, run_id: str, model: Path, state: str) -> Path:
    """A run folder as training leaves it: config, status, log, adapter (and samples when done)."""
    run_dir = parent / run_id
    run_dir.mkdir(parents=True)
    files.write_config(
        run_dir,
        {"schema": 1, "id": run_id, "name": run_id, "method": "sft",
         "created_at": files.now_iso(), "continued_from": None,
         "data": {"n_train": 4, "n_eval": 1},
         "model": {"name": str(model), "base": str(model), "revision": None,
                   "trust_remote_code": False, "adapters": []}},
    )  # fmt: skip
    files.write_status(run_dir, {"state": state, "step": 2, "total_steps": 4,
                                 "finished_at": files.now_iso()})  # fmt: skip
    (run_dir / files.LOG).write_text("step 1\nstep 2\n")
    (run_dir / files.ADAPTER_DIR).mkdir()
    (run_dir / files.ADAPTER_DIR / "adapter_config.json").write_text("{}")
    if state == "succeeded":
        files.write_eval(run_dir, {"eval_loss": 1.0, "step": 4})
        files.write_samples(run_dir, SAMPLES)
    return run_dir


def snapshot(folder: Path) -> dict[str, Any]:
    """Every entry below `folder`: file bytes, folders as None; {} once the folder is gone."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


@dataclass
class Scene:
    root: Path  # the app's runs dir
    elsewhere: Path  # beside it: runs the page must never reach
    model: Path  # a model folder (config.json only; nothing loads it)
    failed: Path  # a failed run outside: what resume would restart
    done: Path  # a succeeded run outside: what evaluate, chat and "continue from" would use
    archived: Path  # a run in elsewhere/archived/: what unarchive would move
    _links: int = field(default=0)

    def refs(self, target: Path) -> dict[str, str]:
        """The ways a page names `target` (a folder outside the runs dir), by attack."""
        rel = target.relative_to(self.elsewhere.parent)  # e.g. elsewhere/archived/<id>
        self._links += 1
        link = self.root / f"link-{self._links}-{target.name}"
        link.symlink_to(target, target_is_directory=True)
        return {
            "absolute": str(target),
            "dotdot": f"../{rel}",
            "nested-dotdot": f"./{files.UPLOADS_DIR}/../../{rel}",
            "encoded": "..%2F" + "%2F".join(rel.parts),
            "double-encoded": "..%252F" + "%252F".join(rel.parts),
            "symlink-id": link.name,
            "symlink-path": str(link),
        }

    def untouched(self) -> dict[str, Any]:
        """Snapshots of every victim, to compare before and after."""
        return {str(p): snapshot(p) for p in (self.failed, self.done, self.archived)}


def make_scene(base: Path) -> Scene:
    root, elsewhere = base / "runs", base / "elsewhere"
    root.mkdir(parents=True)
    model = base / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return Scene(
        root=root.resolve(),
        elsewhere=elsewhere.resolve(),
        model=model.resolve(),
        failed=write_run(elsewhere, "20260101-000000-victim", model, "failed").resolve(),
        done=write_run(elsewhere, "20260101-000001-finished", model, "succeeded").resolve(),
        archived=write_run(
            elsewhere / files.ARCHIVED_DIR, "20260101-000002-archived", model, "succeeded"
        ).resolve(),
    )
