"""What `generate` and `chat` load for a run, a run directory, a model folder or id."""

from types import SimpleNamespace

import pytest

from dragonfarm_core.inference.target import resolve_target
from dragonfarm_core.models import ModelError
from dragonfarm_core.rundir import files


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "base-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def make_run(tmp_path, model_dir, adapters=(), trained=True, name="20260101-000000-r"):
    run_dir = tmp_path / "runs" / name
    files.write_config(
        run_dir,
        {
            "schema": 1,
            "id": name,
            "method": "sft",
            "model": {
                "name": "base",
                "base": str(model_dir),
                "adapters": [str(a) for a in adapters],
                "trust_remote_code": False,
            },
        },
    )
    files.write_status(run_dir, {"state": "succeeded" if trained else "running"})
    if trained:
        (run_dir / files.ADAPTER_DIR).mkdir()
        (run_dir / files.ADAPTER_DIR / "adapter_config.json").write_text("{}")
    return run_dir


def test_a_run_directory_loads_base_and_adapter(tmp_path, model_dir):
    run_dir = make_run(tmp_path, model_dir)
    target = resolve_target(str(run_dir))
    assert target.spec.base == str(model_dir) and target.spec.adapters == ()
    assert target.spec.adapter == str(run_dir.resolve() / "adapter") and target.spec.use_adapter
    assert target.name == run_dir.name and target.run_dir == str(run_dir.resolve())


def test_a_run_object_and_base_true_share_the_weights(tmp_path, model_dir):
    run_dir = make_run(tmp_path, model_dir)
    with_adapter = resolve_target(SimpleNamespace(dir=run_dir))
    base = resolve_target(SimpleNamespace(dir=run_dir), base=True)
    assert base.spec.key == with_adapter.spec.key  # the same loaded model: no reload
    assert base.spec.use_adapter is False and base.name.endswith("(base)")


def test_a_continued_run_folds_earlier_adapters_in_order(tmp_path, model_dir):
    first = make_run(tmp_path, model_dir, name="20260101-000000-a")
    second = make_run(tmp_path, model_dir, adapters=[first / "adapter"], name="20260101-000001-b")
    assert resolve_target(second).spec.adapters == (str(first / "adapter"),)


def test_an_untrained_run_is_refused_unless_base(tmp_path, model_dir):
    run_dir = make_run(tmp_path, model_dir, trained=False)
    with pytest.raises(ValueError, match="no trained adapter yet \\(state: running"):
        resolve_target(run_dir)
    assert resolve_target(run_dir, base=True).spec.adapter is None


def test_a_missing_earlier_adapter_is_named(tmp_path, model_dir):
    run_dir = make_run(tmp_path, model_dir, adapters=[tmp_path / "gone" / "adapter"])
    with pytest.raises(ValueError, match="gone/adapter, which is gone"):
        resolve_target(run_dir)


def test_a_model_folder_is_a_plain_model(model_dir):
    target = resolve_target(str(model_dir))
    assert target.spec.base == str(model_dir) and target.spec.adapter is None
    assert target.run_dir is None


def test_other_things_are_refused(tmp_path):
    with pytest.raises(TypeError, match="Cannot talk to a int"):
        resolve_target(3)
    with pytest.raises(ModelError, match="not a model"):
        resolve_target(str(tmp_path))
    assert resolve_target(None).spec is None
