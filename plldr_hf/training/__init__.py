"""Training pipelines built on the transformers `Trainer` (package-only code; the model files never import it).

- `corpus`: the embedded corpora and translation datasets, local files or Hub datasets;
- `tokenizers`: SentencePiece tokenizers for both families; `preprocessing`: packing and seq2seq features;
- `recipes`: named sizes and the reference `TrainingArguments`; `options`: a PLDR-LLM run's options;
- `causal_lm`: the PLDR-LLM pretraining pipeline, with `trainer` (`PldrTrainer`), `callbacks` and `checkpoints`;
- `seq2seq`: `train_translation` / `evaluate_translation` for the AGF family with `Seq2SeqTrainer`;
- `distributed`: FSDP2 settings and sharding helpers.

Submodules import torch and transformers, so this package imports nothing eagerly (`plldr-hf --help` stays fast).
"""
