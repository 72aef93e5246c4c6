"""Behaviour both families share with in-tree Transformers models, in this repo's own tests.

The same properties are also checked by transformers' own common tests (`tests/transformers_common/run.py`, opt-in).
"""

import warnings

import pytest
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from plldr_hf import AgfForConditionalGeneration, AgfModel
from plldr_hf.models.agf.modeling_agf import CACHE_NAME
from tests.utils import assert_close, tiny_model
from tests.utils import tiny_agf as tiny_agf_model


def tiny_agf(**overrides) -> AgfForConditionalGeneration:
    return tiny_agf_model(dropout=0.0, position_encoding="agf", pcmv=True, **overrides)


def test_agf_inputs_embeds_equal_input_ids():
    # the √d embedding scale lives in the embedding module, so get_input_embeddings()(ids) is what input_ids give
    model = tiny_agf()
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    embed = model.get_input_embeddings()
    with torch.no_grad():
        by_ids = model(input_ids=src, decoder_input_ids=tgt).logits
        by_embeds = model(inputs_embeds=embed(src), decoder_inputs_embeds=embed(tgt)).logits
    assert_close("inputs_embeds vs input_ids", by_ids, by_embeds, atol=1e-6, rtol=1e-6)
    assert embed.embed_scale == pytest.approx(32**0.5)


def test_agf_decoder_without_encoder_states_is_causal_and_skips_cross_attention():
    model = AgfModel(tiny_agf().config).eval()
    ids = torch.tensor([[1, 8, 9, 10, 11]])
    changed = ids.clone()
    changed[0, -1] = 40
    with torch.no_grad():
        out = model.decoder(input_ids=ids, use_cache=False, output_attentions=True)
        other = model.decoder(input_ids=changed, use_cache=False).last_hidden_state
    # a later token does not change the earlier outputs
    assert_close("earlier positions", out.last_hidden_state[:, :-1], other[:, :-1], atol=1e-6, rtol=1e-6)
    assert all(a is None for a in out.cross_attentions)


@pytest.mark.parametrize("family", ["pldrllm", "agf"])
def test_old_cache_name_warns_and_gives_the_same_result(family):
    if family == "pldrllm":
        model = tiny_model()
        inputs = {"input_ids": torch.tensor([[5, 6, 7]]), "use_cache": True}

        def empty():
            return DynamicCache(config=model.config)
    else:
        model = tiny_agf()
        inputs = {
            "input_ids": torch.tensor([[5, 6, 7, 2]]),
            "decoder_input_ids": torch.tensor([[1, 8]]),
            "use_cache": True,
        }

        def empty():
            return EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))

    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = model(**inputs, past_key_values=empty()).logits
    # deprecated where transformers renamed it (5.24); before, it is the installed name and nothing warns
    deprecated = any("`past_key_values` is deprecated" in str(w.message) for w in caught)
    assert deprecated == (CACHE_NAME == "cache")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new = model(**inputs, cache=empty()).logits
    assert not any("deprecated" in str(w.message) for w in caught)
    assert_close("old vs new cache name", old, new)
    with pytest.raises(ValueError, match="not both"):
        model(**inputs, cache=empty(), past_key_values=empty())
