"""What a training run of either family produced: `RunReport`, saved as `train_report.json` in the run's folder, and
`collect_warnings`, which gathers what the package warned of during the run. The pipelines (`causal_lm`, `seq2seq`)
fill a report; `run.train` hands it back. Imports only the standard library.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any


__all__ = ["REPORT_FILE", "RunReport", "collect_warnings", "run_settings"]


def run_settings(options) -> dict:
    """The options as saved beside a run (`run_options.json`, the report): JSON values, tokens masked
    (`TrainingArguments.to_dict`)."""
    return json.loads(json.dumps(options.to_dict(), default=str))


REPORT_FILE = "train_report.json"


@dataclass
class RunReport:
    """What one training run produced, the same fields for both families (`train_report.json` holds all but the
    in-memory objects at the end).

    Args:
        family: the model family trained (`pldrllm`, `agf`).
        output_dir: the run's folder: checkpoints, final model and tokenizer, this report.
        options: the resolved options, as saved in the report.
        model_class: the class trained (`PldrllmForCausalLM`, `LlamaForCausalLM` for the baseline, ...).
        parameters: its parameter count.
        vocab_size: its tokenizer's size.
        global_step: optimizer steps run.
        max_steps: optimizer steps planned (None: a run of epochs).
        train_examples: training examples (packed blocks, documents or sentence pairs); None for a stream.
        eval_examples: validation examples scored at each evaluation.
        train_metrics: Trainer's training summary (`train_runtime`, `train_loss`, ...).
        eval_metrics: the last validation evaluation (`eval_loss`, ...).
        scores: named scores of the trained model: `"validation"` (PLDR-LLM: `perplexity`, `loss`, `blocks`,
            `tokens_per_block`) or one entry per test split (AGF: `evaluate_translation`'s scores).
        diagnostics: family-specific measurements (PLDR-LLM: the order parameters before and after training).
        seconds_per_step: wall seconds per optimizer step (`recipes.seconds_per_step`).
        step_timing: per-step timings of `StepTimerCallback`.
        loss_curves: the `loss_curves.png` written, or None with the reason in `loss_curves_skipped`.
        loss_curves_skipped: why no loss curves were plotted.
        stage_curves: PLDR-LLM with a learned G: `stages_over_training.png`, the relative spread across inputs of
            each PLGA stage at every evaluation (`plldr_hf.models.pldrllm.stages`); None with fewer than two.
        warnings: what the package warned of during the run (a tokenizer smaller than asked, ...).
        model: the trained model (in memory only).
        tokenizer: its tokenizer (in memory only).
        log_history: Trainer's log history (also in `log_history.json`).
        datasets: the raw splits the run read (in memory only; AGF: its test splits for example rows).
        main_process: whether this process is the one that evaluates and writes (the others of a distributed run
            return a report without scores, and save none).
    """

    family: str
    output_dir: str
    options: dict
    model_class: str
    parameters: int
    vocab_size: int
    global_step: int
    max_steps: int | None
    train_examples: int | None
    eval_examples: int
    train_metrics: dict = field(default_factory=dict)
    eval_metrics: dict = field(default_factory=dict)
    scores: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    seconds_per_step: float | None = None
    step_timing: dict = field(default_factory=dict)
    loss_curves: str | None = None
    loss_curves_skipped: str | None = None
    stage_curves: str | None = None
    warnings: list[str] = field(default_factory=list)
    model: Any = field(default=None, repr=False, compare=False, metadata={"saved": False})
    tokenizer: Any = field(default=None, repr=False, compare=False, metadata={"saved": False})
    log_history: list = field(default_factory=list, repr=False, compare=False, metadata={"saved": False})
    datasets: Any = field(default=None, repr=False, compare=False, metadata={"saved": False})
    main_process: bool = field(default=True, repr=False, compare=False, metadata={"saved": False})

    @property
    def path(self) -> Path:
        """`train_report.json` in the output folder."""
        return Path(self.output_dir, REPORT_FILE)

    @property
    def train_seconds(self) -> float | None:
        return self.train_metrics.get("train_runtime")

    def to_dict(self) -> dict:
        """The report's saved fields, JSON-ready (the scores without their hypotheses)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("saved", True)}
        out["scores"] = {
            name: {k: v for k, v in values.items() if k != "hypotheses"} for name, values in self.scores.items()
        }
        return out

    def save(self) -> Path:
        """Writes `train_report.json` (via a temporary file renamed into place, so a reader never sees half)."""
        temporary = self.path.with_name(f".{REPORT_FILE}.{os.getpid()}")
        temporary.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        temporary.replace(self.path)
        return self.path

    @classmethod
    def load(cls, folder: str | os.PathLike) -> RunReport:
        """The report saved in a run's folder; a missing, empty, truncated or foreign file is a ValueError that
        names it."""
        path = Path(folder, REPORT_FILE)
        if not path.is_file():
            raise ValueError(f"{path} does not exist: {folder} is not the folder of a finished training run")
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            raise ValueError(
                f"{path} is not a readable training report ({error}); the run may not have finished"
            ) from None
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        if not isinstance(saved, dict) or not required <= set(saved):
            missing = sorted(required - set(saved)) if isinstance(saved, dict) else "all"
            raise ValueError(f"{path} is not a training report (missing {missing})")
        return cls(**{k: v for k, v in saved.items() if k in known})


class _WarningCollector(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# library warnings about what a run's user did not write, hidden during the run: Trainer reads a checkpoint's
# config.json with the base `PreTrainedConfig`, whose `rope_scaling` setter warns about the released format's
# `rope_scaling: null` on every resume; peft asks the model `is_gradient_checkpointing`, which transformers 5.25
# deprecates
_NOT_THE_USERS = ("`rope_scaling` is deprecated", "`is_gradient_checkpointing` is deprecated")


@contextmanager
def collect_warnings():
    """Context manager around a training run: the WARNING records of the package's loggers (`plldr_hf.*`) while it
    is open, as the list it yields (they are still shown as usual); the libraries' `_NOT_THE_USERS` warnings are not
    shown."""
    handler = _WarningCollector()
    logging.getLogger("plldr_hf").addHandler(handler)
    try:
        with warnings.catch_warnings():
            for message in _NOT_THE_USERS:
                warnings.filterwarnings("ignore", message=message, category=FutureWarning)
            yield handler.messages
    finally:
        logging.getLogger("plldr_hf").removeHandler(handler)
