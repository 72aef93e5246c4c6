"""Padding, batching and packing never change a learned-G PLDR-LLM's numbers.

The Gram matrix of a learned-G model spans the positions of a call; these tests pin that pads stay out of it, that
positions follow the attention mask, and that sequences packed into one row get their own Gram matrix and attention.
"""

import pytest
import torch
from transformers import DataCollatorWithFlattening

from tests.utils import assert_close, tiny_model


LENGTHS = (5, 9, 7)
PAD = 0


def _sequences(generator_seed=1):
    g = torch.Generator().manual_seed(generator_seed)
    return [torch.randint(4, 99, (n,), generator=g) for n in LENGTHS]


def _pad(sequences, side):
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), PAD)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for i, seq in enumerate(sequences):
        span = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        ids[i, span], mask[i, span] = seq, 1
    return ids, mask


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_equal_rows_alone(side, attn_implementation):
    model = tiny_model(attn_implementation)
    sequences = _sequences()
    ids, mask = _pad(sequences, side)
    with torch.no_grad():
        batch = model(ids, attention_mask=mask, use_cache=False, output_pldr_attentions=True)
        for i, seq in enumerate(sequences):
            alone = model(seq[None], use_cache=False, output_pldr_attentions=True)
            real = mask[i].bool()
            assert_close(f"row {i} ({side})", alone.logits[0], batch.logits[i, real])
            assert_close(f"G_LM row {i}", alone.pldr_attentions[1][3][0], batch.pldr_attentions[1][3][i])
    # the reference behaviour (pads inside the Gram matrix) stays available and differs
    reference = tiny_model(attn_implementation, reference_padding=True)
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        ref = reference(ids, attention_mask=mask, use_cache=False).logits
    shortest = LENGTHS.index(min(LENGTHS))
    real = mask[shortest].bool()
    alone = model(sequences[shortest][None], use_cache=False).logits[0]
    assert (ref[shortest, real] - alone).abs().max() > 1e-3


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("num_beams", [1, 2])
@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_generation_equals_each_row_alone(use_cache, num_beams, attn_implementation):
    model = tiny_model(attn_implementation)
    sequences = _sequences(2)
    ids, mask = _pad(sequences, "left")
    settings = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=num_beams, use_cache=use_cache)
    out = model.generate(ids, attention_mask=mask, pad_token_id=PAD, **settings)
    for i, seq in enumerate(sequences):
        alone = model.generate(seq[None], attention_mask=torch.ones(1, len(seq), dtype=torch.long), **settings)
        assert out[i, -6:].tolist() == alone[0, -6:].tolist(), f"row {i}"


def test_packed_batch_equals_sequences_alone_and_may_exceed_the_position_table():
    model = tiny_model(max_position_embeddings=32)
    g = torch.Generator().manual_seed(3)
    sequences = [torch.randint(4, 99, (n,), generator=g) for n in (30, 25, 20)]
    batch = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": s.tolist()} for s in sequences])
    assert batch["input_ids"].shape[1] == 75 > model.config.max_position_embeddings
    with torch.no_grad():
        packed = model(batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        start = 0
        for seq in sequences:
            alone = model(seq[None], use_cache=False).logits[0]
            assert_close(f"packed sequence at {start}", alone, packed[start : start + len(seq)])
            start += len(seq)
    # a position beyond the table is still refused
    with pytest.raises(ValueError, match="max_position_embeddings=32"):
        model(torch.randint(4, 99, (1, 33)), use_cache=False)


def test_packed_loss_equals_padded_loss_with_the_dag_term():
    model = tiny_model(dag_weight_a_lm=0.1, dag_weight_a_p=0.05, dag_weight_g_lm=0.1)
    sequences = _sequences(4)
    flat = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": s.tolist()} for s in sequences])
    ids, mask = _pad(sequences, "right")
    labels = ids.masked_fill(mask == 0, -100)
    n_items = int((labels[:, 1:] != -100).sum())
    assert n_items == int((flat["labels"][:, 1:] != -100).sum())
    for num_items in (None, torch.tensor(n_items)):
        kwargs = {} if num_items is None else {"num_items_in_batch": num_items}
        padded = model(ids, attention_mask=mask, labels=labels, use_cache=False, **kwargs)
        packed = model(
            flat["input_ids"], position_ids=flat["position_ids"], labels=flat["labels"], use_cache=False, **kwargs
        )
        assert_close("CE", padded.lm_loss, packed.lm_loss)
        # the per-sequence Gram matrices are summed in another order (einsum): A_P's power law (values ≈ 20) turns
        # the float32 rounding into ≈ 2e-5 relative
        assert_close("loss with DAG term", padded.loss, packed.loss, atol=1e-4, rtol=1e-4)


def test_loss_honours_shift_labels():
    model = tiny_model()
    ids = torch.randint(4, 99, (2, 8))
    labels = ids.clone()
    shifted = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    plain = model(ids, labels=labels, use_cache=False).loss
    assert_close("shift_labels = shifted labels", plain, model(ids, shift_labels=shifted, use_cache=False).loss)
    other = shifted.clone()
    other[:, :3] = -100
    assert (model(ids, labels=labels, shift_labels=other, use_cache=False).loss - plain).abs() > 1e-4


@pytest.mark.parametrize("side", ["left", "right"])
def test_without_a_mask_pad_ids_are_padding(side):
    # lm-evaluation-harness right-pads with id 0 and passes no attention mask
    model = tiny_model()
    sequences = _sequences()
    ids, mask = _pad(sequences, side)
    with torch.no_grad():
        unmasked = model(ids, use_cache=False).logits
        masked = model(ids, attention_mask=mask, use_cache=False).logits
    assert_close("no mask = mask from pad ids", masked[mask.bool()], unmasked[mask.bool()])


def test_pad_id_shared_with_eos_is_not_guessed():
    # a pad id that is also EOS can be real text: without a mask every position counts
    model = tiny_model(pad_token_id=3, eos_token_id=3)
    ids = torch.tensor([[5, 6, 7, 3, 3]])
    with torch.no_grad():
        unmasked = model(ids, use_cache=False).logits
        all_real = model(ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        masked = model(ids, attention_mask=torch.tensor([[1, 1, 1, 0, 0]]), use_cache=False).logits
    assert_close("every position counts", all_real, unmasked)
    assert (masked[0, :3] - unmasked[0, :3]).abs().max() > 1e-4
