"""Every setting of a training run, written once: the named presets of both families and one options dataclass per
family.

- `PRESETS[family][name]`: the model fields of a named size (`model`) and the run options it sets (`run`). `tiny`
  is the CPU smoke run of each family (seconds): the tiny model with few steps on little data.
- `TrainOptions` (PLDR-LLM, `train_causal_lm`, `plldr-hf train pldrllm`) and `TranslationOptions` (AGF,
  `train_translation`, `plldr-hf train agf`): one field per option, with its default, help and checks in the
  field's metadata. `from_name(name, **overrides)` is the preset with overrides; `resolved()` fills the defaults that
  depend on the size and checks the values.

Both `train` commands generate one flag per field from these dataclasses (`plldr_hf_cli.arguments.add_option_flags`),
so a default is written only here and `--help` shows it. The module imports only the standard library: the command
line reads it without torch (`plldr_hf_cli.arguments.load_light_module`).

Field metadata read by the command line:

| key | meaning |
|---|---|
| `help` | the flag's help text (the default is appended) |
| `min` | integers: 1 → positive, 0 → non-negative; floats: 0 → positive, "non_negative" → ≥ 0, "unit" → [0, 1); floats without it: any finite number |
| `choices`, `metavar`, `nargs`, `const` | as in argparse |
| `choices_from` | `"module:attribute"` of a torch-free module whose keys are the choices |
| `parse` | name of a parser in this module for values argparse cannot type (`parse_dag_weights`, `parse_key_value`) |
| `flag` | the flag's name when it is not `--field-name` |
| `action` | `boolean_optional` (`--x` / `--no-x`), `store_false` (with `flag`), `append` (repeatable) |
| `group` | the `--help` section |
| `cli` | False: not a flag (set by code, e.g. the Llama baseline's `architecture`) |
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path


__all__ = ["PRESETS", "TrainOptions", "TranslationOptions", "is_wmt17", "parse_dag_weights", "parse_key_value"]


def light_module(name: str):
    """A standard-library-only module of this package, loaded by its file without `plldr_hf/__init__.py` (torch), and
    registered under its name so that the package imported later uses it: the command line's checks stay fast."""
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1].joinpath(*name.split(".")[1:]).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# the recipes (named sizes) and the settings they decide: `plldr_hf.training.presets`, loaded the same light way
_presets = light_module("plldr_hf.training.presets")
PRESETS, SIZE_RECIPE, FROM_THE_BASE_MODEL = _presets.PRESETS, _presets.SIZE_RECIPE, _presets.FROM_THE_BASE_MODEL
RECIPE_FOLDER, preset, sizes_help = _presets.RECIPE_FOLDER, _presets.preset, _presets.sizes_help


# AGF config fields a translation run takes from its tokenizer, and those with a flag of their own (`--set` refuses them)
TOKENIZER_FIELDS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
OPTION_FIELDS = {"position_encoding": "--position", "pcmv": "--pcmv", "label_smoothing": "--label-smoothing"}


def is_wmt17(dataset) -> bool:
    """Whether a `dataset` option (a name or a list of one) names the Hub's WMT17 (`wmt17`, `wmt/wmt17`)."""
    names = [dataset] if isinstance(dataset, str) else list(dataset or [])
    return len(names) == 1 and str(names[0]).lower() in ("wmt17", "wmt/wmt17")


def parse_dag_weights(text: str) -> tuple[float, float, float]:
    """`"a,p,g"` (or one number for all three) → three non-negative DAG weights on A_LM, A_P, G_LM."""
    parts = [p for p in str(text).replace(" ", "").split(",") if p]
    try:
        weights = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"--dag-weights expects three numbers a,p,g (A_LM, A_P, G_LM), got {text!r}") from None
    if len(weights) == 1:
        weights = weights * 3
    if len(weights) != 3 or any(not w >= 0 for w in weights):
        raise ValueError(f"--dag-weights expects three non-negative numbers a,p,g, got {text!r}")
    return weights


def parse_key_value(text: str) -> tuple[str, object]:
    """`"KEY=VALUE"` → (key, value), the value read as JSON when it is JSON (numbers, true/false) else as text."""
    key, sep, value = str(text).partition("=")
    if not sep or not key:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
    except RecursionError:
        raise ValueError(f"{key}=...: the value is nested too deeply; give a number, true/false or text") from None


def _opt(default=None, help: str = "", **meta):
    """A dataclass field with its command-line metadata (mutable defaults through a factory)."""
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: copy.copy(value), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


def _trainer_args_opt(arguments: str, **meta):
    """The `trainer_args` field: fields of transformers' `arguments` class that no option covers. The command line
    takes each as a flag of its own name (`--save_only_model`), parsed by transformers' `HfArgumentParser`."""
    return _opt({}, f"any other {arguments} field, by name", cli=False, **meta)


@functools.cache
def trainer_field_names(arguments: str) -> frozenset[str]:
    """The init fields of transformers' `TrainingArguments` / `Seq2SeqTrainingArguments` (imports transformers:
    called only when there are trainer fields to check; read once per process, the options are checked again each
    time they are resolved)."""
    import transformers

    return frozenset(f.name for f in dataclasses.fields(getattr(transformers, arguments)) if f.init)


def flag_of(spec) -> str:
    """The command-line flag of an options field (its `flag` metadata, else `--field-name`; the field's own name
    where it is no flag): the name every check's message uses, from the command line and the Python API alike."""
    if spec.metadata.get("cli", True) is False:
        return spec.name
    return spec.metadata.get("flag", "--" + spec.name.replace("_", "-"))


def _integer(flag: str, value, low) -> int:
    kind = {1: "a positive integer", 0: "a non-negative integer"}.get(low, "an integer")
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        raise ValueError(f"{flag}: must be {kind}, got {value!r}")
    return value


def _number(flag: str, value, low) -> float:
    kind = {0: "a finite positive number", "non_negative": "a finite non-negative number"}.get(low, "a finite number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{flag}: must be {kind}, got {value!r}")
    if not math.isfinite(value := float(value)):
        raise ValueError(f"{flag} {value}: numbers must be finite (not NaN or infinite)")
    if (low == 0 and not value > 0) or (low in ("non_negative", "unit") and value < 0):
        raise ValueError(f"{flag}: must be {kind}, got {value:g}")
    if low == "unit" and value >= 1:
        raise ValueError(f"{flag}: must be in [0, 1), got {value:g}")
    return value


def choices_of(spec) -> tuple | None:
    """The values a field takes: its `choices`, or the keys named by `choices_from` ("module:attribute")."""
    meta = spec.metadata
    if "choices_from" in meta:
        module_name, _, attribute = meta["choices_from"].partition(":")
        return tuple(getattr(light_module(module_name), attribute))
    return meta.get("choices")


def check_field(spec, value):
    """One field's value checked and normalised, or a ValueError naming its flag: the type of the annotation
    (booleans are not integers), the range of its `min` metadata, its choices; a string where a list of strings is
    meant becomes a one-item list, an integer where a number is meant a float, text for a `parse` field is parsed.
    The command line hands its flags over as typed as it could read them, so both refuse the same values with the
    same message."""
    flag = flag_of(spec)
    kind = str(spec.type).replace(" ", "")
    optional = kind.endswith("|None")
    kind = kind.removesuffix("|None")
    if value is None:
        if optional:
            return None
        raise ValueError(f"{flag}: a value is required, got None")
    parse = spec.metadata.get("parse")
    if parse and isinstance(value, str):
        value = globals()[parse](value)
    elif parse == "parse_key_value" and not isinstance(value, dict):
        raise ValueError(f"{flag}: must be a mapping of FIELD to value, got {value!r}")
    low = spec.metadata.get("min")
    if kind == "int":
        value = _integer(flag, value, low)
    elif kind == "float":
        value = _number(flag, value, low)
    elif kind == "bool" and not isinstance(value, bool):
        raise ValueError(f"{flag}: must be true or false, got {value!r}")
    elif kind == "str":
        value = os.fspath(value) if isinstance(value, os.PathLike) else value
        if not isinstance(value, str):
            raise ValueError(f"{flag}: must be text, got {value!r}")
    elif kind == "str|bool" and not isinstance(value, (str, bool)):
        raise ValueError(f"{flag}: must be true, false or a path, got {value!r}")
    elif kind in ("list[str]", "tuple[str,...]"):
        value = [value] if isinstance(value, (str, os.PathLike)) else value
        if isinstance(value, (list, tuple)):
            value = [os.fspath(item) if isinstance(item, os.PathLike) else item for item in value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and item for item in value):
            raise ValueError(f"{flag}: must be a list of names or paths, got {value!r}")
        value = list(value) if kind == "list[str]" else tuple(value)
    elif kind.startswith("tuple[float"):
        numbers = isinstance(value, (list, tuple)) and all(
            isinstance(w, (int, float)) and not isinstance(w, bool) for w in value
        )
        if not numbers:
            raise ValueError(f"{flag}: must be three non-negative numbers a,p,g, got {value!r}")
        value = parse_dag_weights(",".join(map(str, value)))
    elif kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"{flag}: must be a mapping of FIELD to value, got {value!r}")
        for key, item in value.items():
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f"{flag} {key}={item}: numbers must be finite (not NaN or infinite)")
        value = dict(value)
    choices = choices_of(spec)
    if choices is not None and value not in choices:
        raise ValueError(f"{flag}: must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


class _Preset:
    """What both options dataclasses share: every field checked when the options are made (`check_field`, from the
    command line and the Python API alike, then the family's `check_combination`), `from_name`, and resolution done
    once: `resolved()` returns a checked copy with the size-dependent defaults filled in, and a resolved copy resolves
    to itself."""

    FAMILY: str
    # the transformers arguments class of the family's trainer, and its fields that an option of another name sets
    # (an option named like its field sets that field too); on the command line each works under either name
    TRAINER_ARGUMENTS: str
    TRAINER_FIELDS: dict[str, str] = {}

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Every field's value (normalised in place), then the settings that contradict each other."""
        for spec in dataclasses.fields(self):
            object.__setattr__(self, spec.name, check_field(spec, getattr(self, spec.name)))
        self.check_combination()

    @property
    def is_resolved(self) -> bool:
        return self.__dict__.get("_resolved", False)

    def resolved(self):
        """A checked copy with every default that depends on other options filled in (itself when already
        resolved: a run resolves its options once, wherever that happens first)."""
        if self.is_resolved:
            return self
        self.check()  # values assigned after construction too
        out = self._resolve()
        out.__dict__["_resolved"] = True
        return out

    def check_combination(self) -> None:
        """The size names a recipe, `init_from` brings its own tokenizer, and LoRA adapts an existing model only."""
        preset(self.FAMILY, self.size)
        if self.init_from and self.tokenizer:
            raise ValueError("--init-from brings the model's own tokenizer; drop --tokenizer (a model keeps its own)")
        if self.lora_r is not None and not self.init_from:
            raise ValueError("--lora-r adapts an existing model: give it with --init-from DIR_OR_HUB_ID")
        specs = {spec.name: spec for spec in dataclasses.fields(self)}
        for key in self.trainer_args:
            option = self.TRAINER_FIELDS.get(key, key)
            if option in specs:
                raise ValueError(f"trainer_args {key}: it is an option of its own; use {flag_of(specs[option])}")
        unknown = (
            sorted(set(self.trainer_args) - trainer_field_names(self.TRAINER_ARGUMENTS)) if self.trainer_args else []
        )
        if unknown:
            raise ValueError(
                f"trainer_args {unknown[0]}: {self.TRAINER_ARGUMENTS} has no such field; see its documentation"
            )

    @classmethod
    def from_name(cls, name: str, **overrides):
        """The options of the preset `name` (its size and run settings), then `overrides`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}")
        shipped = PRESETS[cls.FAMILY].get(name)
        size = shipped["model"] if shipped and isinstance(shipped["model"], str) else name
        run = dict(preset(cls.FAMILY, name)["run"])
        if overrides.get("init_from"):
            for key in FROM_THE_BASE_MODEL:
                run.pop(key, None)  # a fine-tune keeps the base model's
        return cls(**{"size": size, **run, **overrides})


@dataclass
class TrainOptions(_Preset):
    """Options of `train_causal_lm` and the flags of `plldr-hf train pldrllm`."""

    FAMILY = "pldrllm"
    TRAINER_ARGUMENTS = "TrainingArguments"
    TRAINER_FIELDS = {
        "per_device_train_batch_size": "batch_size",
        "disable_tqdm": "no_progress",
        "resume_from_checkpoint": "resume",
    }

    size: str = _opt("tiny", sizes_help("pldrllm"), metavar="{" + ",".join(PRESETS["pldrllm"]) + "},RECIPE_FILE")
    output_dir: str = _opt("pldrllm-run", "checkpoints, final model and report")
    dataset: list[str] = _opt(
        [],
        "local text/JSON/Parquet/CSV files, folders or globs (a text file holds one document per paragraph, blank-line "
        "separated), or a Hugging Face dataset name (none: the embedded Shakespeare corpus)",
        nargs="+",
    )
    dataset_config: str | None = _opt(None, "configuration of a Hugging Face dataset")
    text_column: str = _opt("text", "text column of table files / Hub datasets")
    max_train_documents: int | None = _opt(None, "use only the first N documents", min=1)
    streaming: bool = _opt(
        False,
        "read the corpus as a stream (local files, folders or globs; Hub datasets): documents are tokenized and "
        "packed as training reads them, so memory does not grow with the corpus; each process reads its own files",
    )
    tokenizer_sample_documents: int = _opt(
        100_000, "with --streaming: the first N training documents train the tokenizer", min=1
    )
    tokenizer: str | None = _opt(None, "existing tokenizer (path or Hub name) instead of training one")
    init_from: str | None = _opt(
        None,
        "start from this PLDR-LLM (a saved folder or a Hub id): its config, weights and tokenizer, fine-tuned on "
        "--dataset (the size, vocabulary and tokenizer options do not apply)",
        metavar="DIR_OR_HUB_ID",
    )
    lora_r: int | None = _opt(
        None, "with --init-from: train LoRA adapters of this rank instead of every weight (merged at the end)", min=1
    )
    vocab_size: int | None = _opt(None, "tokenizer vocabulary (none: the size's)", min=1)
    block_size: int | None = _opt(None, "tokens per training block (none: the size's)", min=1)
    batch_size: int | None = _opt(None, "blocks per device and step (none: the size's)", min=1)
    gradient_accumulation_steps: int = _opt(1, "micro-batches per optimizer step", min=1)
    global_batch_size: int | None = _opt(
        None,
        "blocks per optimizer step over all processes: the gradient accumulation is derived from it, so the "
        "recipe stays the same whatever the number of processes (none: batch size x processes x accumulation)",
        min=1,
    )
    max_steps: int | None = _opt(None, "optimizer steps (none: the size's; 100 where it sets none)", min=1)
    learning_rate: float | None = _opt(None, "peak learning rate (none: the size's)", min=0)
    warmup_steps: int | None = _opt(None, "warm-up steps (none: 10%% of the steps, at most 2000)", min=0)
    clip_by: str = _opt("value", "gradient clipping at 1.0", choices=("value", "norm"))
    bf16: bool | None = _opt(None, "bf16 mixed precision (none: if the GPU supports it)", action="boolean_optional")
    dag_weights: tuple[float, float, float] = _opt(
        (0.0, 0.0, 0.0),
        "DAG regulariser weights on A_LM, A_P, G_LM (one number: all three; 0 = off)",
        parse="parse_dag_weights",
        metavar="A,P,G",
    )
    dag_warmup_steps: int = _opt(0, "linear ramp of the DAG weights", min=0)
    dag_form: str = _opt("log_ratio", "form of the DAG term", choices=("log_ratio", "notears"))
    log_dag: bool = _opt(False, "log the DAG values even when their weights are 0")
    logging_steps: int = _opt(10, "log every N steps", min=1)
    eval_steps: int | None = _opt(None, "evaluate every N steps (none: every 20%% of the run; 0: at the end)", min=0)
    save_steps: int | None = _opt(None, "checkpoint interval (none: at the end)", min=1)
    save_total_limit: int | None = _opt(2, "checkpoints kept", min=1)
    max_eval_blocks: int | None = _opt(None, "cap on validation blocks", min=1)
    report_to: list[str] = _opt(["tensorboard"], "Trainer integrations, or none", nargs="+")
    no_progress: bool = _opt(False, "no progress bar")
    resume: str | bool | None = _opt(
        None,
        "continue from the last checkpoint in --output-dir, or from CHECKPOINT",
        nargs="?",
        const="last",
        metavar="CHECKPOINT",
    )
    allow_data_change: bool = _opt(
        False, "with --resume: continue even if the data differs from what the run was trained on (named in the log)"
    )
    seed: int = _opt(0, "seed of the model init, data order and tokenizer", min=0)
    fsdp: bool = _opt(
        False,
        "shard parameters, gradients and optimizer state with FSDP2 (full shard, one decoder layer per unit); GPUs "
        "under torchrun or accelerate launch",
    )
    architecture: str = _opt("pldrllm", "pldrllm, or llama for the baseline of the same shape", cli=False)
    padding_free: bool = _opt(
        False,
        "one document per example, batches concatenated without padding (DataCollatorWithFlattening); each "
        "document keeps its own Gram matrix and attention (default: fixed packed blocks)",
    )
    trainer_args: dict = _trainer_args_opt("TrainingArguments")

    def check_combination(self) -> None:
        super().check_combination()
        if self.architecture not in ("pldrllm", "llama"):
            raise ValueError(f"architecture must be 'pldrllm' or 'llama', got {self.architecture!r}")
        if self.architecture == "llama" and any(self.dag_weights):
            raise ValueError("DAG weights apply to PLDR-LLM only; the llama baseline has no deductive outputs")
        if self.init_from and self.architecture != "pldrllm":
            raise ValueError("--init-from starts from a saved PLDR-LLM; the llama baseline trains from scratch only")

    def _resolve(self) -> TrainOptions:
        """Fills the recipe options left unset (None) from the size's run settings (`SIZE_RECIPE`: block, batch,
        vocabulary, learning rate, steps; 100 steps where the size sets none). The other run settings of a preset
        (the smoke run's data limits) apply through `from_name` / `--tiny` only."""
        run = preset("pldrllm", self.size)["run"]
        out = copy.copy(self)
        for name in SIZE_RECIPE:
            if self.init_from and name in FROM_THE_BASE_MODEL:
                continue  # the pipeline reads them off the base model
            if getattr(out, name) is None and name in run:
                setattr(out, name, run[name])
        if out.max_steps is None:
            out.max_steps = 100
        out.report_to = [r for r in self.report_to if r != "none"]
        out.dataset = list(self.dataset)
        out.trainer_args = dict(self.trainer_args)
        return out


@dataclass
class TranslationOptions(_Preset):
    """Options of `train_translation` and the flags of `plldr-hf train agf`."""

    FAMILY = "agf"
    TRAINER_ARGUMENTS = "Seq2SeqTrainingArguments"
    TRAINER_FIELDS = {
        "per_device_train_batch_size": "batch_size",
        "per_device_eval_batch_size": "eval_batch_size",
        "num_train_epochs": "epochs",
        "lr_scheduler_type": "scheduler",
        "disable_tqdm": "no_progress",
        "use_cpu": "cpu",
        "resume_from_checkpoint": "resume",
    }

    # the model
    position_encoding: str = _opt(
        "agf",
        "position encoding",
        flag="--position",
        choices_from="plldr_hf.models.agf.position_encodings:POSITION_ENCODINGS",
        group="model",
    )
    pcmv: bool = _opt(False, "PCM-V: weight the values by the AGF coefficient", group="model")
    size: str = _opt(
        "base", sizes_help("agf"), metavar="{" + ",".join(PRESETS["agf"]) + "},RECIPE_FILE", group="model"
    )
    label_smoothing: float = _opt(0.1, "label smoothing of the training loss", min="unit", group="model")
    model_overrides: dict = _opt(
        {},
        "any other AgfConfig field, e.g. --set dropout=0.3 --set agf_learn_base=true (repeatable)",
        flag="--set",
        action="append",
        parse="parse_key_value",
        metavar="FIELD=VALUE",
        group="model",
    )
    # the data
    dataset: list[str] = _opt(
        ["libreoffice"],
        "libreoffice (embedded, offline), wmt17 (Hugging Face Hub), or .json/.jsonl(.gz)/.parquet files or "
        "folders; SPLIT=PATH names a file's split",
        nargs="+",
        group="data",
    )
    wmt17_dir: str | None = _opt(
        None,
        "with --dataset wmt17: a local copy of the Hub dataset wmt/wmt17 (hf download wmt/wmt17 --repo-type dataset "
        '--include "de-en/*" --local-dir DIR) instead of the Hub',
        metavar="DIR",
        group="data",
    )
    source_lang: str = _opt("en", "source language", group="data")
    target_lang: str = _opt("de", "target language", group="data")
    tokenizer: str | None = _opt(None, "reuse this tokenizer folder instead of training one", group="data")
    init_from: str | None = _opt(
        None,
        "start from this translator (a saved folder or a Hub id): its config, weights and tokenizer, fine-tuned on "
        "--dataset (the size, position, vocabulary and tokenizer options do not apply)",
        metavar="DIR_OR_HUB_ID",
        group="model",
    )
    lora_r: int | None = _opt(
        None,
        "with --init-from: train LoRA adapters of this rank instead of every weight (merged at the end)",
        min=1,
        group="model",
    )
    vocab_size: int = _opt(8000, "size of the trained joint vocabulary", min=1, group="data")
    tokenizer_model: str = _opt(
        "bpe", "subword model of the trained tokenizer", choices=("bpe", "unigram"), group="data"
    )
    max_source_length: int = _opt(128, "source truncation in subwords", min=1, group="data")
    max_target_length: int = _opt(128, "target truncation and generation limit", min=1, group="data")
    max_train_samples: int | None = _opt(None, "fixed random subset of the training split", min=1, group="data")
    max_eval_samples: int | None = _opt(None, "subset of the validation split", min=1, group="data")
    max_test_samples: int | None = _opt(None, "subset of each test split", min=1, group="data")
    test_splits: tuple[str, ...] | None = _opt(
        None, "splits scored after training (none: every split of the data but train and validation)", cli=False
    )
    out_of_domain_test: bool = _opt(
        False,
        "also score the embedded GNOME help pairs (3,560 en-de segments, out of domain) after training",
        flag="--gnome-test",
        group="data",
    )
    # the training
    output_dir: str | None = _opt(
        None, "where the model and checkpoints go (none: runs/agf-POSITION[-pcmv])", group="training"
    )
    max_steps: int | None = _opt(
        None, "stop after this many optimizer steps (overrides --epochs)", min=1, group="training"
    )
    epochs: float = _opt(10.0, "training epochs without --max-steps", min=0, group="training")
    batch_size: int = _opt(32, "per-device training batch size", min=1, group="training")
    eval_batch_size: int = _opt(64, "per-device evaluation batch size", min=1, group="training")
    gradient_accumulation_steps: int = _opt(1, "micro-batches per optimizer step", min=1, group="training")
    learning_rate: float = _opt(5e-4, "peak learning rate", min=0, group="training")
    scheduler: str = _opt(
        "inverse_sqrt", "transformers scheduler: inverse_sqrt, linear, cosine, ...", group="training"
    )
    warmup_steps: int = _opt(1000, "linear warm-up steps", min=0, group="training")
    weight_decay: float = _opt(0.0, "AdamW weight decay", min="non_negative", group="training")
    eval_steps: int = _opt(1000, "evaluate every N steps", min=1, group="training")
    save_steps: int = _opt(1000, "checkpoint every N steps", min=1, group="training")
    logging_steps: int = _opt(50, "log every N steps", min=1, group="training")
    num_beams: int = _opt(4, "beam size of the final test scoring", min=1, group="training")
    length_penalty: float = _opt(1.0, "beam-search length penalty of the test scoring", group="training")
    bucket_by_length: bool = _opt(
        True,
        "random training batches instead of length-bucketed ones (2-3x the padding)",
        flag="--no-bucketing",
        action="store_false",
        group="training",
    )
    seed: int = _opt(42, "seed of the model init and data order", min=0, group="training")
    bf16: bool | None = _opt(
        None, "bf16 mixed precision (none: when available)", action="boolean_optional", group="training"
    )
    cpu: bool = _opt(False, "train on the CPU even if a GPU is present", group="training")
    resume: str | bool | None = _opt(
        None,
        "continue from the last checkpoint in --output-dir, or from CHECKPOINT",
        nargs="?",
        const="last",
        metavar="CHECKPOINT",
        group="training",
    )
    allow_data_change: bool = _opt(
        False,
        "with --resume: continue even if the data differs from what the run was trained on (named in the log)",
        group="training",
    )
    report_to: list[str] = _opt(
        [], "Trainer integrations, or none (none given: tensorboard if installed)", nargs="+", group="training"
    )
    no_progress: bool = _opt(False, "no progress bars", group="training")
    trainer_args: dict = _trainer_args_opt("Seq2SeqTrainingArguments", group="training")

    @property
    def is_wmt17(self) -> bool:
        return is_wmt17(self.dataset)

    def check_combination(self) -> None:
        super().check_combination()
        if self.wmt17_dir is not None and not self.is_wmt17:
            raise ValueError("--wmt17-dir needs --dataset wmt17")
        for key in self.model_overrides:
            if key in TOKENIZER_FIELDS:
                raise ValueError(
                    f"--set {key}: the model takes it from the tokenizer the run trains or reuses; set the vocabulary "
                    "with --vocab-size, or give --tokenizer"
                )
            if key in OPTION_FIELDS:
                raise ValueError(f"--set {key}: it is an option of its own; use {OPTION_FIELDS[key]}")

    def _resolve(self) -> TranslationOptions:
        """The output folder filled in, and the WMT17 copy checked."""
        out = copy.copy(self)
        out.dataset = list(self.dataset)
        out.model_overrides = dict(self.model_overrides)
        out.trainer_args = dict(self.trainer_args)
        if out.output_dir is None:
            out.output_dir = f"runs/agf-{self.position_encoding}{'-pcmv' if self.pcmv else ''}"
        if out.wmt17_dir is not None and not os.path.isdir(out.wmt17_dir):
            raise ValueError(f"--wmt17-dir: {out.wmt17_dir} is not a folder; give the local copy of wmt/wmt17")
        return out
