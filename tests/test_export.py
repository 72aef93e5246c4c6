"""Export without the eager Python: `torch.export` and ONNX (run in onnxruntime) of both families, with dynamic batch
and lengths, checked against eager on other shapes than the traced ones. A learned G's metric learner runs as one
block in a traced graph, so the graph is not specialised to the traced batch size."""

import warnings

import numpy as np
import pytest
import torch
from torch.export import Dim, export

from plldr_hf import PldrllmForCausalLM
from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS
from tests.utils import Seq2SeqLogits, tiny_agf, tiny_config


onnxruntime = pytest.importorskip("onnxruntime")  # the `dev` extra installs it, with onnx and onnxscript


class _CausalLogits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _pldrllm(collapsed: bool) -> PldrllmForCausalLM:
    torch.manual_seed(0)
    model = PldrllmForCausalLM(tiny_config()).eval()
    # exponents P around 1: the initial draw puts them around 0, where A_LM^P of entries near ε amplifies float32
    # rounding about 700-fold (a 1e-7 relative change of the embeddings moves the logits by 7e-5), and onnxruntime's
    # Pow rounds differently from torch's (3.6e-3 apart at the logits then; eager float32 is 1.6e-4 from float64)
    with torch.no_grad():
        for layer in model.decoder.dec_layers:
            layer.mha1.plgatt_layer.pwlst.normal_(1.0, 0.1, generator=torch.Generator().manual_seed(1))
    if collapsed:
        model.collapse(force=True)
    return model


def _padded(batch: int, length: int, pad: int, seed: int):
    ids = torch.randint(3, 99, (batch, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[-1, :pad] = 0  # the last row left-padded
    return ids, mask


def _onnx_logits(path, inputs: dict) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {name: value.numpy() for name, value in inputs.items()})[0]


# batch up to 64: the metric learner's row blocks of a CPU forward (1,024 rows, 64 × 2 heads × 16 rows here) would
# otherwise fix the traced graph to the traced batch's block count
BATCH, LENGTH = Dim("batch", min=1, max=64), Dim("length", min=2, max=64)


@pytest.mark.parametrize("collapsed", [False, True], ids=["learned_G", "collapsed"])
def test_pldrllm_exports_with_dynamic_batch_and_length(tmp_path, collapsed):
    model = _CausalLogits(_pldrllm(collapsed))
    shapes = ({0: BATCH, 1: LENGTH}, {0: BATCH, 1: LENGTH})
    traced = _padded(2, 7, 2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = export(model, traced, dynamic_shapes=shapes)
        torch.onnx.export(model, traced, tmp_path / "model.onnx", dynamo=True, dynamic_shapes=shapes, verbose=False)
    for batch, length, pad in ((3, 11, 3), (40, 5, 1)):  # 40 rows: past the traced batch's row blocks
        ids, mask = _padded(batch, length, pad, seed=batch)
        with torch.no_grad():
            expected = model(ids, mask)
            assert torch.equal(program.module()(ids, mask), expected)
        got = _onnx_logits(tmp_path / "model.onnx", {"input_ids": ids, "attention_mask": mask})
        # the logits of padding positions are not defined (SDPA and onnxruntime fill fully masked rows differently)
        real = mask.bool().numpy()
        assert np.abs(got - expected.numpy())[real].max() <= 1e-5


@pytest.mark.parametrize("variant", ["agf", "agf+pcmv", "alibi", "t5", "sinusoidal"])
def test_agf_exports_to_onnx_with_dynamic_batch_and_lengths(tmp_path, variant):
    torch.manual_seed(0)
    model = Seq2SeqLogits(tiny_agf(**POSITION_VARIANTS[variant][1]).eval())
    ids, mask = _padded(2, 6, 2, seed=0)
    target = Dim("target", min=2, max=64)
    shapes = ({0: BATCH, 1: LENGTH}, {0: BATCH, 1: LENGTH}, {0: BATCH, 1: target})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (ids, mask, torch.randint(3, 99, (2, 5))), tmp_path / "model.onnx", dynamo=True,
            dynamic_shapes=shapes, verbose=False,
        )  # fmt: skip
    ids, mask = _padded(3, 9, 3, seed=1)
    decoder_ids = torch.randint(3, 99, (3, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(ids, mask, decoder_ids).numpy()
    inputs = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder_ids}
    assert np.abs(_onnx_logits(tmp_path / "model.onnx", inputs) - expected).max() <= 1e-5


def test_exported_pldrllm_keeps_the_position_bound(tmp_path):
    """Eager refuses a sequence past the reference RoPE table (`max_position_embeddings`); so does the export:
    `torch.export` refuses a length range past it, its program refuses a longer input, and the ONNX graph reads the
    positions through an index of the table's length, which onnxruntime refuses past the end."""
    torch.manual_seed(0)
    model = _CausalLogits(PldrllmForCausalLM(tiny_config(max_position_embeddings=16)).eval())
    traced = _padded(2, 7, 0, seed=0)
    long = _padded(2, 24, 0, seed=1)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=16"):
        model(*long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match=r"l <= 64.*L\['input_ids'\]\.size\(\)\[1\] <= 16"):
            export(model, traced, dynamic_shapes=({0: BATCH, 1: Dim("l", min=2, max=64)},) * 2)
        within = ({0: BATCH, 1: Dim("l", min=2, max=16)},) * 2
        program = export(model, traced, dynamic_shapes=within)
        torch.onnx.export(model, traced, tmp_path / "model.onnx", dynamo=True, dynamic_shapes=within, verbose=False)
    fits = _padded(2, 16, 0, seed=2)
    with torch.no_grad():
        assert torch.equal(program.module()(*fits), model(*fits))
    with pytest.raises(Exception, match=r"<= 16"):
        program.module()(*long)
    ids, mask = long
    with pytest.raises(Exception, match="invalid index"):
        _onnx_logits(tmp_path / "model.onnx", {"input_ids": ids, "attention_mask": mask})
