import pytest

from dragonfarm_core.models import (
    BUNDLED_MODEL_ID,
    ModelError,
    bundled_model_path,
    presets,
    resolve_model,
)


def test_presets_table_has_the_manual_columns_and_the_bundled_model():
    table = presets()
    assert list(table.columns) == [
        "id",
        "params",
        "license",
        "gated",
        "rank",
        "min_vram_gb",
        "notes",
        "learning_rate",  # the SFT settings train() uses for it when none are given
        "epochs",
        "lora_r",
        "max_seq_len",
    ]
    assert table["id"].iloc[0] == BUNDLED_MODEL_ID
    assert "Qwen/Qwen2.5-0.5B-Instruct" in set(table["id"])
    assert table.loc[table["id"] == "meta-llama/Llama-3.2-1B-Instruct", "gated"].item()
    assert len(table) == 8


def test_bundled_model_resolves_by_alias():
    for name in (BUNDLED_MODEL_ID, "bundled"):
        resolved = resolve_model(name)
        assert resolved.name == BUNDLED_MODEL_ID
        assert resolved.base == str(bundled_model_path())


def test_local_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)).base == str(tmp_path.resolve())
    not_a_model = tmp_path / "sub"
    not_a_model.mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(not_a_model))


def test_unreachable_hub_offers_the_bundled_model(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelError) as err:
        resolve_model("someone/some-model")
    message = str(err.value)
    assert "someone/some-model could not be downloaded" in message
    assert BUNDLED_MODEL_ID in message and "local folder" in message


@pytest.mark.parametrize("bad", ["", "   ", "not a model id", "a/b/c"])
def test_nonsense_names_are_refused(bad):
    with pytest.raises(ModelError):
        resolve_model(bad)


def test_the_resolved_model_type_is_public_and_knows_the_bundled_model():
    import dragonfarm_core as dragon

    resolved = dragon.resolve_model("bundled")
    assert isinstance(resolved, dragon.ResolvedModel)
    assert dragon.ResolvedModel.bundled() == resolved  # unchecked, but the same choice
    assert resolved.is_bundled and not dragon.ResolvedModel("a/b", "/x").is_bundled
