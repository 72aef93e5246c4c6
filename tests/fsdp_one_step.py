"""One SGD step of the tiny PLDR-LLM (DAG term on) under FSDP2 full sharding; run by torchrun, shared by the test.

`python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_one_step.py OUT_DIR` shards the model with
`plldr_hf.training.distributed.shard_model` (one decoder layer per unit, gloo on CPU), gives each rank half of the
4-example batch, takes one step and writes (rank 0) the gathered parameters to OUT_DIR/params.pt and the model, saved
with `save_pretrained` from the gathered state dict, to OUT_DIR/model. `one_step_reference()` is the same step in
one process on the whole batch.
"""

import os
import sys

import torch


LEARNING_RATE = 5e-5


def _batch():
    from tests.ddp_one_step import PADDED, four_examples

    data = four_examples(PADDED)
    return torch.tensor(data["input_ids"]), torch.tensor(data["labels"])


def _step(model, input_ids, labels, num_items: int, scale: float = 1.0) -> None:
    # the loss is normalised by the label tokens of the whole batch (Trainer's `num_items_in_batch`); FSDP averages
    # the gradients over ranks, so each rank's loss is scaled by the world size, as Trainer does under DDP
    loss = model(input_ids=input_ids, labels=labels, num_items_in_batch=num_items).loss * scale
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= LEARNING_RATE * param.grad


def _num_items(labels) -> int:
    return int((labels[:, 1:] != -100).sum())


def one_step_reference() -> dict:
    """Parameters after the step in one process (same init, whole batch)."""
    from tests.ddp_one_step import tiny_model

    model = tiny_model()
    input_ids, labels = _batch()
    _step(model, input_ids, labels, _num_items(labels))
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def main(out_dir: str) -> None:
    import torch.distributed as dist

    from plldr_hf.training.distributed import full_state_dict, shard_model
    from tests.ddp_one_step import tiny_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = shard_model(tiny_model())
    input_ids, labels = _batch()
    rows = slice(rank * len(input_ids) // world, (rank + 1) * len(input_ids) // world)
    _step(model, input_ids[rows], labels[rows], _num_items(labels), scale=float(world))
    sharded = type(next(model.parameters())).__name__
    state = full_state_dict(model)
    if rank == 0:
        os.makedirs(out_dir, exist_ok=True)
        torch.save({"params": state, "world_size": world, "param_type": sharded}, os.path.join(out_dir, "params.pt"))
        fresh = tiny_model()
        fresh.load_state_dict(state, strict=True)
        fresh.save_pretrained(os.path.join(out_dir, "model"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    # run as a script by torchrun: make the repository importable as `tests.*`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(sys.argv[1])
