"""The output records of PLDR-LLM: the stock transformers outputs plus the PLGA tensors and the DAG terms."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast


@dataclass
class PldrllmModelOutput(BaseModelOutputWithPast):
    """Output of `PldrllmModel`: the stock fields plus the PLDR ones.

    `pldr_attentions[l]` is `(A, A_LM, A_P, G_LM)` of layer l, each (B or 1, H, d, d), when requested with
    `output_pldr_attentions=True`; `dag_losses` (N, 3) holds the DAG values of (A_LM, A_P, G_LM) per sequence (N =
    B, or the number of sequences of a packed batch),
    averaged over layers and heads, when they were computed; `sequence_ids` (B, S) is, for a packed batch, the
    sequence of each position (the rows of `dag_losses` are those sequences in (row, sequence) order), else None.
    """

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    dag_losses: torch.FloatTensor | None = None
    sequence_ids: torch.LongTensor | None = None


@dataclass
class PldrllmCausalLMOutput(CausalLMOutputWithPast):
    """Output of `PldrllmForCausalLM`, with labels: `loss = lm_loss + dag_loss`, the cross-entropy `lm_loss` and the
    DAG term `dag_loss` normalised alike (summed over label tokens, divided by `num_items_in_batch` when given, else
    by this batch's label tokens): dag_loss = Σ_i n_i·(w·dag_i) / N for sequences i with n_i label tokens and
    weights w (A_LM, A_P, G_LM). `dag_losses` (3,) is the unweighted value per tensor averaged over layers and heads
    and over sequences weighted by n_i (without labels: plain mean over sequences), so that
    loss = lm_loss + w·dag_losses when `num_items_in_batch` is not given. As Mixtral returns its router `aux_loss`."""

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    lm_loss: torch.FloatTensor | None = None
    dag_loss: torch.FloatTensor | None = None
    dag_losses: torch.FloatTensor | None = None
