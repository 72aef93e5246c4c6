"""float16 and bfloat16 loads keep the PLGA maths in float32: the metric learner, its LayerNorm and the PLGA
tensors stay float32 (transformers' `_keep_in_fp32_modules_strict`), the rest takes the requested dtype."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.utils import tiny_model


PLGA_PARTS = (".mha1.reslayerAs.", ".mha1.plgatt_layer.", ".mha1.layernorm1.")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_loads_keep_the_plga_tensors_in_float32(tmp_path, dtype):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    ids = torch.randint(4, 99, (2, 12), generator=torch.Generator().manual_seed(0))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype).eval()
    plga = {name: p.dtype for name, p in loaded.named_parameters() if any(part in name for part in PLGA_PARTS)}
    rest = {name: p.dtype for name, p in loaded.named_parameters() if name not in plga}
    assert plga and set(plga.values()) == {torch.float32}
    assert set(rest.values()) == {dtype}
    with torch.no_grad():
        logits = loaded(ids).logits
        state = loaded(ids, output_pldr_attentions=True).pldr_attentions[0]
    assert logits.dtype == dtype and torch.isfinite(logits).all()
    assert all(t.dtype == torch.float32 for t in state if t is not None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_model_built_in_half_precision_makes_its_plga_tensors_float32(dtype):
    """`from_config(dtype=...)` builds the modules under that default dtype: the metric learner's constructors name
    float32 themselves, as a load keeps them (transformers' test_keep_in_fp32_modules_strict_also_hardcode_fp32)."""
    config = tiny_model().config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plga = {name: p.dtype for name, p in model.named_parameters() if any(part in name for part in PLGA_PARTS)}
    rest = {name: p.dtype for name, p in model.named_parameters() if name not in plga}
    assert plga and set(plga.values()) == {torch.float32}
    assert set(rest.values()) == {dtype}
    ids = torch.randint(4, 99, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.isfinite(model.eval()(ids).logits).all()
