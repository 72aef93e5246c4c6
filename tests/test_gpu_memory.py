"""Peak GPU memory of the fused AGF + PCM-V path grows linearly with the sequence length.

The flex path (`attn_implementation="flex_attention"`) never materialises a (B, H, L, L) score matrix, so the peak
memory of a training step (forward + backward) should grow like L; the eager reference keeps several score-sized
tensors per attention for backward and grows like L². With lengths L, 2L, 4L the ratio of the increments
(M(4L) − M(2L)) / (M(2L) − M(L)) is 2 for linear and 4 for quadratic growth. The eager path is measured as the
control that shows the check can tell them apart.

Needs CUDA (marked `gpu`, skipped elsewhere: the CPU build of torch 2.13 has no flex backward).
"""

import pytest
import torch

from plldr_hf import AgfForConditionalGeneration
from tests.utils import tiny_agf_config


LENGTHS = (512, 1024, 2048)
BATCH = 2


def _model(attn_implementation: str) -> AgfForConditionalGeneration:
    torch.manual_seed(0)
    # the tests' tiny AGF model, wider (head dim 32) and long enough for the memory curve
    config = tiny_agf_config(
        d_model=128, encoder_ffn_dim=256, decoder_ffn_dim=256, pcmv=True, max_position_embeddings=max(LENGTHS)
    )
    model = AgfForConditionalGeneration(config).cuda().train()
    model.set_attn_implementation(attn_implementation)
    return model


def _peak_step_memory(model: AgfForConditionalGeneration, length: int) -> int:
    """Peak bytes allocated above the resident model during one forward + backward at source = target = length."""
    generator = torch.Generator().manual_seed(length)
    input_ids = torch.randint(3, 99, (BATCH, length), generator=generator).cuda()
    labels = torch.randint(3, 99, (BATCH, length), generator=generator).cuda()

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=input_ids, labels=labels).loss.backward()
        model.zero_grad(set_to_none=True)

    step()  # compilation, workspaces and the caching allocator's first growth happen here
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - baseline


def _growth(peaks: list[int]) -> float:
    """(M(4L) − M(2L)) / (M(2L) − M(L)): 2 for linear growth, 4 for quadratic."""
    return (peaks[2] - peaks[1]) / (peaks[1] - peaks[0])


@pytest.mark.gpu
def test_flex_pcmv_training_peak_memory_grows_linearly_with_length():
    flex = _model("flex_attention")
    flex_peaks = [_peak_step_memory(flex, length) for length in LENGTHS]
    del flex
    torch.cuda.empty_cache()
    eager = _model("eager")
    eager_peaks = [_peak_step_memory(eager, length) for length in LENGTHS]

    report = (
        f"lengths {LENGTHS}: flex peaks {[p >> 20 for p in flex_peaks]} MiB (growth {_growth(flex_peaks):.2f}), "
        f"eager peaks {[p >> 20 for p in eager_peaks]} MiB (growth {_growth(eager_peaks):.2f})"
    )
    print(report)
    # the control: the materialised scores make the eager path grow quadratically
    assert _growth(eager_peaks) > 3.0, report
    assert _growth(flex_peaks) < 2.5, report
    # and at the longest length the fused step needs a fraction of what the eager one needs
    assert flex_peaks[-1] < eager_peaks[-1] / 4, report
