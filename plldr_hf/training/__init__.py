"""Training pipelines built on the transformers `Trainer` (package-only code; the model files never import it).

- `run`: the one contract of a training run, `train(options) -> RunReport`, for both families;
- `options`: the options of both families, `TrainingArguments` subclasses (`TrainOptions`, `TranslationOptions`);
- `field_checks`: the check of one options field (type, range, choices; the message names the flag);
- `corpus`: the embedded corpora and translation datasets, local files or Hub datasets;
- `tokenizers`: SentencePiece tokenizers for both families; `preprocessing`: packing and seq2seq features;
- `recipes`: the recipe files (named sizes, their run settings) and the model configs they name;
- `start`: where a run starts (the checkpoint to resume and its checks, `init_from`, LoRA), for both families;
- `causal_lm`: the PLDR-LLM pipeline and its data, with `trainer` (`PldrTrainer`) and `callbacks`;
- `dag_loss`: `DagLossCallback`, the DAG regulariser for any `Trainer` (TRL's included), and its `DagSchedule`;
- `seq2seq`: the AGF pipeline, its data and test scores; `translation_trainer`: its `Seq2SeqTrainer` and `evaluate_translation`;
- `distributed`: FSDP2 settings and sharding helpers.

The submodules that train import their libraries when used.
"""

from plldr_hf.training.options import TrainOptions, TranslationOptions
from plldr_hf.training.run import RunReport, train


__all__ = ["DagLossCallback", "RunReport", "TrainOptions", "TranslationOptions", "train"]


def __getattr__(name):
    # the DAG callback's module loads on first use
    if name == "DagLossCallback":
        from plldr_hf.training.dag_loss import DagLossCallback

        return DagLossCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
