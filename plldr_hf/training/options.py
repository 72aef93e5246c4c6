"""Every setting of a training run, in transformers' own vocabulary: one `TrainingArguments` subclass per family.

- `TrainOptions(TrainingArguments)`: PLDR-LLM (`plldr-hf train pldrllm`); `TranslationOptions(Seq2SeqTrainingArguments)`:
  the AGF translator (`plldr-hf train agf`). Each declares the model and data settings of its family, the settings
  that are new to training (the DAG weights and their warm-up, clipping by value, the order-parameter logging), and
  the transformers fields whose defaults its recipe changes (AdamW betas, schedule, weight decay, intervals). Every
  other `TrainingArguments` field is inherited as it is: the options *are* the arguments the `Trainer` gets.
- `from_name(name, **overrides)`: a shipped recipe (`plldr_hf/recipes/FAMILY/NAME.json`) or a recipe file with
  overrides; `plldr_hf.training.recipes` reads them.

The command line is transformers' `HfArgumentParser` over these classes (`plldr_hf_cli.commands.train.options_parser`):
every field is a flag of its own name (`--per_device_train_batch_size`, `--push_to_hub`); the older spellings are
its aliases (field metadata `aliases`). Every value is checked here, in `__post_init__`, before transformers sees it
(`field_checks.check_value`: the field's type, its `min`, its `choices`; numbers finite), so the Python API and the command line
refuse the same values with the same one line. Field metadata beside argparse's own keys:

| key | meaning |
|---|---|
| `min` | integers: 1 → positive, 0 → non-negative; floats: 0 → positive, "non_negative" → ≥ 0, "unit" → [0, 1) |
| `parse` | the function that reads the field's text (or list): the command line hands the text over, the check parses it (`--dag-weights 0.1,0,0.1`, `--set K=V`) |
| `cli` | False: no flag (set by code: the Llama baseline's `architecture`, the test splits) |
| `false_flag` | an extra flag that sets a boolean field to False (`--no-bucketing`, `--no-bf16`) |
| `unset` | the value transformers gives the field when it is not set (-1 steps: train by epochs), not checked |
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import typing
from dataclasses import dataclass, field

from transformers import Seq2SeqTrainingArguments, TrainingArguments
from transformers.trainer_utils import SchedulerType
from transformers.training_args import OptimizerNames

from plldr_hf.models.agf.position_encodings import POSITION_ENCODINGS
from plldr_hf.training.field_checks import check_value, flag_of
from plldr_hf.training.recipes import FROM_THE_BASE_MODEL, PRESETS, SIZE_RECIPE, causal_lm_config, preset, sizes_help


logger = logging.getLogger(__name__)

__all__ = ["PRESETS", "TrainOptions", "TranslationOptions", "check_value", "flag_of", "is_wmt17"]

# AGF config fields a translation run takes from its tokenizer, and those with a flag of their own (`--set` refuses them)
TOKENIZER_FIELDS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
OPTION_FIELDS = {"position_encoding": "--position", "pcmv": "--pcmv", "label_smoothing": "--label-smoothing"}
SCHEDULERS = tuple(member.value for member in SchedulerType)


def is_wmt17(dataset) -> bool:
    """Whether a `dataset` option (a name or a list of one) names the Hub's WMT17 (`wmt17`, `wmt/wmt17`)."""
    names = [dataset] if isinstance(dataset, str) else list(dataset or [])
    return len(names) == 1 and str(names[0]).lower() in ("wmt17", "wmt/wmt17")


def bf16_available() -> bool:
    """Whether training can use bf16 mixed precision: a CUDA device that supports it (CPU runs float32)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def _opt(default=None, help: str = "", **meta):
    """A dataclass field with its help and command-line metadata (mutable defaults through a factory)."""
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


def parse_dag_weights(text) -> tuple[float, float, float]:
    """`"a,p,g"` (or one number for all three), or three numbers → three non-negative DAG weights on A_LM, A_P, G_LM."""
    if isinstance(text, (list, tuple)):
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in text):
            raise ValueError(f"--dag-weights: must be three non-negative numbers a,p,g, got {text!r}")
        text = ",".join(map(str, text))
    parts = [p for p in str(text).replace(" ", "").split(",") if p]
    try:
        weights = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"--dag-weights expects three numbers a,p,g (A_LM, A_P, G_LM), got {text!r}") from None
    if len(weights) == 1:
        weights = weights * 3
    if len(weights) != 3 or any(not (w >= 0 and math.isfinite(w)) for w in weights):
        raise ValueError(f"--dag-weights expects three non-negative numbers a,p,g, got {text!r}")
    return weights


def parse_overrides(items) -> dict:
    """`--set FIELD=VALUE` (one, or repeated: a list) → {field: value}."""
    items = [items] if isinstance(items, str) else items
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"--set: must be FIELD=VALUE texts or a mapping of FIELD to value, got {items!r}")
    try:
        return dict(parse_key_value(item) for item in items)
    except ValueError as error:
        raise ValueError(f"--set {error}") from None


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


class _RunOptions:
    """What both families' options share: every field checked before transformers sees it, the recipe's values for
    the settings left unset, `from_name`, and the old names of renamed fields refused with the new one."""

    FAMILY: str
    # the options' earlier names (renamed to the transformers field that holds the same setting)
    RENAMED = {
        "batch_size": "per_device_train_batch_size",
        "no_progress": "disable_tqdm",
        "resume": "resume_from_checkpoint",
        "trainer_args": "the TrainingArguments fields themselves",
    }

    def __new__(cls, *args, **kwargs):
        renamed = sorted(kwargs.keys() & cls.RENAMED.keys())
        if renamed:
            raise TypeError(f"{cls.__name__}({renamed[0]}=...): renamed; give {cls.RENAMED[renamed[0]]}")
        return super().__new__(cls)

    def check(self) -> None:
        """Every field's value (normalised in place), then the settings that contradict each other."""
        hints = _hints(type(self))
        for spec in dataclasses.fields(self):
            if not spec.init:
                continue
            value = getattr(self, spec.name)
            if "unset" in spec.metadata and value == spec.metadata["unset"]:
                continue  # transformers' spelling of "not set" (a copy of these options holds it)
            if "parse" in spec.metadata and isinstance(value, (str, list, tuple)):
                value = spec.metadata["parse"](value)
            setattr(self, spec.name, check_value(spec, hints[spec.name], value))
        self.check_combination()

    def check_combination(self) -> None:
        """The size names a recipe, `init_from` brings its own tokenizer, and LoRA adapts an existing model only."""
        preset(self.FAMILY, self.size)
        if self.init_from and self.tokenizer:
            raise ValueError("--init-from brings the model's own tokenizer; drop --tokenizer (a model keeps its own)")
        if self.lora_r is not None and not self.init_from:
            raise ValueError("--lora-r adapts an existing model: give it with --init-from DIR_OR_HUB_ID")
        if self.label_smoothing_factor:
            raise ValueError(
                f"--label_smoothing_factor {self.label_smoothing_factor}: the model computes its own loss; "
                + ("set --label-smoothing instead" if self.FAMILY == "agf" else "leave it at 0")
            )

    def _device_defaults(self) -> None:
        """What several processes on CPUs (torchrun, accelerate launch) need to train as one run: without `use_cpu`
        and the gloo backend every process trains alone, each one a main process. Pinned memory only with a GPU."""
        import torch

        if not torch.cuda.is_available():
            self.dataloader_pin_memory = False
            if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                self.use_cpu, self.ddp_backend = True, self.ddp_backend or "gloo"
        if self.bf16 is None:
            self.bf16 = bf16_available()

    @classmethod
    def from_name(cls, name: str, **overrides):
        """The options of the recipe `name` (a shipped one or a recipe file: its size and run settings), then
        `overrides`."""
        names = {spec.name for spec in dataclasses.fields(cls) if spec.init}
        unknown = sorted(set(overrides) - names)
        if unknown:
            hint = f"; renamed: give {cls.RENAMED[unknown[0]]}" if unknown[0] in cls.RENAMED else ""
            raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}{hint}")
        shipped = PRESETS[cls.FAMILY].get(name)
        size = shipped["model"] if shipped and isinstance(shipped["model"], str) else name
        run = dict(preset(cls.FAMILY, name)["run"])
        unknown = sorted(set(run) - names)
        if unknown:
            hint = f" (renamed: {cls.RENAMED[unknown[0]]})" if unknown[0] in cls.RENAMED else ""
            raise ValueError(f"--recipe {name}: its run sets {unknown[0]}{hint}, which {cls.__name__} has no field of")
        if overrides.get("init_from"):
            for key in FROM_THE_BASE_MODEL:
                run.pop(key, None)  # a fine-tune keeps the base model's
        return cls(**{"size": size, **run, **overrides})


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


@dataclass
class TrainOptions(_RunOptions, TrainingArguments):
    """The options of a PLDR-LLM run (or its Llama baseline): `train(options)`, `plldr-hf train pldrllm`.

    The reference recipe (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality; arXiv 2603.23539) is the
    defaults: AdamW (0.9, 0.95), eps 1e-5, weight decay 0.1 on every parameter, clipping by value at 1.0, linear
    warm-up then cosine to 10 % of the peak (transformers' `cosine_with_min_lr`), bf16 where the GPU supports it.
    The settings a size decides (block, batch, vocabulary, learning rate, steps) are taken from its recipe when left
    unset (None)."""

    FAMILY = "pldrllm"

    # the model
    size: str = _opt("tiny", sizes_help("pldrllm"), metavar="{" + ",".join(PRESETS["pldrllm"]) + "},RECIPE_FILE")
    architecture: str = _opt(
        "pldrllm", "pldrllm, or llama for the baseline of the same shape", cli=False, choices=("pldrllm", "llama")
    )
    init_from: str | None = _opt(
        None,
        "start from this PLDR-LLM (a saved folder or a Hub id): its config, weights and tokenizer, fine-tuned on "
        "--dataset (the size, vocabulary and tokenizer options do not apply)",
        metavar="DIR_OR_HUB_ID",
    )
    lora_r: int | None = _opt(
        None, "with --init-from: train LoRA adapters of this rank instead of every weight (merged at the end)", min=1
    )
    tokenizer: str | None = _opt(None, "existing tokenizer (path or Hub name) instead of training one")
    vocab_size: int | None = _opt(None, "tokenizer vocabulary (none: the size's)", min=1)
    block_size: int | None = _opt(None, "tokens per training block (none: the size's)", min=1)
    dag_form: str = _opt("log_ratio", "form of the DAG term", choices=("log_ratio", "notears"))
    # the data
    dataset: list[str] = _opt(
        [],
        "local text/JSON/Parquet/CSV files, folders or globs (a text file holds one document per paragraph, blank-line "
        "separated), or a Hugging Face dataset name (none: the embedded Shakespeare corpus)",
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
    padding_free: bool = _opt(
        False,
        "one document per example, batches concatenated without padding (DataCollatorWithFlattening); each "
        "document keeps its own Gram matrix and attention (default: fixed packed blocks)",
    )
    max_eval_blocks: int | None = _opt(None, "cap on validation blocks", min=1)
    allow_data_change: bool = _opt(
        False, "with --resume: continue even if the data differs from what the run was trained on (named in the log)"
    )
    # what training adds to transformers' arguments
    global_batch_size: int | None = _opt(
        None,
        "blocks per optimizer step over all processes: the gradient accumulation is derived from it, so the "
        "recipe stays the same whatever the number of processes (none: batch size x processes x accumulation)",
        min=1,
    )
    clip_by: str = _opt("value", "gradient clipping at 1.0, by value or by norm", choices=("value", "norm"))
    dag_weights: tuple[float, float, float] = _opt(
        (0.0, 0.0, 0.0),
        "DAG regulariser weights on A_LM, A_P, G_LM (one number: all three; 0 = off)",
        parse=parse_dag_weights,
        metavar="A,P,G",
    )
    dag_warmup_steps: int = _opt(0, "linear ramp of the DAG weights", min=0)
    log_dag: bool = _opt(False, "log the DAG values even when their weights are 0")
    # transformers' fields with the recipe's defaults
    output_dir: str = _opt("pldrllm-run", "checkpoints, final model and report")
    per_device_train_batch_size: int | None = _opt(
        None, "blocks per device and step (none: the size's)", min=1, aliases=["--batch-size", "--batch_size"]
    )
    per_device_eval_batch_size: int | None = _opt(
        None, "blocks per device in evaluation (none: the training batch)", min=1
    )
    gradient_accumulation_steps: int = _opt(1, "micro-batches per optimizer step", min=1)
    max_steps: int | None = _opt(None, "optimizer steps (none: the size's; 100 where it sets none)", min=1)
    learning_rate: float | None = _opt(None, "peak learning rate (none: the size's)", min=0)
    warmup_steps: int | None = _opt(None, "warm-up steps (none: 10%% of the steps, at most 2000)", min=0)
    lr_scheduler_type: str = _opt(
        "cosine_with_min_lr", "transformers scheduler (cosine to min_lr_rate x the peak)", choices=SCHEDULERS
    )
    lr_scheduler_kwargs: dict | str | None = _opt({"min_lr_rate": 0.1}, "the scheduler's keyword arguments (JSON)")
    optim: str = _opt("adamw_torch", "optimizer", choices=tuple(member.value for member in OptimizerNames))
    adam_beta2: float = _opt(0.95, "AdamW beta2")
    adam_epsilon: float = _opt(1e-5, "AdamW epsilon")
    weight_decay: float = _opt(0.1, "AdamW weight decay (on every parameter)", min="non_negative")
    max_grad_norm: float | None = _opt(None, "clipping by norm (none: 1.0 with --clip-by norm, else off)")
    bf16: bool | None = _opt(
        None, "bf16 mixed precision (none: if the GPU supports it)", nargs="?", const=True, false_flag="--no-bf16"
    )
    logging_steps: int = _opt(10, "log every N steps", min=1)
    eval_steps: int | None = _opt(None, "evaluate every N steps (none: every 20%% of the run; 0: at the end)", min=0)
    save_steps: int | None = _opt(None, "checkpoint interval (none: at the end)", min=1)
    save_total_limit: int | None = _opt(2, "checkpoints kept", min=1)
    report_to: list[str] | None = _opt(["tensorboard"], "Trainer integrations, or none")
    disable_tqdm: bool = _opt(False, "no progress bar", aliases=["--no-progress", "--no_progress"])
    resume_from_checkpoint: str | None = _opt(
        None,
        "continue from the last checkpoint in --output-dir (last), or from CHECKPOINT",
        nargs="?",
        const="last",
        metavar="CHECKPOINT",
        aliases=["--resume"],
    )
    seed: int = _opt(0, "seed of the model init, data order and tokenizer", min=0)
    fsdp: list[str] | str | None = _opt(
        None,
        "shard parameters, gradients and optimizer state with FSDP2 (full shard, one decoder layer per unit); GPUs "
        "under torchrun or accelerate launch",
        nargs="?",
        const="full_shard auto_wrap",
    )
    dataloader_drop_last: bool = _opt(True, "drop the incomplete last batch")
    ddp_find_unused_parameters: bool | None = _opt(
        # every trainable parameter takes part in every forward (LoRA's frozen ones are not tracked): DDP need not
        # search the graph for unused ones each step, and does not warn that it searched in vain
        False,
        "DDP searches for parameters without gradients",
    )
    include_num_input_tokens_seen: str | bool = _opt(True, "count the input tokens trained on")

    def __post_init__(self):
        if self.fsdp is True or isinstance(self.fsdp, str):
            self.fsdp = "full_shard auto_wrap".split() if self.fsdp is True else self.fsdp.split()
        self.check()
        self._fill_from_recipe()
        self._device_defaults()
        super().__post_init__()

    def check_combination(self) -> None:
        super().check_combination()
        if self.architecture == "llama" and any(self.dag_weights):
            raise ValueError("DAG weights apply to PLDR-LLM only; the llama baseline has no deductive outputs")
        if self.init_from and self.architecture != "pldrllm":
            raise ValueError("--init-from starts from a saved PLDR-LLM; the llama baseline trains from scratch only")
        if self.clip_by == "value" and self.max_grad_norm:
            raise ValueError(
                f"--max_grad_norm {self.max_grad_norm}: the run clips by value; add --clip-by norm to clip by norm"
            )
        if self.fsdp:
            import torch

            if not torch.cuda.is_available():
                raise ValueError(
                    "--fsdp needs GPUs: accelerate shards only on accelerator devices, and on CPUs several processes "
                    "train with DDP; drop --fsdp and run under torchrun (gloo)"
                )

    def _fill_from_recipe(self) -> None:
        """The recipe's values for the settings left unset (None): the size's block, batch, vocabulary, learning
        rate and steps (100 where it sets none; a fine-tune reads its block and vocabulary off the base model), the
        warm-up (10 % of the steps, at most 2,000), the evaluation interval (20 % of the run; 0: at the end), the
        checkpoints (at the end), clipping (by value: Trainer's norm clipping off, `ClipGradValueCallback` clips),
        the gradient accumulation of a global batch, and what a streamed run and FSDP need."""
        run = preset("pldrllm", self.size)["run"]
        for name in SIZE_RECIPE:
            if self.init_from and name in FROM_THE_BASE_MODEL:
                continue
            if getattr(self, name) is None and name in run:
                setattr(self, name, run[name])
        if self.max_steps is None:
            self.max_steps = 100
        if self.warmup_steps is None:
            self.warmup_steps = min(2000, max(1, self.max_steps // 10))
        if self.eval_steps is None:
            self.eval_steps = max(1, self.max_steps // 5)
        self.eval_strategy = "steps" if self.eval_steps else "no"
        self.save_steps = self.save_steps or self.max_steps
        self.per_device_eval_batch_size = self.per_device_eval_batch_size or self.per_device_train_batch_size
        self.data_seed = self.seed if self.data_seed is None else self.data_seed
        if self.max_grad_norm is None:
            self.max_grad_norm = 0.0 if self.clip_by == "value" else 1.0
        self.report_to = [name for name in self.report_to or [] if name != "none"] or "none"
        if self.global_batch_size is not None:
            self.gradient_accumulation_steps = self._accumulation(int(os.environ.get("WORLD_SIZE", "1")))
        if self.streaming and self.accelerator_config is None:
            # each process reads its own shards of a stream, instead of the main process reading for all
            self.accelerator_config = {"dispatch_batches": False}
        if self.fsdp and self.fsdp_config is None:
            from plldr_hf.training.distributed import decoder_layer_classes, fsdp_config

            self.fsdp_config = fsdp_config(decoder_layer_classes(causal_lm_config(self)))

    def _accumulation(self, processes: int) -> int:
        """Micro-batches per optimizer step: the global batch / (batch size x `processes`) (logged)."""
        per_step = self.per_device_train_batch_size * processes
        if self.global_batch_size % per_step:
            raise ValueError(
                f"--global-batch-size {self.global_batch_size} is not a multiple of --batch-size "
                f"{self.per_device_train_batch_size} x {processes} process(es); choose a multiple of {per_step}"
            )
        accumulation = self.global_batch_size // per_step
        logger.info(
            "global batch of %d = %d per process x %d process(es) x %d accumulation steps",
            self.global_batch_size,
            self.per_device_train_batch_size,
            processes,
            accumulation,
        )
        return accumulation


def _default_report_to() -> list[str]:
    """TensorBoard when it is installed, else no integration."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return []
    return ["tensorboard"]


@dataclass
class TranslationOptions(_RunOptions, Seq2SeqTrainingArguments):
    """The options of an AGF translation run: `train(options)`, `plldr-hf train agf`.

    The recipe (Transformer-base, Vaswani et al., arXiv 1706.03762, §5) is the defaults: Adam β₂ 0.98 and ε 1e-9,
    inverse-square-root decay after a linear warm-up, clipping 1.0, evaluation and checkpoints by steps (two kept),
    greedy generation during training and beam search for the test scores, TensorBoard when installed and no
    `report_to` is given, bf16 when the GPU has it. Label smoothing belongs to the model (`label_smoothing`)."""

    FAMILY = "agf"
    RENAMED = {
        **_RunOptions.RENAMED,
        "eval_batch_size": "per_device_eval_batch_size",
        "epochs": "num_train_epochs",
        "scheduler": "lr_scheduler_type",
        "cpu": "use_cpu",
    }

    # the model
    position_encoding: str = _opt(
        "agf", "position encoding", aliases=["--position"], choices=tuple(POSITION_ENCODINGS)
    )
    pcmv: bool = _opt(False, "PCM-V: weight the values by the AGF coefficient")
    size: str = _opt("base", sizes_help("agf"), metavar="{" + ",".join(PRESETS["agf"]) + "},RECIPE_FILE")
    label_smoothing: float = _opt(0.1, "label smoothing of the training loss", min="unit")
    model_overrides: dict = _opt(
        {},
        "any other AgfConfig field, e.g. --set dropout=0.3 --set agf_learn_base=true (repeatable)",
        aliases=["--set"],
        parse=parse_overrides,
        action="append",
        metavar="FIELD=VALUE",
    )
    init_from: str | None = _opt(
        None,
        "start from this translator (a saved folder or a Hub id): its config, weights and tokenizer, fine-tuned on "
        "--dataset (the size, position, vocabulary and tokenizer options do not apply)",
        metavar="DIR_OR_HUB_ID",
    )
    lora_r: int | None = _opt(
        None, "with --init-from: train LoRA adapters of this rank instead of every weight (merged at the end)", min=1
    )
    # the data
    dataset: list[str] = _opt(
        ["libreoffice"],
        "libreoffice (embedded, offline), wmt17 (Hugging Face Hub), or .json/.jsonl(.gz)/.parquet files or "
        "folders; SPLIT=PATH names a file's split",
    )
    wmt17_dir: str | None = _opt(
        None,
        "with --dataset wmt17: a local copy of the Hub dataset wmt/wmt17 (hf download wmt/wmt17 --repo-type dataset "
        '--include "de-en/*" --local-dir DIR) instead of the Hub',
        metavar="DIR",
    )
    source_lang: str = _opt("en", "source language")
    target_lang: str = _opt("de", "target language")
    tokenizer: str | None = _opt(None, "reuse this tokenizer folder instead of training one")
    vocab_size: int = _opt(8000, "size of the trained joint vocabulary", min=1)
    tokenizer_model: str = _opt("bpe", "subword model of the trained tokenizer", choices=("bpe", "unigram"))
    max_source_length: int = _opt(128, "source truncation in subwords", min=1)
    max_target_length: int = _opt(128, "target truncation and generation limit", min=1)
    max_train_samples: int | None = _opt(None, "fixed random subset of the training split", min=1)
    max_eval_samples: int | None = _opt(None, "subset of the validation split", min=1)
    max_test_samples: int | None = _opt(None, "subset of each test split", min=1)
    test_splits: list[str] | None = _opt(
        None, "splits scored after training (none: every split of the data but train and validation)", cli=False
    )
    out_of_domain_test: bool = _opt(
        False,
        "also score the embedded GNOME help pairs (3,560 en-de segments, out of domain) after training",
        aliases=["--gnome-test"],
    )
    allow_data_change: bool = _opt(
        False, "with --resume: continue even if the data differs from what the run was trained on (named in the log)"
    )
    num_beams: int = _opt(4, "beam size of the final test scoring", min=1)
    length_penalty: float = _opt(1.0, "beam-search length penalty of the test scoring")
    bucket_by_length: bool = _opt(
        True,
        "length-bucketed training batches (--no-bucketing: random ones, 2-3x the padding)",
        false_flag="--no-bucketing",
    )
    # transformers' fields with the recipe's defaults
    output_dir: str | None = _opt(None, "where the model and checkpoints go (none: runs/agf-POSITION[-pcmv])")
    max_steps: int | None = _opt(None, "stop after this many optimizer steps (overrides --epochs)", min=1, unset=-1)
    num_train_epochs: float = _opt(10.0, "training epochs without --max-steps", min=0, aliases=["--epochs"])
    per_device_train_batch_size: int = _opt(
        32, "per-device training batch size", min=1, aliases=["--batch-size", "--batch_size"]
    )
    per_device_eval_batch_size: int = _opt(
        64, "per-device evaluation batch size", min=1, aliases=["--eval-batch-size", "--eval_batch_size"]
    )
    gradient_accumulation_steps: int = _opt(1, "micro-batches per optimizer step", min=1)
    learning_rate: float = _opt(5e-4, "peak learning rate", min=0)
    lr_scheduler_type: str = _opt(
        "inverse_sqrt", "transformers scheduler", aliases=["--scheduler"], choices=SCHEDULERS
    )
    warmup_steps: int = _opt(1000, "linear warm-up steps", min=0)
    adam_beta2: float = _opt(0.98, "Adam beta2")
    adam_epsilon: float = _opt(1e-9, "Adam epsilon")
    weight_decay: float = _opt(0.0, "AdamW weight decay", min="non_negative")
    eval_strategy: str = _opt("steps", "when to evaluate")
    eval_steps: int = _opt(1000, "evaluate every N steps", min=1)
    save_steps: int = _opt(1000, "checkpoint every N steps", min=1)
    save_total_limit: int | None = _opt(2, "checkpoints kept", min=1)
    logging_steps: int = _opt(50, "log every N steps", min=1)
    seed: int = _opt(42, "seed of the model init and data order", min=0)
    bf16: bool | None = _opt(
        None, "bf16 mixed precision (none: when available)", nargs="?", const=True, false_flag="--no-bf16"
    )
    use_cpu: bool = _opt(False, "train on the CPU even if a GPU is present", aliases=["--cpu"])
    resume_from_checkpoint: str | None = _opt(
        None,
        "continue from the last checkpoint in --output-dir (last), or from CHECKPOINT",
        nargs="?",
        const="last",
        metavar="CHECKPOINT",
        aliases=["--resume"],
    )
    report_to: list[str] | None = _opt(None, "Trainer integrations, or none (none given: tensorboard if installed)")
    disable_tqdm: bool = _opt(False, "no progress bars", aliases=["--no-progress", "--no_progress"])
    predict_with_generate: bool = _opt(True, "generate translations when evaluating (BLEU, chrF)")
    generation_num_beams: int | None = _opt(1, "beams while evaluating during training (greedy)")
    ddp_find_unused_parameters: bool | None = _opt(
        # every trainable parameter of every position encoding takes part in every forward (tested): DDP need not
        # search for unused ones, and does not warn that it searched in vain
        False,
        "DDP searches for parameters without gradients",
    )

    @property
    def is_wmt17(self) -> bool:
        return is_wmt17(self.dataset)

    def __post_init__(self):
        self.check()
        if self.output_dir is None:
            self.output_dir = f"runs/agf-{self.position_encoding}{'-pcmv' if self.pcmv else ''}"
        if self.wmt17_dir is not None and not os.path.isdir(self.wmt17_dir):
            raise ValueError(f"--wmt17-dir: {self.wmt17_dir} is not a folder; give the local copy of wmt/wmt17")
        if self.max_steps is None:
            self.max_steps = -1
        self.report_to = _default_report_to() if self.report_to is None else self.report_to
        self.report_to = [name for name in self.report_to if name != "none"] or "none"
        self._device_defaults()
        super().__post_init__()

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
