"""`PldrllmForCausalLM.collapse()` / `uncollapse()` / `to_fixed_g()` (`plldr_hf/models/pldrllm/collapse.py`):
collapsed ≡ uncollapsed for an input-invariant G, the collapsed forward is stock attention with q' = q_rot·G and a
plain KV cache, and collapsed / fixed-G checkpoints round-trip."""

import copy
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, CompileConfig, StaticCache
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from plldr_hf.models.pldrllm import modeling_pldrllm as mp
from plldr_hf.models.pldrllm import plga
from tests.utils import assert_close, make_invariant, tiny_model
from tests.utils import tiny_pldrllm_tokenizer as tiny_tokenizer


def input_ids(batch=2, length=11, seed=3):
    return torch.randint(4, 99, (batch, length), generator=torch.Generator().manual_seed(seed))


def invariant_model(**overrides):
    return make_invariant(tiny_model("sdpa", **overrides))


def generate_greedy(model, ids, **kwargs):
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        return_dict_in_generate=True,
        output_logits=True,
        **kwargs,
    )


def generation_cache(output):
    # transformers 5.24 renamed the output field `past_key_values` -> `cache`
    return output.cache if "cache" in type(output).__dataclass_fields__ else output.past_key_values


def forbid_metric_learner(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the metric learner / power-law step ran in a collapsed model")

    monkeypatch.setattr(mp.PldrllmAttention, "deductive_outputs", fail)
    monkeypatch.setattr(plga.PldrllmResidualUnit, "forward", fail)
    monkeypatch.setattr(plga.PldrllmPowerLawGraphLayer, "forward", fail)


@pytest.mark.parametrize("reference_rope", [True, False], ids=["interleaved", "neox"])
def test_invariant_model_collapses_without_force_and_keeps_logits(reference_rope):
    model = invariant_model(reference_rope=reference_rope)
    ids = input_ids()
    before = model(ids).logits
    report = model.collapse()
    assert report.invariant and not report.forced
    assert report.order_parameter["G_LM"] <= report.tolerance
    assert report.max_abs_logit_diff <= 1e-5 and report.argmax_agreement == 1.0
    assert model.config.collapsed and model.decoder.past_G_values_status.all()
    assert_close("collapsed logits", before, model(ids).logits, atol=1e-5, rtol=0)


def test_collapsed_greedy_generation_equals_uncollapsed():
    model = invariant_model()
    ids = input_ids(batch=1, length=7)
    cached = generate_greedy(model, ids)
    uncached = generate_greedy(model, ids, use_cache=False)
    model.collapse()
    collapsed = generate_greedy(model, ids)
    for name, ref in (("cached", cached), ("uncached", uncached)):
        assert torch.equal(collapsed.sequences, ref.sequences), name
        assert_close(
            f"step logits vs {name}", torch.stack(ref.logits), torch.stack(collapsed.logits), atol=1e-5, rtol=0
        )


def test_random_model_is_refused_with_the_order_parameter():
    model = tiny_model("sdpa")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="collapse\\(\\) refused") as info:
        model.collapse()
    message = str(info.value)
    assert not model.config.collapsed and not hasattr(model.decoder, "past_G_values")
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    # the message carries the measured number, the same that force=True reports
    forced = model.collapse(force=True)
    assert forced.forced and not forced.invariant and forced.order_parameter["G_LM"] > 1e-3
    assert f"G_LM {forced.order_parameter['G_LM']:.3g}" in message
    assert re.search(r"Tolerance on G_LM: 0\.001", message)


def test_fixed_g_and_double_collapse_are_rejected():
    with pytest.raises(ValueError, match="already has a fixed G"):
        tiny_model(custom_G_type="identity").collapse()
    model = invariant_model()
    with pytest.raises(ValueError, match="not collapsed"):
        model.uncollapse()
    with pytest.raises(ValueError, match="collapse\\(\\) the model first"):
        model.to_fixed_g()
    model.collapse()
    with pytest.raises(ValueError, match="already collapsed"):
        model.collapse()


def test_collapsed_forward_is_stock_sdpa_on_q_times_g(monkeypatch):
    model = invariant_model()
    model.collapse()
    forbid_metric_learner(monkeypatch)
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    queries = []

    def spy(module, query, *args, **kwargs):
        queries.append((module.layer_idx, query.detach().clone()))
        return sdpa(module, query, *args, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._local_mapping, "sdpa", spy)
    inputs = {}
    layer0 = model.decoder.dec_layers[0].mha1

    def grab_hidden(module, args):
        inputs.setdefault("hidden", args[0].detach().clone())

    layer0.register_forward_pre_hook(grab_hidden)
    ids = input_ids(batch=1, length=9)
    model(ids, use_cache=False)
    assert [idx for idx, _ in queries] == list(range(model.config.num_hidden_layers))
    # independent q' for layer 0: rotated queries times the frozen G of the buffer (slot 2)
    cfg = model.config
    hidden = inputs["hidden"]
    q = layer0.wq(hidden).view(1, 9, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
    cos, sin = mp.rope_cos_sin(torch.arange(9)[None], cfg)
    expected = mp.apply_rope_interleaved(q, cos, sin) @ model.decoder.past_G_values[0, 2]
    assert_close("q' = q_rot·G", expected, queries[0][1], atol=1e-6, rtol=1e-6)


def test_collapsed_generate_uses_a_plain_dynamic_cache(monkeypatch):
    model = invariant_model()
    model.collapse()
    forbid_metric_learner(monkeypatch)
    out = generate_greedy(model, input_ids(batch=2, length=7))
    cache = generation_cache(out)
    assert type(cache) is DynamicCache
    assert [type(layer) for layer in cache.layers] == [DynamicLayer] * model.config.num_hidden_layers
    assert not any(isinstance(layer, mp.PldrllmCacheLayer) for layer in cache.layers)


def test_collapsed_model_runs_with_static_cache(monkeypatch):
    model = invariant_model()
    ids = input_ids(batch=1, length=7)
    # a learned G needs the G-cache layers, which a StaticCache does not have
    with pytest.raises(ValueError, match="StaticCache"):
        model.generate(ids, max_new_tokens=2, do_sample=False, cache_implementation="static")
    model.collapse()
    dynamic = generate_greedy(model, ids)
    forbid_metric_learner(monkeypatch)
    static = generate_greedy(model, ids, cache_implementation="static")
    assert isinstance(generation_cache(static), StaticCache)
    assert torch.equal(static.sequences, dynamic.sequences)
    assert_close("static vs dynamic", torch.stack(dynamic.logits), torch.stack(static.logits), atol=1e-5, rtol=0)


def test_uncollapse_restores_the_original_outputs():
    # a random model forced to collapse changes its outputs, so restoring them is a real check
    model = tiny_model("sdpa")
    ids = input_ids()
    keys = set(model.state_dict())
    before = model(ids).logits
    generated = generate_greedy(model, ids[:1])
    model.collapse(force=True)
    assert (model(ids).logits - before).abs().max() > 1e-3
    assert model.uncollapse() is model
    assert not model.config.collapsed and set(model.state_dict()) == keys
    assert torch.equal(model(ids).logits, before)
    regenerated = generate_greedy(model, ids[:1])
    assert torch.equal(regenerated.sequences, generated.sequences)
    assert any(isinstance(layer, mp.PldrllmCacheLayer) for layer in generation_cache(regenerated).layers)


def test_collapsed_save_load_is_collapsed_and_bit_identical(tmp_path, monkeypatch):
    model = tiny_model("sdpa")
    model.collapse(force=True)
    ids = input_ids()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    assert type(loaded) is mp.PldrllmForCausalLM and loaded.config.collapsed
    assert torch.equal(loaded.decoder.past_G_values, model.decoder.past_G_values)
    forbid_metric_learner(monkeypatch)
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert torch.equal(generate_greedy(loaded, ids[:1]).sequences, generate_greedy(model, ids[:1]).sequences)
    monkeypatch.undo()
    # the learned weights travel too, so the reloaded model can be uncollapsed
    assert set(loaded.uncollapse().state_dict()) == set(tiny_model().state_dict())


def test_fixed_g_export_reloads_and_matches(tmp_path, monkeypatch):
    model = invariant_model()
    reference = model(input_ids()).logits
    model.collapse()
    model.save_pretrained(tmp_path / "collapsed")
    fixed = model.to_fixed_g()
    assert fixed.config.custom_G_type == "external" and not fixed.config.collapsed
    assert not any("reslayerAs" in k or "plgatt_layer" in k or "mha1.layernorm1" in k for k in fixed.state_dict())
    fixed.save_pretrained(tmp_path / "fixed")
    size = {name: (tmp_path / name / "model.safetensors").stat().st_size for name in ("collapsed", "fixed")}
    assert size["fixed"] < size["collapsed"]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "fixed", attn_implementation="sdpa").eval()
    assert loaded.config.custom_G_type == "external" and loaded.decoder.past_G_values_status.all()
    assert torch.equal(loaded.decoder.past_G_values, model.decoder.past_G_values)
    forbid_metric_learner(monkeypatch)
    ids = input_ids()
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert_close("fixed-G export vs uncollapsed", reference, loaded(ids).logits, atol=1e-5, rtol=0)
    assert torch.equal(generate_greedy(loaded, ids[:1]).sequences, generate_greedy(model, ids[:1]).sequences)


def test_collapse_with_calibration_texts_and_tokenizer():
    tokenizer = tiny_tokenizer()
    texts = ["the cat sat on the mat", "a dog ran far away over the hill", "the bird sang"]
    model = tiny_model("sdpa")
    first = torch.tensor([tokenizer(texts[0], add_special_tokens=False)["input_ids"]])
    g_first = torch.stack([layer[3][0] for layer in model(first, output_pldr_attentions=True).pldr_attentions])
    with pytest.raises(ValueError, match="tokenizer"):
        model.collapse(texts)
    report = model.collapse(texts, tokenizer=tokenizer, force=True)
    assert report.num_calibration == len(texts)
    # the frozen G is the one of the first calibration text
    assert torch.equal(model.decoder.past_G_values[:, 2, 0], g_first)
    invariant = invariant_model()
    assert invariant.collapse(texts, tokenizer=tokenizer).invariant


def test_collapse_refuses_peft_adapters_until_merged():
    from peft import LoraConfig, get_peft_model

    base = invariant_model()
    peft_model = get_peft_model(base, LoraConfig(r=2, target_modules=["wq", "wv"], init_lora_weights=False))
    ids = input_ids()
    with pytest.raises(ValueError, match="PEFT adapters.*merge_and_unload"):
        peft_model.collapse()
    with pytest.raises(ValueError, match="PEFT adapters"):
        peft_model.get_base_model().collapse()
    merged = peft_model.merge_and_unload()
    reference = merged(ids).logits
    assert merged.collapse().invariant
    assert_close("merged then collapsed", reference, merged(ids).logits, atol=1e-5, rtol=0)


def test_generate_speed_benchmark_quick_mode(tmp_path):
    # numbers are reported, not asserted: this only checks that the --quick run works end to end
    from benchmarks import generate_speed

    output = tmp_path / "speed.md"
    assert generate_speed.main(["--quick", "--output", str(output)]) == 0
    table = output.read_text()
    for label in (
        "collapsed",
        "KV + G cache",
        "no cache",
        "Llama",
        "collapsed/llama",
        "collapsed/uncollapsed",
        "collapsed/no_cache",
    ):
        assert label in table


def test_collapsed_generate_with_static_cache_compiles_fullgraph():
    # the collapsed forward has no data-dependent shapes or branches, so the decode step is one graph
    model = tiny_model("sdpa")
    model.collapse([[model.config.eos_token_id], [5, 6, 7, 8]], force=True)
    ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]])
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    reference = model.generate(ids, **kwargs)
    compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
    compile_config._compile_all_devices = True  # transformers compiles generate() on accelerators only by default
    compiled = model.generate(ids, cache_implementation="static", compile_config=compile_config, **kwargs)
    assert torch.equal(compiled, reference)


def test_collapse_changes_no_other_model_sharing_the_config():
    # models built from one config object share it; collapsing one must not make the other look collapsed (it has
    # no frozen G buffers), in every way a second model can come to share or copy the state
    config = tiny_model().config
    learned, other = mp.PldrllmForCausalLM(config).eval(), mp.PldrllmForCausalLM(config).eval()
    other.load_state_dict(learned.state_dict())
    copied = copy.deepcopy(learned)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    before = learned(ids).logits
    other.collapse(ids.repeat(2, 1), force=True)
    assert other.config.collapsed and not config.collapsed and not learned.config.collapsed
    assert all(module.config is other.config for module in other.modules() if hasattr(module, "config"))
    for model in (learned, copied):
        assert torch.equal(model(ids).logits, before)
        assert model.generate(ids, max_new_tokens=3, do_sample=False).shape == (1, 8)
    other.uncollapse()
    assert not other.config.collapsed and torch.equal(other(ids).logits, before)
    collapsed_copy = copy.deepcopy(other)
    collapsed_copy.collapse(ids.repeat(2, 1), force=True)
    assert not other.config.collapsed and torch.equal(other(ids).logits, before)


def test_vllm_reads_a_fixed_g_as_plain_attention_and_transformers_sees_no_layer_types():
    """vLLM reads `layer_types` to decide whether a folder keeps per-request state (a learned G) or is a plain
    transformer (a fixed G); the vLLM plugin sets it on the config class in vLLM's processes only, because
    transformers' `generate` changes the masks it hands a model whose config has the attribute."""
    from plldr_hf.serving.vllm_plugin import vllm_layer_types

    model = make_invariant(tiny_model("sdpa", num_hidden_layers=3))
    assert not hasattr(model.config, "layer_types")
    with pytest.raises(AttributeError, match="per-request G state"):
        vllm_layer_types(model.config)
    model.collapse(force=True)
    assert vllm_layer_types(model.config) == ["full_attention"] * 3
    assert not hasattr(model.config, "layer_types")
