"""The training recipes: the files shipped with the package, one per family and size, user recipe files of the same
shape (`--recipe NAME_OR_FILE`, `--size`), and the model configs they name.

`plldr_hf/recipes/FAMILY/NAME.json` holds

    {"about": why this recipe, "model": config fields (or the name of another recipe whose model it uses),
     "run": the run options it sets}

and a user's file (.json, or .yaml with PyYAML) may add `"extends": NAME` to start from a shipped recipe
(`preset`). Its run settings are the options classes' (`plldr_hf.training.options`); the model configs:

- PLDR-LLM: `pldrllm_config` (the sizes of `PRESETS["pldrllm"]`) and `llama_config_like` (the baseline of the same
  width and depth), `causal_lm_config(options)` (a run's);
- AGF: `agf_config` (the sizes of `PRESETS["agf"]`; the named position variants of the paper's comparison are
  `plldr_hf.models.agf.position_encodings.POSITION_VARIANTS`).

Shared: `seconds_per_step` (the one definition of s/step every report uses). The module imports only the standard
library (and PyYAML for .yaml recipes) until a config is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from plldr_hf.models.agf import AgfConfig

__all__ = [
    "PRESETS",
    "agf_config",
    "causal_lm_config",
    "llama_config_like",
    "model_fields",
    "pldrllm_config",
    "preset",
    "seconds_per_step",
    "sizes_help",
]


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


def model_fields(family: str, size: str) -> dict:
    """The model config fields of a size: a shipped recipe's name or a recipe file (`preset`)."""
    return dict(preset(family, size)["model"])


def causal_lm_config(options):
    """The model config of a PLDR-LLM run (`TrainOptions`; or its Llama baseline): its size's, with the vocabulary asked for (the run
    sets the tokenizer's own size once it has one; a fine-tune trains the base model's config instead)."""
    vocab_size = options.vocab_size or preset("pldrllm", options.size)["run"]["vocab_size"]
    config = pldrllm_config(
        options.size, vocab_size, max_position_embeddings=options.block_size, dag_loss_form=options.dag_form
    )
    return llama_config_like(config) if options.architecture == "llama" else config


def pldrllm_config(
    size: str,
    vocab_size: int,
    *,
    max_position_embeddings: int | None = None,
    dag_loss_form: str = "log_ratio",
    **overrides,
):
    """`PldrllmConfig` of a named size (a key of `PRESETS["pldrllm"]`) with the vocabulary of the tokenizer.

    Example:
        >>> pldrllm_config("tiny", 1024).hidden_size
        64
    """
    from plldr_hf import PldrllmConfig

    recipe = preset("pldrllm", size)  # a recipe file is read once
    fields = dict(recipe["model"])
    fields.update(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings or recipe["run"]["block_size"],
        dag_loss_form=dag_loss_form,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    fields.update(overrides)
    return PldrllmConfig(**fields)


def llama_config_like(config):
    """`LlamaConfig` of the same width, depth, heads, FFN width, vocabulary, context and RoPE base as a
    `PldrllmConfig`, with biases on the attention and MLP Linears and an untied LM head (as PLDR-LLM). What differs
    is the architecture itself: pre-RMSNorm layers, plain SDPA attention, no metric learner."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_attention_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
        rms_norm_eps=config.layer_norm_eps,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def seconds_per_step(train_metrics: dict, steps: int) -> float | None:
    """Wall seconds per optimizer step of a run: Trainer's `train_runtime` / steps (evaluation and checkpoints
    included), the one definition every report of the package uses."""
    runtime = train_metrics.get("train_runtime")
    return runtime / steps if runtime and steps else None


def agf_config(
    size: str = "base",
    position_encoding: str = "agf",
    pcmv: bool = False,
    label_smoothing: float = 0.1,
    **overrides,
) -> AgfConfig:
    """An `AgfConfig` of a named size and position handling. Its vocabulary and special-token ids are the
    tokenizer's: `config.update(tokenizers.translation_token_fields(tokenizer))` once there is one.

    Args:
        size: a key of `PRESETS["agf"]`.
        position_encoding: `AgfConfig.position_encoding`.
        pcmv: `AgfConfig.pcmv` (needs `position_encoding="agf"`).
        label_smoothing: label smoothing of the training loss computed in the model's forward.
        **overrides: any other `AgfConfig` field, e.g. `dropout=0.3`, `agf_learn_base=True`.
    """
    from plldr_hf.models.agf import AgfConfig

    fields = model_fields("agf", size)
    unknown = sorted(set(overrides) - set(AgfConfig().to_dict()))
    if unknown:
        raise ValueError(f"AgfConfig has no field {', '.join(unknown)} (given as a model override, e.g. --set)")
    fields.update(position_encoding=position_encoding, pcmv=pcmv, label_smoothing=label_smoothing, **overrides)
    return AgfConfig(**fields)
