"""Model cards of both families: the metadata a card is rendered from, and the rendering.

- `ModelCardInfo` — what a card says beyond the model itself (metrics, datasets, licence, limitations, …).
- what every card of a family says (template, pipeline tag, tags, architecture rows) comes from the family's
  descriptor, `plldr_hf.models.FAMILIES[model_type].card`.
- `render_model_card(model, card)` — `README.md` from the family template (`plldr_hf/model_cards/<family>.md`):
  YAML metadata (`huggingface_hub.ModelCardData` with `EvalResult`s) plus the architecture table read from the
  config.
- `card_info_from_folder(model_dir)` — card metadata discovered in a run folder (the reports the training
  commands write), merged with `model_card.json` and explicit overrides.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from plldr_hf.models import FAMILIES, ModelFamily, family


logger = logging.getLogger(__name__)

__all__ = [
    "CARD_INFO_FILE",
    "FAMILIES",
    "ModelCardInfo",
    "card_info_from_folder",
    "family_of",
    "model_card_data",
    "render_model_card",
    "template_path",
]

TEMPLATE_PACKAGE_DIR = "model_cards"
CARD_INFO_FILE = "model_card.json"


@dataclass
class ModelCardInfo:
    """What the model card says beyond what the model's config tells.

    Args:
        model_name: display name and `model-index` name (default: the repo name).
        description: a paragraph at the top of the card (default: a family description).
        license: SPDX-style Hub license id.
        language: language code(s) (default: "en" for PLDR-LLM, ["en", "de"] for AGF).
        datasets: Hub dataset ids (or names) the model was trained on.
        base_model: the model this one was fine-tuned from, if any.
        tags: extra Hub tags (the family tags are always added).
        metrics: measured values, e.g. `{"perplexity": 31.2, "order_parameter": 2e-4}` for PLDR-LLM or
            `{"bleu": 27.1, "chrf": 55.0, "accuracy": 0.61}` for AGF; published in `model-index` and as a table.
        eval_dataset: Hub id / type of the evaluation data (model-index `dataset.type`; default: first of
            `datasets`, else "custom").
        eval_dataset_name: readable name of the evaluation data (default: `eval_dataset`).
        eval_dataset_config: dataset config, e.g. "de-en".
        eval_split: evaluation split.
        metric_details: free-text notes per metric key (e.g. the sacreBLEU signature), shown in the table.
        training: the training recipe actually used: a dict (rendered as a table) or Markdown text.
        limitations: extra limitations, appended to the family's standard list.
        calibration: numbers measured on calibration inputs, not on a dataset split (the PLDR-LLM order parameters):
            a table of their own, never in `model-index`.
        collapse: what `collapse()` measured (`PldrllmCollapseReport.to_dict()` or its `forced`, `tolerance`,
            `order_parameter`, `max_abs_logit_diff`, `argmax_agreement`): a forced collapse is said so on the card,
            with the approximation it measured.
    """

    model_name: str | None = None
    description: str | None = None
    license: str = "apache-2.0"
    language: str | list[str] | None = None
    datasets: list[str] = field(default_factory=list)
    base_model: str | None = None
    tags: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    eval_dataset: str | None = None
    eval_dataset_name: str | None = None
    eval_dataset_config: str | None = None
    eval_split: str | None = "test"
    metric_details: dict[str, str] = field(default_factory=dict)
    training: dict[str, Any] | str | None = None
    limitations: list[str] = field(default_factory=list)
    calibration: dict[str, float] = field(default_factory=dict)
    collapse: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict) -> ModelCardInfo:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ModelCardInfo: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def explicit_fields(self) -> dict:
        """The fields that differ from their defaults (what a caller presumably set)."""
        default = ModelCardInfo()
        return {k: v for k, v in self.to_dict().items() if v != getattr(default, k)}

    def to_dict_of(self, keys) -> dict:
        """The fields named in `keys` (validated and converted through this dataclass)."""
        return {k: v for k, v in self.to_dict().items() if k in keys}

    def updated(self, **changes) -> ModelCardInfo:
        """A copy with the non-None `changes` applied (lists of tags / datasets are merged, not replaced)."""
        data = self.to_dict()
        for key, value in changes.items():
            if value is None:
                continue
            if key in ("tags", "datasets", "limitations"):
                value = [value] if isinstance(value, str) else list(value)
                data[key] = data[key] + [v for v in value if v not in data[key]]
            elif key in ("metrics", "metric_details", "calibration"):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return ModelCardInfo.from_dict(data)


def family_of(model_or_config) -> ModelFamily:
    """The family descriptor of a model or config, with an error naming the families this package has."""
    try:
        return family(model_or_config)
    except ValueError as error:
        raise ValueError(f"plldr_hf.hub: {error}") from None


def template_path(model_type: str) -> Path:
    """The packaged card template of a family (`plldr_hf/model_cards/<family>.md`)."""
    path = resources.files("plldr_hf") / TEMPLATE_PACKAGE_DIR / FAMILIES[model_type].card.template
    return Path(str(path))


def _architecture_rows(model, config) -> list[tuple[str, str]]:
    rows = list(family_of(config).card.architecture(config))
    rows.append(("vocabulary", config.vocab_size))
    if model is not None and hasattr(model, "parameters"):
        rows.append(("parameters", f"{sum(p.numel() for p in model.parameters()):,}"))
    dtype = getattr(config, "dtype", None)
    if dtype is not None:
        rows.append(("weights dtype", str(dtype).replace("torch.", "")))
    return [_cells(name, value) for name, value in rows]


def _cells(*values) -> tuple[str, ...]:
    """Markdown table cells: a `|` inside a value (sacreBLEU signatures) would split the cell."""
    return tuple(str(value).replace("|", "\\|").replace("\n", " ") for value in values)


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_format_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_format_value(v)}" for k, v in value.items())
    return str(value)


def _as_list(value) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def model_card_data(model_or_config, card: ModelCardInfo | None = None, *, repo_id: str | None = None):
    """The YAML metadata (`huggingface_hub.ModelCardData`) of the card, with `model-index` from `card.metrics`."""
    from huggingface_hub import EvalResult, ModelCardData

    card = card or ModelCardInfo()
    family = family_of(model_or_config)
    model_name = card.model_name or (repo_id.split("/")[-1] if repo_id else f"{family.model_type}-model")
    eval_dataset = card.eval_dataset or (card.datasets[0] if card.datasets else "custom")
    eval_results = [
        EvalResult(
            task_type=family.card.pipeline_tag,
            task_name=family.card.task_name,
            dataset_type=eval_dataset,
            dataset_name=card.eval_dataset_name or eval_dataset,
            dataset_config=card.eval_dataset_config,
            dataset_split=card.eval_split,
            metric_type=key,
            metric_value=float(value),
            metric_name=family.card.metric_names.get(key, key),
        )
        for key, value in card.metrics.items()
    ]
    config = getattr(model_or_config, "config", model_or_config)
    tags = list(family.card.tags) + [tag for tag in card.tags if tag not in family.card.tags]
    tags += [tag for tag in family.card.config_tags(config) if tag not in tags]
    return ModelCardData(
        model_name=model_name,
        license=card.license,
        language=_as_list(card.language) or list(family.card.language),
        library_name="transformers",
        pipeline_tag=family.card.pipeline_tag,
        tags=tags,
        datasets=list(card.datasets) or None,
        base_model=card.base_model,
        metrics=sorted(card.metrics) or None,
        eval_results=eval_results or None,
    )


def render_model_card(model_or_config, card: ModelCardInfo | None = None, *, repo_id: str | None = None):
    """The model card (`huggingface_hub.ModelCard`) from the family template, YAML metadata included."""
    import jinja2
    from huggingface_hub import ModelCard

    card = card or ModelCardInfo()
    family = family_of(model_or_config)
    config = getattr(model_or_config, "config", model_or_config)
    model = model_or_config if model_or_config is not config else None
    data = model_card_data(model_or_config, card, repo_id=repo_id)
    metric_rows = [
        _cells(family.card.metric_names.get(key, key), _format_value(float(value)), card.metric_details.get(key, ""))
        for key, value in card.metrics.items()
    ]
    calibration_rows = [
        _cells(family.card.metric_names.get(key, key), _format_value(float(value)))
        for key, value in card.calibration.items()
    ]
    collapse = dict(card.collapse or {})
    if isinstance(collapse.get("order_parameter"), dict):
        collapse["order_parameter"] = collapse["order_parameter"].get("G_LM")
    training_rows, training_text = None, None
    if isinstance(card.training, dict):
        training_rows = [_cells(k, _format_value(v)) for k, v in card.training.items()]
    elif card.training:
        training_text = str(card.training)
    eval_dataset = card.eval_dataset or (card.datasets[0] if card.datasets else None)
    values = dict(
        card_data=data.to_yaml(),
        repo_id=repo_id or f"<user>/{data.model_name}",
        model_title=data.model_name,
        description=card.description,
        architecture=_architecture_rows(model, config),
        collapsed=bool(getattr(config, "collapsed", False)),
        fixed_g=getattr(config, "custom_G_type", None),
        metric_rows=metric_rows,
        eval_description=", ".join(
            str(x) for x in (card.eval_dataset_name or eval_dataset, card.eval_dataset_config, card.eval_split) if x
        ),
        training_rows=training_rows,
        training_text=training_text,
        extra_limitations=list(card.limitations),
        calibration_rows=calibration_rows,
        collapse=collapse,
        # `force=True` on a model that was invariant anyway is no approximation
        forced=bool(collapse.get("forced")) and not collapse.get("invariant", False),
        base_model=card.base_model,
    )
    # trim_blocks / lstrip_blocks: block tags on their own lines leave no blank lines behind
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    template = environment.from_string(template_path(family.model_type).read_text(encoding="utf-8"))
    return ModelCard(template.render(**values))


def _without_local_paths(options: dict) -> dict:
    """The recipe with local paths cut to their file names: a card is published, and where a user keeps their data
    (`/home/NAME/...`) is not part of the recipe. Hub ids (`org/name`, not a local path) stay."""

    def public(value):
        if isinstance(value, list):
            return [public(item) for item in value]
        if isinstance(value, str) and (value.startswith(("/", ".", "~")) or os.path.exists(value)):
            return os.path.basename(value.rstrip("/")) or value
        return value

    return {key: public(value) for key, value in options.items()}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        logger.warning("plldr_hf.hub: ignoring unreadable %s (%s)", path, error)
        return None


def card_info_from_folder(model_dir, overrides: dict | None = None) -> ModelCardInfo:
    """Card metadata for a model folder, most explicit first:

    - `overrides`: `ModelCardInfo` fields (None values ignored), e.g. from command-line options;
    - `model_card.json`: `ModelCardInfo` fields, used as given;
    - PLDR-LLM runs (`plldr-hf train pldrllm`): `train_report.json` (the run's `RunReport`: validation perplexity, G_LM order parameter
      after training, a calibration measurement) and `run_options.json` (the recipe); `collapse_report.json` (what
      `collapse()` measured: forced or not, order parameter, max |Δlogit|, argmax agreement);
    - translation runs (`plldr-hf train agf`): `test_results.json`, else `validation_results.json` (BLEU, chrF,
      token accuracy, sacreBLEU signatures).

    A field given by a more explicit source replaces the discovered value; `metrics`, `metric_details`, `tags`,
    `datasets` and `limitations` are merged.
    """
    folder = Path(model_dir)
    metrics, details, info, calibration = {}, {}, {}, {}
    report = _read_json(folder / "train_report.json") if (folder / "train_report.json").is_file() else None
    if isinstance(report, dict):
        # a `RunReport` (`plldr_hf.training.run`); runs saved before it kept these two at the top level
        validation = (report.get("scores") or {}).get("validation") or {}
        perplexity = validation.get("perplexity", report.get("validation_perplexity"))
        if isinstance(perplexity, (int, float)):
            metrics["perplexity"] = float(perplexity)
            info["eval_split"] = "validation"
        diagnostics = report.get("diagnostics") or {}
        order = diagnostics.get("order_parameter_after", report.get("order_parameter_after"))
        for key, value in order.items() if isinstance(order, dict) else ():
            if isinstance(value, dict) and isinstance(value.get("G_LM"), (int, float)):
                calibration[f"order_parameter_{key}"] = float(value["G_LM"])
        if isinstance(report.get("options"), dict):
            info["training"] = _without_local_paths(report["options"])
    options = _read_json(folder / "run_options.json") if (folder / "run_options.json").is_file() else None
    if isinstance(options, dict) and "training" not in info:
        info["training"] = _without_local_paths(options)
    collapse = _read_json(folder / "collapse_report.json") if (folder / "collapse_report.json").is_file() else None
    if isinstance(collapse, dict):
        info["collapse"] = {
            key: collapse[key]
            for key in (
                "forced",
                "invariant",
                "tolerance",
                "order_parameter",
                "max_abs_logit_diff",
                "argmax_agreement",
            )
            if key in collapse
        }
    for split in ("test", "validation"):
        path = folder / f"{split}_results.json"
        scores = _read_json(path) if path.is_file() else None
        if isinstance(scores, dict) and any(k in scores for k in ("bleu", "chrf", "accuracy")):
            for key in ("bleu", "chrf", "accuracy"):
                if isinstance(scores.get(key), (int, float)):
                    metrics[key] = float(scores[key])
                if isinstance(scores.get(f"{key}_signature"), str):
                    details[key] = scores[f"{key}_signature"]
            info["eval_split"] = split
            break
    base = ModelCardInfo(**info, metrics=metrics, metric_details=details, calibration=calibration)
    explicit = folder / CARD_INFO_FILE
    if explicit.is_file():
        data = _read_json(explicit)
        if not isinstance(data, dict):
            raise ValueError(f"{explicit} must hold a JSON object of ModelCardInfo fields")
        base = base.updated(**ModelCardInfo.from_dict(data).to_dict_of(data))
    if overrides:
        base = base.updated(**ModelCardInfo.from_dict(overrides).to_dict_of(overrides))
    return base
