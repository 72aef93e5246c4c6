"""Recipes are files: the shipped ones (`plldr_hf/recipes/FAMILY/NAME.json`) and a user's of the same shape, read
with `--recipe NAME_OR_FILE` (flags still win) or as a `--size`."""

import json

import pytest

from plldr_hf.training import TrainOptions, TranslationOptions
from plldr_hf.training.recipes import PRESETS, RECIPE_FOLDER, causal_lm_config, preset
from plldr_hf_cli.commands.train import options_of


def test_shipped_recipes_are_the_files():
    for family in ("pldrllm", "agf"):
        files = sorted(path.stem for path in (RECIPE_FOLDER / family).glob("*.json"))
        assert sorted(PRESETS[family]) == files and "tiny" in files
        for name in files:
            recipe = json.loads((RECIPE_FOLDER / family / f"{name}.json").read_text())
            assert set(recipe) == {"about", "model", "run"} and recipe["about"]
    # smallest first, as --help lists them
    assert list(PRESETS["pldrllm"]) == ["tiny", "critical", "mini", "small", "110m"]
    assert preset("agf", "wmt17")["model"] == PRESETS["agf"]["base"]["model"]


def test_recipe_flag_and_tiny_are_one_thing(tmp_path):
    tiny = options_of("pldrllm", ["--tiny"])[0]
    named = options_of("pldrllm", ["--recipe", "tiny"])[0]
    assert tiny == named and named.max_train_documents == 2000
    with pytest.raises(ValueError, match="--tiny is --recipe tiny"):
        options_of("pldrllm", ["--tiny", "--recipe", "mini"])[0]
    agf = options_of("agf", ["--recipe", "tiny", "--max-steps", "3"])[0]
    assert (agf.size, agf.max_steps, agf.vocab_size) == ("tiny", 3, 300)


def test_a_user_recipe_file_extends_a_shipped_one(tmp_path):
    """The released metric learner (8 residual units of 64->170->64) in the tiny model, long blocks: a file."""
    path = tmp_path / "deep-learner.json"
    path.write_text(
        json.dumps(
            {"extends": "tiny", "model": {"num_reslayerA": 8, "A_dff": 170, "head_dim": 64, "num_attention_heads": 1},
             "run": {"block_size": 512, "max_steps": 5}}
        )
    )  # fmt: skip
    options = options_of("pldrllm", ["--recipe", str(path), "--max-steps", "4"])[0]
    assert (options.size, options.block_size, options.max_steps, options.max_train_documents) == (
        str(path), 512, 4, 2000
    )  # fmt: skip
    config = causal_lm_config(options)
    assert (config.num_reslayerA, config.A_dff, config.head_dim, config.hidden_size) == (8, 170, 64, 64)
    assert config.max_position_embeddings == 512
    # the same file as a --size: its model, and the size-decided run settings (blocks, steps) left unset
    as_size = TrainOptions(size=str(path))
    assert (as_size.block_size, as_size.max_steps, as_size.max_train_documents) == (512, 5, None)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "cannot read the recipe file"),
        ('{"model": {}, "runs": {}}', "a recipe is an object with the keys about, extends, model and run"),
        ('{"extends": "huge"}', "extends 'huge'; name one of tiny"),
        ('{"model": [1, 2]}', "'model' and 'run' must be objects"),
        ("[" * 100_000, "cannot read the recipe file"),
    ],
)
def test_a_bad_recipe_file_is_named(tmp_path, text, message):
    path = tmp_path / "recipe.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        TranslationOptions.from_name(str(path))
    with pytest.raises(ValueError, match=message):
        TrainOptions(size=str(path))


def test_a_missing_recipe_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"--recipe .*missing.yaml: cannot read the recipe file \(FileNotFoundError"):
        TrainOptions.from_name(str(tmp_path / "missing.yaml"))
