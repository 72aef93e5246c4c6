"""Training pipelines built on the transformers `Trainer` (package-only code; the model files never import it).

- `run`: the one contract of a training run, `train(options) -> RunReport`, for both families;
- `options`: the options and named presets of both families (`TrainOptions`, `TranslationOptions`);
- `corpus`: the embedded corpora and translation datasets, local files or Hub datasets;
- `tokenizers`: SentencePiece tokenizers for both families; `preprocessing`: packing and seq2seq features;
- `recipes`: model configs of the named sizes and the `TrainingArguments` of each family's recipe;
- `causal_lm`: the PLDR-LLM pipeline, with `trainer` (`PldrTrainer`), `callbacks` and `checkpoints`;
- `dag_loss`: `DagLossCallback`, the DAG regulariser for any `Trainer` (TRL's included), and its `DagSchedule`;
- `run_data`: a run's data (corpus → tokenizer → model inputs) for both families;
- `seq2seq`: the AGF pipeline; `translation_trainer`: its `Seq2SeqTrainer` and `evaluate_translation`;
- `distributed`: FSDP2 settings and sharding helpers.

`run` and `options` import only the standard library; the other submodules import torch and transformers and are
imported when used (`plldr-hf --help` stays fast).
"""

from plldr_hf.training.options import TrainOptions, TranslationOptions
from plldr_hf.training.run import RunReport, train


__all__ = ["DagLossCallback", "RunReport", "TrainOptions", "TranslationOptions", "train"]


def __getattr__(name):
    # torch-importing names load on first use, so the command line reads this package without torch
    if name == "DagLossCallback":
        from plldr_hf.training.dag_loss import DagLossCallback

        return DagLossCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
