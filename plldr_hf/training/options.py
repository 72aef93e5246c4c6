"""`TrainOptions`: every option of a PLDR-LLM training run, written once.

`train_causal_lm(options)` takes it; `plldr-hf train pldrllm` generates its flags from it (one flag per field,
`--field-name`, with the help, choices and value checks in the field's metadata). The module imports only the
standard library, so the command line can read it without importing torch or transformers
(`plldr_hf_cli.commands.train.pldrllm.load_options_module`).

Field metadata read by the command line:

| key | meaning |
|---|---|
| `help` | the flag's help text |
| `min` | integers: 1 → positive, 0 → non-negative; floats: 0 → positive |
| `choices`, `metavar`, `nargs`, `const` | as in argparse |
| `parse` | name of a parser in this module for values argparse cannot type (`parse_dag_weights`) |
| `cli` | False: not a flag (set by code, e.g. the Llama baseline's `architecture`) |
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


__all__ = ["SIZE_NAMES", "TINY_RUN", "TrainOptions", "parse_dag_weights"]

# the names of `plldr_hf.training.recipes.SIZES` (a test keeps them equal); here so the CLI needs no import of it
SIZE_NAMES = ("110m", "mini", "small", "tiny")

# what `--tiny` sets unless the flag is given explicitly
TINY_RUN = dict(
    size="tiny", max_steps=30, max_train_documents=2000, vocab_size=512, max_eval_blocks=32, logging_steps=5
)


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


def _opt(default=None, help: str = "", **meta):
    """A dataclass field with its command-line metadata (mutable defaults through a factory)."""
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: copy.copy(value), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainOptions:
    """Options of `train_causal_lm` and the flags of `plldr-hf train pldrllm`."""

    size: str = _opt("tiny", "model size (default: tiny)", choices=SIZE_NAMES)
    output_dir: str = _opt("pldrllm-run", "checkpoints, final model and report")
    dataset: list[str] = _opt(
        [],
        "local text/JSON/Parquet/CSV files or folders, or a Hugging Face dataset name "
        "(default: the embedded Shakespeare corpus)",
        nargs="+",
    )
    dataset_config: str | None = _opt(None, "configuration of a Hugging Face dataset")
    text_column: str = _opt("text", "text column of table files / Hub datasets")
    max_train_documents: int | None = _opt(None, "use only the first N documents", min=1)
    tokenizer: str | None = _opt(None, "existing tokenizer (path or Hub name) instead of training one")
    vocab_size: int | None = _opt(None, "tokenizer vocabulary (default: by size)", min=1)
    block_size: int | None = _opt(None, "tokens per training block (default: by size)", min=1)
    batch_size: int | None = _opt(None, "blocks per device and step (default: by size)", min=1)
    gradient_accumulation_steps: int = _opt(1, "default: 1", min=1)
    max_steps: int = _opt(100, "optimizer steps (default: 100)", min=1)
    learning_rate: float | None = _opt(None, "peak learning rate (default: 1e-3)", min=0)
    warmup_steps: int | None = _opt(None, "default: 10%% of the steps, at most 2000", min=0)
    clip_by: str = _opt("value", "gradient clipping at 1.0", choices=("value", "norm"))
    bf16: bool | None = _opt(None, "default: if the GPU supports it", action="boolean_optional")
    dag_weights: tuple[float, float, float] = _opt(
        (0.0, 0.0, 0.0),
        "DAG regulariser weights on A_LM, A_P, G_LM (one number: all three; default 0 = off)",
        parse="parse_dag_weights",
        metavar="A,P,G",
    )
    dag_warmup_steps: int = _opt(0, "linear ramp of the DAG weights", min=0)
    dag_form: str = _opt("log_ratio", "form of the DAG term (default: log_ratio)", choices=("log_ratio", "notears"))
    log_dag: bool = _opt(False, "log the DAG values even when their weights are 0")
    logging_steps: int = _opt(10, "default: 10", min=1)
    eval_steps: int | None = _opt(None, "default: every 20%% of the run; 0: only at the end", min=0)
    save_steps: int | None = _opt(None, "checkpoint interval (default: at the end)", min=1)
    save_total_limit: int | None = _opt(2, "checkpoints kept (default: 2)", min=1)
    max_eval_blocks: int | None = _opt(None, "cap on validation blocks", min=1)
    report_to: list[str] = _opt(["tensorboard"], "Trainer integrations, or none", nargs="+")
    resume: str | bool | None = _opt(
        None,
        "continue from the last checkpoint in --output-dir, or from CHECKPOINT",
        nargs="?",
        const="last",
        metavar="CHECKPOINT",
    )
    seed: int = _opt(0, "seed of the model init, data order and tokenizer (default: 0)", min=0)
    fsdp: bool = _opt(
        False,
        "shard parameters, gradients and optimizer state with FSDP2 (full shard, one decoder layer per unit); GPUs "
        "under torchrun or accelerate launch",
    )
    architecture: str = _opt("pldrllm", "pldrllm, or llama for the baseline of the same shape", cli=False)
    padding_free: bool = _opt(
        False,
        "one document per example, batches concatenated without padding (DataCollatorWithFlattening); "
        "each document keeps its own Gram matrix and attention (default: fixed packed blocks)",
    )

    def resolved(self) -> TrainOptions:
        """Fills the size-dependent defaults (block, batch, vocabulary, learning rate) and checks the values."""
        from plldr_hf.training.recipes import SIZES

        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; choose one of {sorted(SIZES)}")
        if self.architecture not in ("pldrllm", "llama"):
            raise ValueError(f"architecture must be 'pldrllm' or 'llama', got {self.architecture!r}")
        for name in ("max_steps", "logging_steps", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        preset = SIZES[self.size]
        out = copy.copy(self)
        out.block_size = self.block_size or preset["block_size"]
        out.batch_size = self.batch_size or preset["batch_size"]
        out.vocab_size = self.vocab_size or preset["vocab_size"]
        out.learning_rate = self.learning_rate or preset["learning_rate"]
        out.report_to = [r for r in self.report_to if r != "none"]
        out.dataset = list(self.dataset)
        out.dag_weights = tuple(float(w) for w in self.dag_weights)
        if len(out.dag_weights) != 3 or any(not w >= 0 for w in out.dag_weights):
            raise ValueError(f"dag_weights are three non-negative numbers (A_LM, A_P, G_LM), got {self.dag_weights}")
        if out.architecture == "llama" and any(out.dag_weights):
            raise ValueError("DAG weights apply to PLDR-LLM only; the llama baseline has no deductive outputs")
        return out
