"""The training recipes shipped with the package, one file per family and size, and user recipe files of the same
shape (`--recipe NAME_OR_FILE`, `--size`): `plldr_hf/recipes/FAMILY/NAME.json` holds

    {"about": why this recipe, "model": config fields (or the name of another recipe whose model it uses),
     "run": the run options it sets}

and a user's file (.json, or .yaml with PyYAML) may add `"extends": NAME` to start from a shipped recipe. The module
imports only the standard library (and PyYAML for .yaml recipes).
"""

from __future__ import annotations

import json
from pathlib import Path


# the recipe files shipped with the package: `plldr_hf/recipes/FAMILY/NAME.json`, each `{"about": why,
# "model": config fields or the name of another recipe whose model it uses, "run": the run options it sets}`
RECIPE_FOLDER = Path(__file__).resolve().parents[1] / "recipes"
RECIPE_SUFFIXES = (".json", ".yaml", ".yml")


def _read_recipe(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    import yaml  # PyYAML, a dependency of transformers and datasets (itself free of torch)

    return yaml.safe_load(text)


def _shipped(family: Path) -> dict[str, dict]:
    """A family's shipped recipes by name, smallest model first (a recipe naming another's model sorts with it)."""
    recipes = {path.stem: _read_recipe(path) for path in family.glob("*.json")}

    def size(name: str) -> tuple[int, int]:
        model = recipes[name]["model"]
        model = recipes[model]["model"] if isinstance(model, str) else model
        # width, then the metric learner's (a PLDR-LLM recipe with the released learner sorts after tiny's)
        return model.get("hidden_size", model.get("d_model", 0)), model.get("A_dff", 0)

    return {name: recipes[name] for name in sorted(recipes, key=lambda name: (*size(name), name))}


PRESETS: dict[str, dict[str, dict]] = {
    family.name: _shipped(family) for family in sorted(RECIPE_FOLDER.iterdir()) if family.is_dir()
}


def preset(family: str, name: str) -> dict:
    """The recipe `name` of `family`: a shipped one (`PRESETS`), or a recipe file (.json / .yaml) of the same shape,
    which may name a shipped recipe in `"extends"` to start from its model and run settings. Its `model` is always
    a dict of config fields here (a recipe naming another recipe's model gets that model's fields)."""
    shipped = PRESETS[family]
    if name in shipped:
        recipe = dict(shipped[name])
    elif Path(str(name)).suffix.lower() in RECIPE_SUFFIXES:
        path = Path(name).expanduser()
        try:
            recipe = _read_recipe(path)
        except (OSError, ValueError, RecursionError) as error:  # yaml's errors are ValueErrors
            raise ValueError(
                f"--recipe {name}: cannot read the recipe file ({type(error).__name__}: {error})"
            ) from None
        if not isinstance(recipe, dict) or not set(recipe) <= {"about", "extends", "model", "run"}:
            raise ValueError(
                f"--recipe {name}: a recipe is an object with the keys about, extends, model and run; "
                f"see {RECIPE_FOLDER / family / 'tiny.json'}"
            )
        if "extends" in recipe and recipe["extends"] not in shipped:
            raise ValueError(f"--recipe {name}: extends {recipe['extends']!r}; name one of {', '.join(shipped)}")
        base = preset(family, recipe["extends"]) if "extends" in recipe else {"model": {}, "run": {}}
        model = recipe.get("model", {})
        model = shipped[model]["model"] if isinstance(model, str) and model in shipped else model
        if not isinstance(model, dict) or not isinstance(recipe.get("run", {}), dict):
            raise ValueError(
                f"--recipe {name}: 'model' and 'run' must be objects (or 'model' a shipped recipe's name)"
            )
        recipe = {"model": {**base["model"], **model}, "run": {**base["run"], **recipe.get("run", {})}}
    else:
        raise ValueError(
            f"--size: must be one of {', '.join(shipped)} or a recipe file ({', '.join(RECIPE_SUFFIXES)}), got {name!r}"
        )
    if isinstance(recipe["model"], str):
        recipe["model"] = shipped[recipe["model"]]["model"]
    return recipe


# the options a PLDR-LLM size decides when they are left unset (its recipe); a preset's other run settings apply
# through `from_name` (and `--tiny`) only
SIZE_RECIPE = ("block_size", "per_device_train_batch_size", "global_batch_size", "vocab_size", "learning_rate", "max_steps",
               "save_steps")  # fmt: skip


# the settings a fine-tune (`init_from`) takes from the base model, not from a size or preset: its blocks (the
# context it was trained with) and its tokenizer's vocabulary
FROM_THE_BASE_MODEL = ("block_size", "vocab_size")


def sizes_help(family: str) -> str:
    """The `--size` help: each named size with its width and depth (a size naming another is listed as that one)."""
    width, depth = ("hidden_size", "num_hidden_layers") if family == "pldrllm" else ("d_model", "encoder_layers")
    named = {n: p["model"] for n, p in PRESETS[family].items() if isinstance(p["model"], dict)}
    sizes = ", ".join(f"{n} ({m[width]} wide, {m[depth]} layers)" for n, m in named.items())
    return f"model size: {sizes}; or a recipe file's model (see --recipe)"
