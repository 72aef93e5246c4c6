"""Evaluation metrics: detokenised corpus BLEU and chrF through sacrebleu, teacher-forced token accuracy, and the
perplexity of a causal LM.

- BLEU and chrF are sacrebleu's own corpus scores with its default settings (BLEU: 13a tokenisation, mixed case,
  exponential smoothing; chrF: character 6-grams, beta 2), computed on detokenised text. Every score carries
  sacrebleu's signature string, which is what makes a number comparable with published ones; print it with the
  score. `evaluate.load("sacrebleu")` fetches its script from the Hub, so sacrebleu is called directly;
  `plldr_hf/metrics/translation_scores/` wraps the same functions as a local `evaluate` module.
- Token accuracy is the fraction of non-ignored target tokens (labels != -100, EOS included, padding excluded) whose
  teacher-forced argmax prediction equals the label — the "accuracy" the AGF paper reports (arXiv 2603.04805).
- Perplexity is exp of the token-weighted mean cross-entropy: `perplexity` scores packed blocks
  (`plldr-hf evaluate`), `perplexity_from_metrics` reads it from Trainer's evaluation loss (the training reports).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


__all__ = [
    "CorpusScore",
    "corpus_bleu",
    "corpus_chrf",
    "perplexity",
    "perplexity_from_metrics",
    "translation_scores",
    "token_accuracy",
    "token_accuracy_counts",
]


@dataclass(frozen=True)
class CorpusScore:
    """One sacrebleu corpus score with its signature.

    Example:
        >>> score = corpus_bleu(["Das ist ein Test ."], ["Das ist ein Test ."])
        >>> round(score.score, 2), score.signature.startswith("nrefs:1|case:mixed")
        (100.0, True)
    """

    name: str
    score: float
    signature: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name}|{self.signature} = {self.score:.2f}"


def _reference_streams(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]):
    """Validates the inputs and returns sacrebleu's list of reference streams (one stream per reference set)."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be sequences of strings, not a single string")
    hypotheses = list(hypotheses)
    if not hypotheses:
        raise ValueError("cannot score an empty list of hypotheses")
    references = list(references)
    # a flat list of strings is one reference per segment; otherwise a list of reference streams
    streams = [references] if references and isinstance(references[0], str) else [list(s) for s in references]
    for i, stream in enumerate(streams):
        if len(stream) != len(hypotheses):
            raise ValueError(
                f"reference stream {i} has {len(stream)} segments but there are {len(hypotheses)} hypotheses"
            )
    for name, texts in (("hypotheses", hypotheses), *((f"reference stream {i}", s) for i, s in enumerate(streams))):
        bad = next((j for j, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"{name}[{bad}] is {type(texts[bad]).__name__}, expected str")
    return hypotheses, streams


def corpus_bleu(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], tokenize: str = "13a"
) -> CorpusScore:
    """Detokenised corpus BLEU (sacrebleu defaults) of `hypotheses` against one or more reference streams.

    Args:
        hypotheses: one detokenised system output per segment.
        references: one reference string per segment, or a list of reference streams for multi-reference BLEU.
        tokenize: sacrebleu tokeniser; `"13a"` is the WMT standard and sacrebleu's default.
    """
    import sacrebleu

    hypotheses, streams = _reference_streams(hypotheses, references)
    metric = sacrebleu.BLEU(tokenize=tokenize)
    result = metric.corpus_score(hypotheses, streams)
    return CorpusScore("BLEU", float(result.score), str(metric.get_signature()), str(result))


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]) -> CorpusScore:
    """Corpus chrF (sacrebleu defaults: character 6-grams, no word n-grams, beta 2)."""
    import sacrebleu

    hypotheses, streams = _reference_streams(hypotheses, references)
    metric = sacrebleu.CHRF()
    result = metric.corpus_score(hypotheses, streams)
    return CorpusScore("chrF2", float(result.score), str(metric.get_signature()), str(result))


def translation_scores(
    hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]
) -> dict[str, float | str]:
    """BLEU and chrF with their signatures, as a flat dict ready for `Trainer` metrics or JSON.

    Returns:
        `{"bleu": float, "chrf": float, "bleu_signature": str, "chrf_signature": str}`
    """
    bleu = corpus_bleu(hypotheses, references)
    chrf = corpus_chrf(hypotheses, references)
    return {"bleu": bleu.score, "chrf": chrf.score, "bleu_signature": bleu.signature, "chrf_signature": chrf.signature}


def token_accuracy_counts(predictions, labels, ignore_index: int = -100) -> tuple[int, int]:
    """(correct, total) over target positions whose label is not `ignore_index`.

    Args:
        predictions: predicted token ids `(B, S)`, or logits `(B, S, V)` (argmax is taken), aligned with `labels`
            (unshifted: position t predicts labels[:, t]).
        labels: gold token ids `(B, S)`, with `ignore_index` at padding.
    """
    predictions = np.asarray(predictions.detach().cpu() if hasattr(predictions, "detach") else predictions)
    labels = np.asarray(labels.detach().cpu() if hasattr(labels, "detach") else labels)
    if predictions.ndim == labels.ndim + 1:
        predictions = predictions.argmax(-1)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions of shape {predictions.shape} do not match labels of shape {labels.shape}")
    mask = labels != ignore_index
    return int((predictions[mask] == labels[mask]).sum()), int(mask.sum())


def token_accuracy(predictions, labels, ignore_index: int = -100) -> float:
    """Teacher-forced token accuracy: the fraction of non-ignored labels predicted exactly (see module docstring).

    Example:
        >>> token_accuracy([[5, 6, 7, 0]], [[5, 6, 9, -100]])
        0.6666666666666666
    """
    correct, total = token_accuracy_counts(predictions, labels, ignore_index)
    if total == 0:
        raise ValueError("no target tokens to score: every label equals ignore_index")
    return correct / total


def perplexity(model, tokenizer, data, *, batch_size: int = 8) -> dict:
    """Token-weighted cross-entropy and perplexity of a causal LM over `data`, a dataset of equal-length `input_ids`
    blocks (`pack_into_blocks` with `tokenizer`): every token after the first of a block is predicted from the ones
    before it. The PLDR-LLM family's evaluation entry point (the same arguments as every family's)."""
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    model.eval()
    device = next(model.parameters()).device
    total_loss, total_tokens = 0.0, 0
    for start in tqdm(range(0, len(data), batch_size), desc="perplexity"):
        ids = torch.tensor(data[start : start + batch_size]["input_ids"], device=device)
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[:, :-1].float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum")
        total_loss += loss.item()
        total_tokens += ids[:, 1:].numel()
    if total_tokens == 0:
        raise ValueError("no tokens to score: the data packed into zero blocks (use a smaller --block-size)")
    mean = total_loss / total_tokens
    return {"cross_entropy": mean, "perplexity": _exp(mean), "tokens": total_tokens, "blocks": len(data)}


def _exp(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")


def perplexity_from_metrics(metrics: dict, prefix: str = "eval") -> float:
    """exp of the evaluation cross-entropy (`{prefix}_lm_loss` when the DAG term is in `{prefix}_loss`)."""
    loss = metrics.get(f"{prefix}_lm_loss", metrics.get(f"{prefix}_loss"))
    if loss is None:
        raise KeyError(f"no {prefix}_lm_loss or {prefix}_loss in {sorted(metrics)}")
    return _exp(loss)
