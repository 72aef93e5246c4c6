"""The FLOP counts behind the benchmarks' bounds (`benchmarks/flops.py`) against torch's own counter
(`torch.utils.flop_counter.FlopCounterMode`) on the real models, and the GEMM list the suite's floor replays against
the products the fused metric learner really makes."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import flops, generate_speed, suite
from plldr_hf.models.pldrllm import fused_units, modeling_pldrllm, plga


BATCH, LENGTH = 2, 24


@pytest.fixture(scope="module")
def models():
    sizes = dict(suite.pldr_sizes("quick"), new_tokens=0)
    built = generate_speed.build_models(sizes, ["uncollapsed", "llama"], prompt_len=0)
    return built["uncollapsed"], built["llama"], suite.random_ids(BATCH, LENGTH, sizes["vocab_size"], seed=3)


def _body(config) -> float:
    """The shared body's forward FLOPs without the attention term (torch has no FLOP formula for SDPA on a CPU)."""
    return flops.main_forward_flops(config, BATCH, LENGTH) - flops.attention_flops(config, BATCH, LENGTH)


def _counted(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def test_forward_counts_equal_torch_flop_counter(models):
    pldr, llama, ids = models
    config = pldr.config
    body, extra = _body(config), flops.metric_learner_flops(config, BATCH, LENGTH)
    with torch.no_grad():
        assert _counted(lambda: llama(input_ids=ids, use_cache=False)) == body
        assert _counted(lambda: pldr(input_ids=ids, use_cache=False)) == body + sum(extra.values())


def test_training_count_is_three_forwards(models):
    pldr, llama, ids = models
    config = pldr.config
    body, extra = _body(config), sum(flops.metric_learner_flops(config, BATCH, LENGTH).values())

    def step(model):
        model.train()
        try:
            model(input_ids=ids, labels=ids).loss.backward()
        finally:
            model.zero_grad(set_to_none=True)
            model.eval()

    assert _counted(lambda: step(llama)) == 3 * body
    # the module path (a hook on every unit), activations stored: autograd's backward makes out-of-place products,
    # which the counter sees (it has no formula for the fused path's in-place `addmm_`)
    suite.configure_pldr(pldr, "pldr_store")
    units = [m for m in pldr.modules() if isinstance(m, plga.PldrllmResidualUnit)]
    hooks = [unit.register_forward_hook(lambda *args: None) for unit in units]
    try:
        assert _counted(lambda: step(pldr)) == 3 * (body + extra)
    finally:
        for hook in hooks:
            hook.remove()
        suite.configure_pldr(pldr, "pldr")


def test_serving_bound_is_the_ratio_torch_counts_for_a_served_batch(monkeypatch):
    """Prompts of two lengths, each prefilled with its logits at the last position (`logits_to_keep=1`, as a serving
    engine samples), then decoded from its KV and G caches: torch's count of the learned model's products over the
    collapsed model's is the serving bound (the attention term left out on both sides, as above)."""
    sizes = dict(suite.pldr_sizes("quick"), new_tokens=0)
    built = generate_speed.build_models(sizes, ["uncollapsed", "collapsed"], prompt_len=0)
    prompts, new_tokens = [LENGTH, 7], 4

    def served(model) -> int:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            for i, length in enumerate(prompts):
                ids = suite.random_ids(1, length, sizes["vocab_size"], seed=i)
                cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
                for _ in range(new_tokens - 1):
                    step = suite.random_ids(1, 1, sizes["vocab_size"], seed=i)
                    cache = model(input_ids=step, past_key_values=cache).past_key_values
        return counter.get_total_flops()

    learned, collapsed = served(built["uncollapsed"]), served(built["collapsed"])
    assert learned > collapsed
    monkeypatch.setattr(flops, "attention_flops", lambda *args, **kwargs: 0)
    bound = flops.serving_bound(built["uncollapsed"].config, prompts, new_tokens)
    assert bound == pytest.approx(collapsed / learned, rel=1e-12)


def test_a_causal_prefill_sees_what_its_tokens_would_see_one_by_one(models):
    """A causal prefill's attention count is the sum of decoding its tokens one at a time; a decode step's count is
    the same causal or not (one token sees the whole context)."""
    config = models[0].config
    one_by_one = sum(flops.attention_flops(config, BATCH, 1, t) for t in range(1, LENGTH + 1))
    assert flops.attention_flops(config, BATCH, LENGTH, causal=True) == one_by_one
    assert flops.attention_flops(config, BATCH, 1, 30, causal=True) == flops.attention_flops(config, BATCH, 1, 30)
    later = sum(flops.attention_flops(config, BATCH, 1, t) for t in range(11, LENGTH + 1))
    assert flops.attention_flops(config, BATCH, LENGTH - 10, LENGTH, causal=True) == later


class _ProductShapes(TorchDispatchMode):
    """(m, k, n) of every mm / addmm / addmm_ dispatched."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.addmm_):
            left, right = (args[0], args[1]) if packet is torch.ops.aten.mm else (args[1], args[2])
            self.shapes.append((left.shape[0], left.shape[1], right.shape[1]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("backward", [False, True])
def test_gemm_list_is_what_the_fused_units_compute(models, backward):
    pldr, _, _ = models
    config = pldr.config
    attention = pldr.decoder.dec_layers[0].mha1
    block = 40  # several row blocks and a shorter last one: 2 × 4 heads × 16 rows = 128 rows
    a0 = torch.randn(BATCH, config.num_attention_heads, config.head_dim, config.head_dim)
    recorder = _ProductShapes()
    original = fused_units.FUSED_BLOCK_ROWS
    fused_units.FUSED_BLOCK_ROWS = block
    try:
        with torch.set_grad_enabled(backward):
            a = a0.clone().requires_grad_(backward)
            with recorder:
                out = modeling_pldrllm.metric_learner(a, attention.layernorm1, attention.reslayerAs, recompute=True)
                if backward:
                    out.sum().backward()
    finally:
        fused_units.FUSED_BLOCK_ROWS = original
        pldr.zero_grad(set_to_none=True)
    one_layer = flops.unit_gemm_shapes(config, BATCH, backward=backward, recompute=True, block=block)
    one_layer = one_layer[: len(one_layer) // config.num_hidden_layers]
    assert sorted(recorder.shapes) == sorted(one_layer)


def test_gemm_list_flops_match_the_counts(models):
    config = models[0].config
    units = flops.metric_learner_flops(config, BATCH, LENGTH)["units"]

    def total(**kwargs):
        return sum(2 * m * k * n for m, k, n in flops.unit_gemm_shapes(config, BATCH, block=50, **kwargs))

    assert total(backward=False, recompute=True) == units
    assert total(backward=True, recompute=False) == 3 * units
    assert total(backward=True, recompute=True) == pytest.approx((3 + 2 / 3) * units)
