"""Where a training run starts: a fresh model of the recipe's config, or an existing one (`init_from`: a saved folder
or a Hub id, fine-tuned whole or with LoRA adapters), and the tokenizer the run uses.

`starting_point(options)` reads the `init_from`, `lora_r` and `tokenizer` options of either family
(`TrainOptions`, `TranslationOptions`): the model and tokenizer come through `plldr_hf.loading` (family check, damaged
or mismatched weights named), and `lora` is the `peft.LoraConfig` the pipeline wraps the model with (rank r, alpha 2r,
on the family's default target modules, `ModelFamily.lora_target_modules`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


__all__ = ["StartingPoint", "starting_point", "with_lora"]

# PEFT's task type of each family's main model class
_TASK_TYPES = {"AutoModelForCausalLM": "CAUSAL_LM", "AutoModelForSeq2SeqLM": "SEQ_2_SEQ_LM"}


@dataclass
class StartingPoint:
    """The model a run starts from (None: a fresh one of the recipe's config), its tokenizer (None: the run trains
    one or reuses the one it saved) and the LoRA configuration to wrap the model with (None: every weight trains)."""

    model: Any = None
    tokenizer: Any = None
    lora: Any = None


def starting_point(options, tokenizer=None) -> StartingPoint:
    """The starting point of a run of `options` (`TrainOptions` or `TranslationOptions`, resolved); `tokenizer`: a
    tokenizer object given through the Python API, which wins over `options.tokenizer`."""
    from plldr_hf.loading import load_model, load_tokenizer
    from plldr_hf.models import FAMILIES

    if not options.init_from:
        if tokenizer is None and options.tokenizer:
            tokenizer = load_tokenizer(options.tokenizer)  # a missing folder or file is named, not a Hub-id error
        return StartingPoint(tokenizer=tokenizer)
    family = FAMILIES[options.FAMILY]
    model = load_model(options.init_from, model_type=family.model_type, dtype="float32")
    if tokenizer is None:
        tokenizer = load_tokenizer(options.init_from, model_config=model.config)
    lora = None
    if options.lora_r is not None:
        from peft import LoraConfig

        lora = LoraConfig(
            task_type=_TASK_TYPES[family.auto_class],
            r=options.lora_r,
            lora_alpha=2 * options.lora_r,
            target_modules=list(family.lora_target_modules),
        )
    return StartingPoint(model=model, tokenizer=tokenizer, lora=lora)


def with_lora(model, start: StartingPoint):
    """The model wrapped with the starting point's LoRA adapters (itself without). peft asks the model
    `is_gradient_checkpointing`, which transformers 5.25 deprecates with a FutureWarning the user can do nothing
    about: that one warning is not shown."""
    if start.lora is None:
        return model
    import warnings

    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, start.lora)
