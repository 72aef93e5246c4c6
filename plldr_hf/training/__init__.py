"""Training pipelines built on the transformers `Trainer` (package-only code; the model files never import it).

- `data`: embedded corpora, translation datasets, joint subword tokenizer, seq2seq preprocessing;
- `seq2seq`: `train_translation` / `evaluate_translation` for the AGF family with `Seq2SeqTrainer`;
- `causal_lm`: the PLDR-LLM pretraining pipeline; `trainer` (`PldrTrainer`) and `callbacks` support it.

Submodules import torch and transformers, so this package imports nothing eagerly (`plldr-hf --help` stays fast).
"""
