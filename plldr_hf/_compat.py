"""Version shims for package-only code (registration, training, evaluation, CLI). The remote-code files
(`configuration_*`, `modeling_*` and their siblings) never import this module; they carry their own shims."""

from transformers import AutoModelForSeq2SeqLM
from transformers import pipelines as hf_pipelines


def register_translation_pipeline(pipeline_class) -> None:
    """Make `pipeline("translation", ...)` build `pipeline_class` for sequence-to-sequence models.

    Transformers 5 removed the built-in `translation` task and lists it in `pipelines.REMOVED_TASKS`, which is
    checked before the pipeline registry; so the name is taken off that list (only "translation", the parametrised
    `translation_xx_to_yy` names stay removed) and registered with our implementation.
    """
    getattr(hf_pipelines, "REMOVED_TASKS", {}).pop("translation", None)
    hf_pipelines.PIPELINE_REGISTRY.register_pipeline(
        "translation", pipeline_class=pipeline_class, pt_model=AutoModelForSeq2SeqLM, type="text"
    )


def register_tokenizer_for_model_type(model_type: str, config_class, tokenizer_class) -> None:
    """Make `AutoTokenizer` build `tokenizer_class` for `model_type` folders, whatever `tokenizer_class` their
    `tokenizer_config.json` names.

    The released PLDR-LLM folders name `LlamaTokenizerFast`, for which transformers 5 builds a BPE tokenizer that
    encodes a SentencePiece unigram model wrongly. `AutoTokenizer.register` alone does not help: the class named in
    `tokenizer_config.json` wins. Transformers 5 keeps a list of model types whose Hub configs name the wrong
    tokenizer class (`MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`), for which it uses the class registered under the
    model type instead; the model type is added there. tests/test_tokenizer_pldrllm.py checks the outcome against
    `sentencepiece`, so a change of this mechanism in a later transformers fails loudly.
    """
    from transformers import AutoTokenizer
    from transformers.models.auto import tokenization_auto

    AutoTokenizer.register(config_class, tokenizer_class=tokenizer_class, exist_ok=True)
    tokenization_auto.TOKENIZER_MAPPING_NAMES[model_type] = tokenizer_class.__name__
    tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS.add(model_type)


def register_question_answering_pipeline(pipeline_class) -> None:
    """Make `pipeline("question-answering", ...)` build `pipeline_class` (transformers 5 removed the task; see
    `register_translation_pipeline`)."""
    from transformers import AutoModelForQuestionAnswering

    getattr(hf_pipelines, "REMOVED_TASKS", {}).pop("question-answering", None)
    hf_pipelines.PIPELINE_REGISTRY.register_pipeline(
        "question-answering", pipeline_class=pipeline_class, pt_model=AutoModelForQuestionAnswering, type="text"
    )


def register_peft_target_modules(model_type: str, target_modules: tuple[str, ...]) -> None:
    """Make `LoraConfig(task_type=...)` without `target_modules` adapt `target_modules` of `model_type` models,
    the way PEFT maps the architectures it knows (`peft.utils.constants`). PEFT keeps one table per tuner; the
    LoRA table and the tables copied from it (which share its entries, e.g. for Llama) get the entry."""
    from peft.utils import constants

    lora = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    llama = lora.get("llama")
    for name in dir(constants):
        table = getattr(constants, name)
        if name.startswith("TRANSFORMERS_MODELS_TO_") and name.endswith("_TARGET_MODULES_MAPPING"):
            if isinstance(table, dict) and (table is lora or (llama is not None and table.get("llama") == llama)):
                table.setdefault(model_type, list(target_modules))


def expose_in_transformers(*classes, module=None) -> None:
    """Make `transformers.<ClassName>` resolve to `classes`, as for in-tree models: tools that look a folder's
    `config.architectures` up by name on the `transformers` module (`transformers serve`) then find this package's
    models after `import plldr_hf`. A name transformers already has is never replaced. `module`: another object of
    the `transformers` module than the one in `sys.modules` (a process may hold two; see `plldr_hf_cli.serve_loader`)."""
    if module is None:
        import transformers as module

    for cls in classes:
        try:
            getattr(module, cls.__name__)
        except AttributeError:
            setattr(module, cls.__name__, cls)
