"""Publishing to the Hugging Face Hub: one-commit pushes of a complete, self-contained repo for both families.

A published repo holds `config.json` (with `auto_map` naming `configuration_<family>.py` / `modeling_<family>.py`),
the family's remote code (those two files and their siblings, `ModelFamily.code_files`), `model.safetensors`,
`generation_config.json`, the tokenizer and `README.md` (the model card, `plldr_hf.hub.cards`). A family's custom
pipelines (`ModelFamily.pipelines`: AGF's `pipeline_agf.py`, because Transformers 5 has no built-in "translation"
pipeline) are copied too and named in `config.json` under `custom_pipelines`. The repo then loads

- without `plldr_hf`: `AutoModelFor*.from_pretrained(repo_id, trust_remote_code=True)`;
- with `plldr_hf` imported: `AutoModelFor*.from_pretrained(repo_id)` (the registered classes win over `auto_map`).

Entry points:

- `push_to_hub(model, repo_id, tokenizer=..., card=ModelCardInfo(...))` — model objects in memory; a collapsed
  PLDR-LLM is published collapsed (`config.collapsed` and the frozen G buffers). `model.push_to_hub(...)` stays
  transformers' own method (the same with or without this package): it uploads what `save_pretrained` writes,
  without the card and custom pipelines.
- `push_folder(model_dir, repo_id)` — a saved folder (what `plldr-hf push` calls); card metadata from the arguments or
  from the run files in the folder (`card_info_from_folder`).
- `attach_model_card(trainer, card)` — makes `Trainer.push_to_hub(...)` publish the same card and files instead of
  the bare card Trainer generates.
- `prepare_folder(model, folder, ...)` — the repo contents written to a local folder (a dry run).

Endpoint and token come from the usual huggingface_hub settings (`HF_ENDPOINT`, `HF_TOKEN`, `hf auth login`) or the
`token=` argument. Everything is staged in a temporary folder: a push never writes into the model folder, and a
failure raises `HubPushError` naming the step that failed (preparing the files, creating the repo, uploading).
"""

from __future__ import annotations

import inspect
import json
import logging
import shutil
import tempfile
import types
from pathlib import Path

from plldr_hf.hub.cards import ModelCardInfo, card_info_from_folder, family_of, render_model_card
from plldr_hf.loading import load_folder
from plldr_hf.models.family import ModelFamily


logger = logging.getLogger(__name__)

__all__ = [
    "HubPushError",
    "attach_model_card",
    "finalize_folder",
    "prepare_folder",
    "push_folder",
    "push_to_hub",
    "upload_folder",
]


class HubPushError(RuntimeError):
    """A push that failed; `step` names what failed. The local model folder is never modified by a push."""

    def __init__(self, step: str, repo_id: str, endpoint: str, cause: BaseException):
        self.step, self.repo_id, self.endpoint, self.cause = step, repo_id, endpoint, cause
        super().__init__(
            f"push of {repo_id!r} to {endpoint} failed while {step}: {type(cause).__name__}: "
            f"{str(cause).strip().rstrip('.')}. "
            "Nothing was changed in the local model folder."
        )


def _patch_config_json(folder: Path, family: ModelFamily) -> None:
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    auto_map = config.get("auto_map") or {}
    expected = {
        "AutoConfig": _class_path(family.config_class),
        family.auto_class: _class_path(family.model_class),
    }
    missing = {k: v for k, v in expected.items() if auto_map.get(k) != v}
    if missing:
        raise ValueError(
            f"config.json lacks auto_map entries {missing}: import plldr_hf before saving, so the model classes are "
            "registered with register_for_auto_class"
        )
    absent = [name for name in family.code_files if not (folder / name).is_file()]
    if absent:
        raise ValueError(f"save_pretrained did not copy {absent} next to the weights")
    if family.pipelines:
        # tasks that Transformers 5 does not ship (e.g. "translation") exist for a user without plldr_hf only
        # through these entries
        custom = config.setdefault("custom_pipelines", {})
        for task, pipeline_class in family.pipelines.items():
            source = Path(inspect.getfile(pipeline_class))
            custom[task] = {"impl": _class_path(pipeline_class), "pt": [family.auto_class], "type": "text"}
            shutil.copyfile(source, folder / source.name)
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _class_path(cls) -> str:
    # how auto_map and custom_pipelines name a class of the flattened remote-code folder: "module.Class"
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def finalize_folder(model, folder, *, card: ModelCardInfo | None = None, repo_id: str | None = None) -> None:
    """Complete a folder that already holds `model.save_pretrained(folder)`: check `auto_map` and the model files,
    add the AGF translation pipeline, and write `README.md` from the family template."""
    folder = Path(folder)
    family = family_of(model)
    _patch_config_json(folder, family)
    render_model_card(model, card, repo_id=repo_id).save(folder / "README.md")


def prepare_folder(
    model,
    folder,
    *,
    tokenizer=None,
    card: ModelCardInfo | None = None,
    repo_id: str | None = None,
    max_shard_size: int | str | None = "50GB",
) -> list[str]:
    """Write the complete repo contents to `folder` (a dry run of `push_to_hub`); returns the file names."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    family_of(model)
    model.save_pretrained(folder, max_shard_size=max_shard_size)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    else:
        logger.warning("plldr_hf.hub: no tokenizer given; the repo will not load with AutoTokenizer or a pipeline")
    finalize_folder(model, folder, card=card, repo_id=repo_id)
    return sorted(p.name for p in folder.iterdir())


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def upload_folder(
    folder,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    create_pr: bool = False,
):
    """Create the repo if needed and upload `folder` in one commit; failures raise `HubPushError`."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    except Exception as error:
        raise HubPushError("creating the repository", repo_id, api.endpoint, error) from error
    try:
        return api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            commit_message=commit_message or "Upload model with plldr_hf",
            commit_description=commit_description,
            revision=revision,
            create_pr=create_pr,
        )
    except Exception as error:
        raise HubPushError("uploading the files", repo_id, api.endpoint, error) from error


def push_to_hub(
    model,
    repo_id: str,
    *,
    tokenizer=None,
    card: ModelCardInfo | None = None,
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    create_pr: bool = False,
    max_shard_size: int | str | None = "50GB",
    tags: list[str] | None = None,
):
    """Publish `model` (and `tokenizer`) to `repo_id` in one commit, with the rendered model card.

    The keyword arguments after `card` are those of transformers' `PreTrainedModel.push_to_hub`; `tags` (and the
    model's `model_tags`) are added to the card's tags. Returns the `huggingface_hub.CommitInfo`. Raises
    `HubPushError` naming the step that failed.
    """
    extra_tags = [*(getattr(model, "model_tags", None) or []), *(tags or [])]
    if extra_tags:
        card = (card or ModelCardInfo()).updated(tags=extra_tags)
    with tempfile.TemporaryDirectory(prefix="plldr_hf_push_") as staging:
        try:
            prepare_folder(
                model, staging, tokenizer=tokenizer, card=card, repo_id=repo_id, max_shard_size=max_shard_size
            )
        except Exception as error:
            raise HubPushError("preparing the files", repo_id, _endpoint(), error) from error
        return upload_folder(
            staging,
            repo_id,
            private=private,
            token=token,
            revision=revision,
            commit_message=commit_message,
            commit_description=commit_description,
            create_pr=create_pr,
        )


def push_folder(
    model_dir,
    repo_id: str,
    *,
    card: ModelCardInfo | dict | None = None,
    require_tokenizer: bool = True,
    **push_kwargs,
):
    """Publish a saved model folder: loads it with this package's classes (dtype kept) and pushes it with
    `push_to_hub`, so only the repo files are uploaded (no checkpoints, logs or run files) and the model files are
    those of the installed package. The card is `card_info_from_folder(model_dir)` updated with `card`: a dict
    applies the fields it names, a `ModelCardInfo` the fields that differ from their defaults."""
    try:
        model, tokenizer = load_folder(model_dir)
        if tokenizer is None and require_tokenizer:
            raise FileNotFoundError(f"{model_dir} has no tokenizer files (tokenizer.json / tokenizer_config.json)")
        overrides = card.explicit_fields() if isinstance(card, ModelCardInfo) else card
        info = card_info_from_folder(model_dir, overrides)
    except Exception as error:
        raise HubPushError("reading the model folder", repo_id, _endpoint(), error) from error
    return push_to_hub(model, repo_id, tokenizer=tokenizer, card=info, **push_kwargs)


def attach_model_card(trainer, card: ModelCardInfo | None = None) -> None:
    """Make `trainer.push_to_hub(...)` publish this package's card and repo files.

    `Trainer.push_to_hub(**card_kwargs)` saves the model, then regenerates `README.md` with
    `trainer.create_model_card(**card_kwargs)` and uploads the output folder. This replaces that method on this
    trainer instance: the card comes from the family template with `card`, updated with what is passed to
    `push_to_hub` (`language`, `license`, `tags`, `finetuned_from` → base model, `dataset` → datasets,
    `model_name`), and the AGF translation pipeline is added. Pushes during training (`hub_strategy`) copy
    `config.json` and the weights from each checkpoint, so until the final `push_to_hub` they carry the card of the
    last `create_model_card` call but not the `custom_pipelines` entry.
    """
    base = card or ModelCardInfo()

    def create_model_card(
        self,
        language=None,
        license=None,
        tags=None,
        model_name=None,
        finetuned_from=None,
        tasks=None,
        dataset_tags=None,
        dataset=None,
        dataset_args=None,
    ):
        if not self.is_world_process_zero():
            return
        model = self.accelerator.unwrap_model(self.model)
        info = base.updated(
            language=language,
            license=license,
            tags=tags,
            base_model=finetuned_from,
            datasets=dataset if dataset is not None else dataset_tags,
        )
        if info.model_name is None and model_name is not None:
            info = info.updated(model_name=model_name)
        finalize_folder(model, self.args.output_dir, card=info, repo_id=getattr(self, "hub_model_id", None))

    trainer.create_model_card = types.MethodType(create_model_card, trainer)
