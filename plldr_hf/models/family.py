"""What the rest of the package knows about a model family, in one record per family.

Each family's `plldr_hf/models/<name>/__init__.py` defines `FAMILY = ModelFamily(...)`; `plldr_hf.models.FAMILIES`
collects them. The loader (`plldr_hf.loading`), the Hub code (`plldr_hf.hub`), training and the command line read
this record instead of keeping their own tables or testing `model_type`, so a new family is one folder plus one
line in `plldr_hf/models/__init__.py`.

The families name no training or evaluation code: data flows one way (models ← training ← commands), and the code
that trains or scores a family imports it (the `train` of `training/run.py` dispatches on the options' class).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


__all__ = ["ModelCard", "ModelFamily"]


@dataclass(frozen=True)
class ModelCard:
    """What a family's model card says of every model of the family.

    Args:
        template: the card template's file name in `plldr_hf/model_cards/`.
        pipeline_tag: the Hub pipeline tag (`text-generation`, `translation`).
        task_name: the task's display name in `model-index`.
        tags: Hub tags every model of the family carries.
        language: language codes of the family's models.
        metric_names: metric key → display name; other keys are published under their own name.
        architecture: config → (name, value) rows of the card's architecture table.
        config_tags: config → extra Hub tags that depend on the model (e.g. "collapsed").
    """

    template: str
    pipeline_tag: str
    task_name: str
    tags: tuple[str, ...]
    language: tuple[str, ...]
    metric_names: dict[str, str] = field(default_factory=dict)
    architecture: Callable[[Any], list[tuple[str, Any]]] = lambda config: []
    config_tags: Callable[[Any], list[str]] = lambda config: []


@dataclass(frozen=True)
class ModelFamily:
    """One model family of the package.

    Args:
        model_type: the `model_type` of its configs.
        display_name: how messages and cards name it.
        auto_class: the transformers Auto class of its main model (`AutoModelForCausalLM`, ...).
        config_class: its configuration class.
        model_class: its main model class (the one `auto_class` builds).
        decoder_layer_class: the repeated block, one FSDP unit and one `_no_split_modules` entry.
        card: what its model cards say (`ModelCard`).
        pipelines: task → pipeline class that a Hub repo of the family ships as custom code (`custom_pipelines`).
        lora_target_modules: the modules PEFT adapts when a `LoraConfig` names none (registered with PEFT on
            import; the attention's query and value projections, as PEFT's defaults for Llama and Marian).
    """

    model_type: str
    display_name: str
    auto_class: str
    config_class: type
    model_class: type
    decoder_layer_class: type
    card: ModelCard
    pipelines: dict[str, type] = field(default_factory=dict)
    lora_target_modules: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        """E.g. "a PLDR-LLM ('pldrllm')", for error messages."""
        article = "an" if self.display_name[:1].upper() in "AEIOU" else "a"
        return f"{article} {self.display_name} ({self.model_type!r})"

    @property
    def code_files(self) -> tuple[str, ...]:
        """The files `save_pretrained` copies next to the weights (remote code): the configuration and modeling
        files and every sibling they import, as transformers itself collects them."""
        from transformers.dynamic_module_utils import get_relative_import_files

        main = [Path(inspect.getfile(cls)) for cls in (self.config_class, self.model_class)]
        siblings = [Path(name) for path in main for name in get_relative_import_files(str(path))]
        return tuple(dict.fromkeys(path.name for path in main + siblings))
