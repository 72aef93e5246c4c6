"""Fully sharded data parallel (FSDP2) for both families: one decoder (or encoder) layer per sharding unit.

On GPUs, Trainer / accelerate do the wrapping: `TrainOptions(fsdp=True)` sets `fsdp_config=fsdp_config(model)` (or
`accelerate launch --use_fsdp --fsdp_version 2 --fsdp_transformer_layer_cls_to_wrap PldrllmDecoderLayer ...`), which
shards every module whose class is in the model's `_no_split_modules` and then the root. accelerate enables FSDP
only for accelerator devices (its multi-CPU mode is DDP), so on a CPU `shard_model` applies the same policy with
torch's own `fully_shard` (it runs over gloo), and `full_state_dict` gathers the parameters for saving, which is
what the tests do.
"""

from __future__ import annotations


__all__ = ["decoder_layer_classes", "fsdp_config", "full_state_dict", "shard_model", "sharding_units"]


def sharding_units(model) -> list:
    """The modules that become one FSDP unit each: instances of the classes named in `_no_split_modules`
    (`PldrllmDecoderLayer`; `AgfEncoderLayer` and `AgfDecoderLayer`), in model order."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} names no `_no_split_modules`; cannot choose its FSDP units")
    return [module for module in model.modules() if type(module).__name__ in names]


def fsdp_config(model_or_layer_classes, **overrides) -> dict:
    """`TrainingArguments.fsdp_config` for FSDP2 full sharding with one layer per unit and a full (unsharded) state
    dict when saving, so checkpoints load into one process and keep the released format. Takes the model, or the
    names of its layer classes (before the model exists)."""
    if isinstance(model_or_layer_classes, (list, tuple)):
        layer_classes = sorted(model_or_layer_classes)
    else:
        layer_classes = sorted({type(module).__name__ for module in sharding_units(model_or_layer_classes)})
    config = {
        "version": 2,
        "reshard_after_forward": True,  # full shard (ZeRO-3)
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": layer_classes,
        "state_dict_type": "FULL_STATE_DICT",
        "cpu_ram_efficient_loading": False,
    }
    config.update(overrides)
    return config


def decoder_layer_classes(config) -> list[str]:
    """The class names of one FSDP unit of the model a config builds: the family's decoder layer, or Llama's for
    the comparison baseline (which has the same unit)."""
    from plldr_hf.models import FAMILIES

    if config.model_type in FAMILIES:
        return [FAMILIES[config.model_type].decoder_layer_class.__name__]
    from transformers import LlamaPreTrainedModel

    return list(LlamaPreTrainedModel._no_split_modules)


def shard_model(model, mesh=None, reshard_after_forward: bool = True):
    """`torch.distributed.fsdp.fully_shard` on every sharding unit, then on the root (the policy of `fsdp_config`);
    needs an initialised process group. Returns the model, sharded in place."""
    from torch.distributed.fsdp import fully_shard

    for module in sharding_units(model):
        fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def full_state_dict(model) -> dict:
    """Every parameter and buffer of a sharded model as full CPU tensors (collective: call it on every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
