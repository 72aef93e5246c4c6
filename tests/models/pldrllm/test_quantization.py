"""Quantization on CPU (torchao int8 weight-only, bitsandbytes 8- and 4-bit): the metric learner and the PLGA tensors
stay in full precision under every quantizer (`_keep_in_fp32_modules`, which the quantizers add to their skip list),
and a learned G's logits move about as much as an equal-size Llama's under the same quantizer."""

import warnings

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM, TorchAoConfig

from plldr_hf import PldrllmConfig, PldrllmForCausalLM


pytest.importorskip("torchao")  # the `dev` extra installs torchao and bitsandbytes
pytest.importorskip("bitsandbytes")

# widths that bitsandbytes' CPU 4-bit kernels take (multiples of 64)
WIDTHS = dict(vocab_size=512, hidden_size=128, num_attention_heads=2, head_dim=64, intermediate_size=384)
LAYERS = 2


def _moved(model):
    """Biases and LayerNorm weights off their initial 0 and 1, so that every tensor shapes the logits."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("quantization")
    pldr = PldrllmConfig(**WIDTHS, num_hidden_layers=LAYERS, A_dff=128, num_reslayerA=2, max_position_embeddings=128)
    llama = LlamaConfig(**WIDTHS, num_key_value_heads=2, num_hidden_layers=LAYERS, max_position_embeddings=128)
    for name, cls, config in (("pldrllm", PldrllmForCausalLM, pldr), ("llama", LlamaForCausalLM, llama)):
        torch.manual_seed(0)
        _moved(cls(config).eval()).save_pretrained(root / name)
    return root


QUANTIZERS = {
    "torchao_int8": lambda: TorchAoConfig(__import__("torchao.quantization").quantization.Int8WeightOnlyConfig()),
    "bnb_8bit": lambda: BitsAndBytesConfig(load_in_8bit=True),
    "bnb_4bit": lambda: BitsAndBytesConfig(load_in_4bit=True),
}


def _logit_error(folder, quantizer) -> tuple[float, float, nn.Module]:
    """(max |Δlogit|, max |logit|) of the quantized model against float32, and the quantized model."""
    ids = torch.randint(3, WIDTHS["vocab_size"], (4, 48), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = AutoModelForCausalLM.from_pretrained(folder).eval()
        quantized = AutoModelForCausalLM.from_pretrained(folder, quantization_config=QUANTIZERS[quantizer]()).eval()
        with torch.no_grad():
            reference, logits = full(ids).logits, quantized(ids).logits
    return (logits - reference).abs().max().item(), reference.abs().max().item(), quantized


@pytest.mark.parametrize("quantizer", sorted(QUANTIZERS))
def test_the_metric_learner_stays_full_precision_and_the_error_stays_near_llamas(folders, quantizer):
    error, scale, model = _logit_error(folders / "pldrllm", quantizer)
    llama_error, llama_scale, _ = _logit_error(folders / "llama", quantizer)
    attention = model.decoder.dec_layers[0].mha1
    # the quantizer ran on the projections, not on the metric learner or the PLGA tensors
    assert type(attention.wq) is not nn.Linear or type(attention.wq.weight) is not nn.Parameter
    for module in attention.reslayerAs.modules():
        if isinstance(module, nn.Linear):
            assert type(module) is nn.Linear and type(module.weight) is nn.Parameter
            assert module.weight.dtype == torch.float32
    assert attention.plgatt_layer.Wlst.dtype == torch.float32
    # relative to each model's logit scale (they differ: 2-3 for this PLDR-LLM, about 1.5 for the Llama)
    print(f"{quantizer}: PLDR-LLM {error:.4g} of {scale:.3g}, Llama {llama_error:.4g} of {llama_scale:.3g}")
    assert error / scale <= 2 * llama_error / llama_scale
