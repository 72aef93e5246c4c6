"""FSDP2 full sharding, one decoder layer per unit, 2 CPU processes (gloo): the step equals one process, and the
gathered checkpoint reloads into one process in the released format.

accelerate turns FSDP on only for accelerator devices (on CPUs its multi-process mode is DDP), so the Trainer path
(`TrainingArguments(fsdp=True, fsdp_config=fsdp_config(model))`) is checked here for its configuration, and the
sharding itself with torch's `fully_shard` under the same policy (`plldr_hf.training.distributed.shard_model`).
"""

import os
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, TrainingArguments

from plldr_hf.training.distributed import fsdp_config, sharding_units
from tests.ddp_one_step import tiny_model
from tests.fsdp_one_step import one_step_reference
from tests.utils import REPO_ROOT, assert_close, tiny_agf


HELPER = REPO_ROOT / "tests" / "fsdp_one_step.py"


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HELPER)]
    proc = subprocess.run([*command, str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return out, torch.load(out / "params.pt")


def test_two_sharded_processes_give_the_single_process_step(fsdp_run):
    _, result = fsdp_run
    assert result["world_size"] == 2 and result["param_type"] == "DTensor"
    reference = one_step_reference()
    assert set(result["params"]) >= set(reference)
    initial = dict(tiny_model().named_parameters())
    moved = 0
    for name, value in reference.items():
        assert_close(name, value, result["params"][name], atol=1e-6, rtol=0)
        moved += int(not torch.equal(value, initial[name]))
    assert moved > len(reference) // 2  # the step changed most parameters, so the comparison means something


def test_gathered_checkpoint_reloads_in_one_process_in_the_released_format(fsdp_run):
    out, result = fsdp_run
    model = AutoModelForCausalLM.from_pretrained(out / "model").eval()
    for name, param in model.named_parameters():
        assert torch.equal(param, result["params"][name]), name
    with safe_open(str(out / "model" / "model.safetensors"), framework="pt") as weights:
        keys = set(weights.keys())
    # the released tensor names: decoder.dec_layers.L.mha1.{wq, reslayerAs, plgatt_layer}..., final_layer
    assert "decoder.dec_layers.0.mha1.plgatt_layer.pwlst" in keys and "final_layer.weight" in keys
    assert not any("_fsdp" in key or "_orig_mod" in key for key in keys)


def test_trainer_fsdp_config_shards_one_layer_per_unit():
    pldr, agf = tiny_model(), tiny_agf()
    assert [type(m).__name__ for m in sharding_units(pldr)] == ["PldrllmDecoderLayer"] * 2
    assert sorted({type(m).__name__ for m in sharding_units(agf)}) == ["AgfDecoderLayer", "AgfEncoderLayer"]
    config = fsdp_config(pldr)
    args = TrainingArguments(output_dir="unused", fsdp=True, fsdp_config=config, report_to="none", use_cpu=True)
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2 and plugin["transformer_cls_names_to_wrap"] == "PldrllmDecoderLayer"
    assert plugin["state_dict_type"] == "FULL_STATE_DICT" and args.fsdp_config["reshard_after_forward"] is True


def test_fsdp_flag_sets_the_trainer_configuration_or_names_why_not(tmp_path, monkeypatch):
    from plldr_hf.training.options import TrainOptions

    assert not TrainOptions(output_dir=str(tmp_path)).fsdp
    with pytest.raises(ValueError, match="--fsdp needs GPUs"):
        TrainOptions(output_dir=str(tmp_path), fsdp=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    for architecture, unit in (("pldrllm", "PldrllmDecoderLayer"), ("llama", "LlamaDecoderLayer")):
        options = TrainOptions(output_dir=str(tmp_path), fsdp=True, architecture=architecture, use_cpu=True)
        assert options.fsdp and options.fsdp_config["transformer_layer_cls_to_wrap"] == [unit]
