"""Tensor parallelism: `from_pretrained(dir, tp_plan="auto")` under `torchrun --nproc_per_node 2` (gloo, CPU) gives
the one-rank logits and greedy tokens, for a learned G and a collapsed model; PLGA splits by heads."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from plldr_hf import PldrllmConfig, PldrllmForCausalLM
from plldr_hf.models.pldrllm.tensor_parallel import HEADS_STYLE, HeadsParallel
from tests.utils import REPO_ROOT, tiny_config


WORKER = REPO_ROOT / "tests" / "models" / "pldrllm" / "tp_worker.py"


def _model(collapsed: bool) -> PldrllmForCausalLM:
    torch.manual_seed(0)
    model = PldrllmForCausalLM(tiny_config(num_attention_heads=4, head_dim=8)).eval()
    if collapsed:
        model.collapse(force=True)  # a random model is not input-invariant: the frozen G is an approximation
    return model


@pytest.mark.parametrize("collapsed", [False, True], ids=["learned_G", "collapsed"])
def test_two_ranks_give_the_one_rank_logits_and_tokens(tmp_path, collapsed):
    model = _model(collapsed)
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "rank0.safetensors"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", str(WORKER)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [*command, str(tmp_path / "model"), str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # rank 0 computed heads 0-1 of 4 in every layer
    assert "heads of rank 0: [(0, 2)]" in result.stdout
    sharded = load_file(out)
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    # float32: the row-parallel projections sum their two halves in another order; with transformers 5.25 one logit
    # of 2,376 differs by 1.2e-5
    assert (sharded["logits"] - logits).abs().max() <= 2e-5
    assert torch.equal(sharded["tokens"], tokens)


def test_the_plan_splits_attention_by_heads_and_refuses_an_uneven_split():
    plan = PldrllmConfig().base_model_tp_plan
    assert plan["dec_layers.*.mha1"] == HEADS_STYLE
    assert {plan[f"dec_layers.*.mha1.{name}"] for name in ("wq", "wk", "wv")} == {"colwise"}
    attention = _model(False).decoder.dec_layers[0].mha1
    HeadsParallel().install_forward(attention, SimpleNamespace(size=lambda: 2, get_local_rank=lambda: 1))
    assert attention.head_slice == slice(2, 4)
    with pytest.raises(ValueError, match="num_attention_heads=4 is not divisible by tp_size=3"):
        HeadsParallel().install_forward(attention, SimpleNamespace(size=lambda: 3, get_local_rank=lambda: 0))
