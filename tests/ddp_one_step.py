"""One Trainer optimizer step of a tiny PLDR-LLM with the DAG term on; shared by the tests and run by torchrun.

`python -m torch.distributed.run --nproc_per_node 2 tests/ddp_one_step.py OUT.pt` trains one step with 2 CPU
processes (gloo) for each (per-device batch, accumulation) in `DDP_SETTINGS` and saves the parameters and the
logged values (rank 0) to OUT.pt. The single-process reference comes from `one_step(4, 1)` in the test. SGD without clipping or weight
decay, so the parameter change is the learning rate times the gradient: a wrong scaling of the DAG term under
accumulation or DDP (×2, ×4) shows directly (AdamW would normalise it away).
"""

import os
import sys
import tempfile

import torch


# label tokens of the 4 examples: packed blocks (every row full, the pretraining setting) and right-padded rows
PACKED = (8, 8, 8, 8)
PADDED = (8, 5, 3, 7)
SEQ_LEN = 9
DAG_WEIGHTS = (0.05, 0.05, 0.05)
DDP_SETTINGS = ((2, 1), (1, 2))


def tiny_model(seed=0, dag_weights=DAG_WEIGHTS, **config_overrides):
    """`tests.utils.tiny_config` with the DAG term on, seeded, in training mode."""
    from plldr_hf import PldrllmForCausalLM
    from tests.utils import tiny_config

    torch.manual_seed(seed)
    return PldrllmForCausalLM(tiny_config(dag_weights=dag_weights, **config_overrides))


def four_examples(label_tokens=PACKED):
    """4 sequences of length 9; labels −100 after the first `label_tokens[i] + 1` positions (right padding)."""
    from datasets import Dataset

    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(6, 99, (4, SEQ_LEN), generator=generator)
    labels = ids.clone()
    for row, tokens in enumerate(label_tokens):
        # labels[1:] are the targets; keep `tokens` of them
        labels[row, tokens + 1 :] = -100
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()})


def one_step(
    per_device_batch, grad_accum, dag_weights=DAG_WEIGHTS, label_tokens=PACKED, learning_rate=5e-5, output_dir=None
):
    """Parameters after one Trainer step (SGD, no clipping, no weight decay) from the same initialisation.

    The learning rate keeps the largest parameter change near 1e-2: float32 round-off in this model's PLGA
    gradients is ~3e-5 of the gradient (the power step A_LM^P near A_LM = ε amplifies it), already without the
    DAG term, so a 1e-6 comparison needs updates of that size. The DAG term still moves parameters by ~1e-2.
    """
    from transformers import TrainingArguments, default_data_collator

    from plldr_hf.training.trainer import PldrTrainer

    model = tiny_model(dag_weights=dag_weights)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    with tempfile.TemporaryDirectory(prefix="plldr_ddp_") as tmp:
        args = TrainingArguments(
            output_dir=output_dir or tmp,
            max_steps=1,
            per_device_train_batch_size=per_device_batch,
            gradient_accumulation_steps=grad_accum,
            learning_rate=learning_rate,
            optim="sgd",
            lr_scheduler_type="constant",
            weight_decay=0.0,
            max_grad_norm=0.0,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
            logging_steps=1,
            seed=0,
            dataloader_drop_last=False,
            **({"ddp_backend": "gloo"} if distributed else {}),
        )
        trainer = PldrTrainer(
            model=model, args=args, train_dataset=four_examples(label_tokens), data_collator=default_data_collator
        )
        trainer.train()
        log = [entry for entry in trainer.state.log_history if "loss" in entry]
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return params, log


def main(out_path):
    torch.set_num_threads(1)
    results = {}
    for b, ga in DDP_SETTINGS:
        results[f"{b}x{ga}"], results[f"{b}x{ga}-log"] = one_step(b, ga)
        results[f"{b}x{ga}-padded"] = one_step(b, ga, label_tokens=PADDED)[0]
    if int(os.environ.get("RANK", "0")) == 0:
        results["world_size"] = int(os.environ.get("WORLD_SIZE", "1"))
        torch.save(results, out_path)


if __name__ == "__main__":
    # run as a script by torchrun: make the repository importable as `tests.utils`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(sys.argv[1])
