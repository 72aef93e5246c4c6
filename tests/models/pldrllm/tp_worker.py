"""One rank of `test_tensor_parallel.py`: load a saved PLDR-LLM with `tp_plan="auto"` and write rank 0's logits and
greedy tokens (run under `torchrun --nproc_per_node 2`, gloo on CPU)."""

import sys

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

import plldr_hf  # noqa: F401  (registers the model family)


def main(folder: str, out: str) -> None:
    torch.manual_seed(0)
    # transformers' current spelling (`tp_plan="auto"` alone is deprecated in 5.25)
    from transformers import DistributedConfig

    model = AutoModelForCausalLM.from_pretrained(folder, distributed_config=DistributedConfig(tp_plan="auto")).eval()
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a left-padded row beside a full one
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    heads = {name: module.head_slice for name, module in model.named_modules() if name.endswith("mha1")}
    if dist.get_rank() == 0:
        save_file({"logits": logits.contiguous(), "tokens": tokens.contiguous()}, out)
        print("heads of rank 0:", sorted({(s.start, s.stop) for s in heads.values()}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
