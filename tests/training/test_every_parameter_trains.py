"""The recipes tell DDP that every trainable parameter takes part in every forward (`ddp_find_unused_parameters=False`:
no graph search per step, no warning). That holds for every model a `train` command builds: each position encoding
of the translator (PCM-V and a learned AGF base included), the PLDR-LLM with and without DAG weights, and the Llama
baseline. A parameter without a gradient would make DDP fail at its second step."""

import itertools

import pytest
import torch

import plldr_hf  # noqa: F401
from plldr_hf import AgfForConditionalGeneration, PldrllmForCausalLM
from plldr_hf.models.agf.position_encodings import POSITION_ENCODINGS
from plldr_hf.training.options import TrainOptions, TranslationOptions
from plldr_hf.training.recipes import agf_config, llama_config_like, pldrllm_config


def _unused(model, loss) -> list[str]:
    loss.backward()
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


VARIANTS = [(pe, False, False) for pe in POSITION_ENCODINGS] + [("agf", True, False), ("agf", True, True)]


@pytest.mark.parametrize("position, pcmv, learn_base", VARIANTS)
def test_every_translator_parameter_gets_a_gradient(position, pcmv, learn_base):
    torch.manual_seed(0)
    config = agf_config("tiny", position_encoding=position, pcmv=pcmv, vocab_size=50, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)  # fmt: skip
    if learn_base:
        config.agf_learn_base = True
    model = AgfForConditionalGeneration(config)
    ids, labels = torch.randint(3, 50, (2, 7)), torch.randint(3, 50, (2, 5))
    assert _unused(model, model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss) == []


@pytest.mark.parametrize("dag, llama", list(itertools.product((0.0, 0.1), (False, True)))[:3])
def test_every_causal_lm_parameter_gets_a_gradient(dag, llama):
    torch.manual_seed(0)
    config = pldrllm_config("tiny", 50, dag_weight_a_lm=dag, dag_weight_a_p=dag, dag_weight_g_lm=dag)
    model = (
        __import__("transformers").LlamaForCausalLM(llama_config_like(config)) if llama else PldrllmForCausalLM(config)
    )
    ids = torch.randint(3, 50, (2, 9))
    assert _unused(model, model(input_ids=ids, labels=ids).loss) == []


def test_the_recipes_say_so(tmp_path):
    assert TranslationOptions(output_dir=str(tmp_path)).ddp_find_unused_parameters is False
    assert TrainOptions(output_dir=str(tmp_path)).ddp_find_unused_parameters is False
