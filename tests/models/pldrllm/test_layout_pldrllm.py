"""`call_layout`: one test per case it tells apart (its module docstring), and transformers' padded-vs-packed check
with pad ids inside the text.

transformers' `test_eager_padding_matches_padding_free_with_position_ids` (and the sdpa variant) runs a left-padded
batch with its mask, then the same sequences packed into one row with restarting `position_ids` and no mask, and
compares the logits of the real tokens. Its random ids contain id 0, the pad id. Here its steps run in float32 over
many draws, each with id 0 inside every sequence, for eager and SDPA. The two calls run matrix products of other
shapes, and a random-weight metric learner amplifies their float32 rounding: 25 draws give at most 2.3e-4 here
(before packing was read off the positions first, the pad ids made a mask that merged the packed sequences: 3.2).
"""

import pytest
import torch

from plldr_hf.models.pldrllm.layout import call_layout
from tests.utils import assert_close, tiny_config, tiny_model


PAD = 0


def _layout(config, input_ids=None, attention_mask=None, position_ids=None, past_len=0, **kwargs):
    batch, seq_len = input_ids.shape
    return call_layout(
        config,
        input_ids,
        attention_mask,
        position_ids,
        batch=batch,
        seq_len=seq_len,
        past_len=past_len,
        device=input_ids.device,
        **kwargs,
    )


def test_packed_row_keeps_its_sequences_apart_whatever_its_text():
    ids = torch.tensor([[5, PAD, 7, 8, PAD, 9]])
    positions = torch.tensor([[0, 1, 2, 0, 1, 0]])
    layout = _layout(tiny_config(), ids, position_ids=positions)
    assert layout.packed
    assert layout.plga.segment_ids.tolist() == [[0, 0, 0, 1, 1, 2]] and layout.plga.num_segments == 3
    # the pad ids are text here: no mask is made from them, every token enters its sequence's Gram matrix
    assert layout.attention_mask is None and layout.plga.gram_weights is None
    assert layout.position_ids.tolist() == positions.tolist()


def test_unmasked_pads_get_a_mask_from_the_pad_ids():
    ids = torch.tensor([[5, 6, 7], [8, PAD, PAD]])
    layout = _layout(tiny_config(), ids)
    assert layout.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert layout.plga.gram_weights.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert not layout.packed
    # a pad id that is also the eos token can be real text: no mask, and transformers' warning is asked for
    warned = []
    shared = _layout(tiny_config(eos_token_id=PAD), ids, warn_unmasked=warned.append)
    assert shared.attention_mask is None and len(warned) == 1


def test_a_2d_mask_sets_positions_and_gram_weights():
    ids = torch.tensor([[PAD, PAD, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    layout = _layout(tiny_config(), ids, attention_mask=mask)
    assert layout.position_ids.tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    assert layout.plga.gram_weights.tolist() == mask.tolist()
    # a fixed G has no Gram matrix: positions still follow the mask
    fixed = _layout(tiny_config(custom_G_type="identity"), ids, attention_mask=mask)
    assert fixed.plga.gram_weights is None and fixed.position_ids.tolist() == layout.position_ids.tolist()


def test_plain_call_continues_the_cache():
    ids = torch.tensor([[5], [6]])
    layout = _layout(tiny_config(), ids, past_len=7)
    assert layout.position_ids.tolist() == [[7], [7]]
    assert not layout.packed and layout.attention_mask is None
    # pads in a decode step are not inferred (the cache holds the prompt's layout)
    assert _layout(tiny_config(), torch.tensor([[PAD]]), past_len=3).attention_mask is None


def test_reference_padding_turns_inference_off():
    config = tiny_config(reference_padding=True)
    ids = torch.tensor([[5, PAD, 7, 8]])
    mask = torch.tensor([[0, 1, 1, 1]])
    assert _layout(config, ids).attention_mask is None
    layout = _layout(config, ids, attention_mask=mask)
    assert layout.plga.gram_weights is None and layout.position_ids.tolist() == [[0, 1, 2, 3]]
    assert not _layout(config, ids, position_ids=torch.tensor([[0, 1, 0, 1]])).packed


def test_reference_rope_length_is_checked_on_the_longest_position():
    config = tiny_config(reference_rope=True, max_position_embeddings=8)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=8"):
        _layout(config, torch.tensor([[5, 6]]), past_len=7)
    # a packed row longer than the table is fine while each sequence fits
    row = torch.arange(10)[None] % 5 + 4
    assert _layout(config, row, position_ids=torch.tensor([[0, 1, 2, 3, 4] * 2])).packed


def test_dag_form_only_for_a_learned_g():
    ids = torch.tensor([[5, 6]])
    assert _layout(tiny_config(), ids, output_dag_losses=True).plga.dag_form == "log_ratio"
    assert _layout(tiny_config(custom_G_type="identity"), ids, output_dag_losses=True).plga.dag_form is None


def _padded_vs_packed(model, ids, mask):
    with torch.no_grad():
        padded = model(ids, attention_mask=mask, use_cache=False).logits[mask.bool()]
        lengths = mask.sum(1).tolist()
        positions = torch.cat([torch.arange(n) for n in lengths])[None]
        packed = model(ids[mask.bool()][None], position_ids=positions, use_cache=False).logits[0]
    return padded, packed


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padding_matches_padding_free_with_pad_ids_in_the_text(attn_implementation):
    worst = 0.0
    for draw in range(25):
        torch.manual_seed(draw)
        model = tiny_model(attn_implementation)
        g = torch.Generator().manual_seed(draw)
        ids = torch.randint(0, 99, (4, 7), generator=g)
        ids[:, -2] = PAD  # every sequence holds the pad id as text
        lengths = torch.randint(2, 8, (4,), generator=g)
        mask = (torch.arange(7)[None] >= 7 - lengths[:, None]).long()
        padded, packed = _padded_vs_packed(model, ids, mask)
        worst = max(worst, (padded - packed).abs().max().item())
        assert_close(f"draw {draw}", padded, packed, atol=1e-3, rtol=1e-4)
    print(f"{attn_implementation}: max |Δlogit| over 25 draws {worst:.2e}")
