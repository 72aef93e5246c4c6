"""The PLDR-LLM code paths that exist for GPUs, against their CPU references (marked `gpu`; CI has no GPU, and
`tools/gpu_check.sh` runs them on one).

- bf16 autocast of a learned G: the PLGA tensors stay float32, and the logits stay near the float32 model's;
- the fused metric-learner units on CUDA: the values and gradients of the module path;
- `torch.compile` of the residual units on CUDA (`metric_learner_compile`): the eager model's logits and gradients.
"""

import pytest
import torch

from tests.utils import assert_close, tiny_model


pytestmark = pytest.mark.gpu


def _ids():
    return torch.randint(4, 99, (3, 11), generator=torch.Generator().manual_seed(0)).cuda()


def test_bf16_autocast_keeps_the_learned_g_in_float32():
    model = tiny_model("sdpa").cuda().eval()
    ids = _ids()
    with torch.no_grad():
        reference = model(ids, use_cache=False).logits
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(ids, use_cache=False, output_pldr_attentions=True)
    for layer in out.pldr_attentions:
        assert all(t.dtype == torch.float32 for t in layer), [t.dtype for t in layer]
    assert_close("bf16 autocast logits", reference, out.logits.float(), atol=5e-2, rtol=5e-2)


def test_fused_units_on_cuda_equal_the_module_path():
    from plldr_hf.models.pldrllm.modeling_pldrllm import metric_learner

    model = tiny_model().cuda().train()
    attention = model.decoder.dec_layers[0].mha1
    q = torch.randn(4, 2, 9, 16, device="cuda") / 4
    grads = {}
    for fused in (True, False):
        a0 = (q.transpose(-1, -2) @ q).requires_grad_(True)
        out = metric_learner(a0, attention.layernorm1, attention.reslayerAs, fused=fused, recompute=fused)
        out.square().sum().backward()
        grads[fused] = (out.detach(), a0.grad.clone(), [p.grad.clone() for p in attention.reslayerAs.parameters()])
        attention.zero_grad(set_to_none=True)
    assert_close("fused values", grads[False][0], grads[True][0], atol=1e-5)
    assert_close("fused input gradient", grads[False][1], grads[True][1], atol=1e-4, rtol=1e-4)
    for index, (ref, got) in enumerate(zip(grads[False][2], grads[True][2])):
        assert_close(f"fused parameter gradient {index}", ref, got, atol=1e-4, rtol=1e-4)


def test_compiled_metric_learner_on_cuda_equals_eager():
    eager = tiny_model().cuda().train()
    compiled = tiny_model(metric_learner_compile=True).cuda().train()
    compiled.load_state_dict(eager.state_dict())
    ids = _ids()
    results = []
    for model in (eager, compiled):
        out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        results.append((out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert_close("compiled logits", results[0][0], results[1][0], atol=1e-4, rtol=1e-4)
    for name, grad in results[0][1].items():
        assert_close(f"compiled grad {name}", grad, results[1][1][name], atol=1e-4, rtol=1e-3)
