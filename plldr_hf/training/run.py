"""One contract for a training run of either family: `train(options) -> RunReport`.

| what | where |
|---|---|
| the options of a run | `TrainOptions` (PLDR-LLM), `TranslationOptions` (AGF) in `training/options.py` |
| the family's pipeline | `causal_lm.train_causal_lm` (`TrainOptions`), `seq2seq.train_translation` (`TranslationOptions`) |
| what a run produced | `RunReport` (`training/report.py`), saved as `train_report.json` in the output folder |

`train` runs the family's pipeline and hands back its `RunReport`: the paths, scores,
timings and warnings of the run, with the same fields for both families. The command line, the quickstart, the
examples and the benchmarks read the report instead of files or dicts.

Example:
    >>> from plldr_hf.training import TrainOptions, train
    >>> report = train(TrainOptions.from_name("tiny", output_dir="runs/tiny"))  # doctest: +SKIP
    >>> report.scores["validation"]["perplexity"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

from plldr_hf.training.report import RunReport, collect_warnings


__all__ = ["RunReport", "collect_warnings", "train"]


def train(options, *, tokenizer=None, callbacks: Sequence = ()) -> RunReport:
    """Trains a model of either family and returns its `RunReport` (also saved as `train_report.json`).

    Args:
        options: `TrainOptions` (PLDR-LLM, or its Llama baseline) or `TranslationOptions` (AGF), e.g.
            `TrainOptions.from_name("tiny", output_dir="runs/tiny")`.
        tokenizer: an existing tokenizer object instead of `options.tokenizer` or a trained one.
        callbacks: extra `TrainerCallback`s (e.g. `TimeBudgetCallback`).

    Returns:
        The run's `RunReport` on the main process; on the other processes of a distributed run, a report without
        scores (only the main process evaluates and writes).
    """
    pipeline = pipeline_of(options)
    options.check()  # values assigned after construction too
    return pipeline(options, tokenizer=tokenizer, callbacks=tuple(callbacks))


def pipeline_of(options):
    """The training pipeline of `options`' family (its module imported): `train_causal_lm` or `train_translation`."""
    from plldr_hf.training.options import TrainOptions, TranslationOptions

    if isinstance(options, TrainOptions):
        from plldr_hf.training.causal_lm import train_causal_lm

        return train_causal_lm
    if isinstance(options, TranslationOptions):
        from plldr_hf.training.seq2seq import train_translation

        return train_translation
    raise TypeError(
        f"train() takes TrainOptions (PLDR-LLM) or TranslationOptions (AGF), got {type(options).__name__}; "
        "build them from a dict with TrainOptions(**settings) or TrainOptions.from_name('tiny', **settings)"
    )
