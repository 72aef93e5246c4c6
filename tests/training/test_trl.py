"""The DAG regulariser through transformers' and TRL's own trainers: `DagLossCallback` with the stock `Trainer`
(bf16 autocast on the CPU included) and with TRL's `SFTTrainer` in its default `SFTConfig` (bf16 on), LoRA and the
callback's `compute_loss`."""

import pytest
import torch
from peft import LoraConfig, TaskType
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

from plldr_hf.training import DagLossCallback
from plldr_hf.training.dag_loss import DAG_LOG_NAMES, DAG_WEIGHT_FIELDS
from tests.ddp_one_step import DAG_WEIGHTS, four_examples
from tests.utils import tiny_model, tiny_pldrllm_tokenizer


trl = pytest.importorskip("trl")


class _SeenLogs(TrainerCallback):
    """What a callback after the DAG callback (a logger) is handed in `on_log`."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def _train_args(tmp_path, **overrides):
    fields = dict(
        max_steps=3, per_device_train_batch_size=2, learning_rate=1e-2, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    fields.update(overrides)
    return TrainingArguments(str(tmp_path), **fields)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_stock_trainer_takes_the_dag_callback(tmp_path, precision):
    def run(weights):
        torch.manual_seed(0)
        model = tiny_model().train()
        dag, seen = DagLossCallback(weights), _SeenLogs()
        trainer = Trainer(
            model=model,
            args=_train_args(tmp_path / str(weights), bf16=precision == "bf16"),
            train_dataset=four_examples(),
            data_collator=default_data_collator,
            callbacks=[dag, seen],
        )
        trainer.train()
        return [e for e in trainer.state.log_history if "loss" in e], [e for e in seen.logs if "loss" in e], model

    with_dag, seen, model = run(DAG_WEIGHTS)
    without, _, _ = run((0.0, 0.0, 0.0))
    assert len(with_dag) == 3 and all(torch.isfinite(torch.tensor(e["loss"])) for e in with_dag)
    for entry in with_dag + seen:
        assert {"lm_loss", *DAG_LOG_NAMES, *DAG_WEIGHT_FIELDS} <= set(entry), entry
        assert entry["loss"] > entry["lm_loss"]
    # the DAG term changed the training: losses after the first step differ from the run without it
    assert [e["lm_loss"] for e in with_dag][1:] != pytest.approx([e["lm_loss"] for e in without][1:], rel=1e-6)
    assert model.config.dag_weights == (0.0, 0.0, 0.0)  # the schedule went in per call


def test_bf16_autocast_keeps_the_plga_maths_in_float32():
    model = tiny_model()
    ids = torch.randint(4, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(ids, output_pldr_attentions=True)
    assert mixed.logits.dtype == torch.bfloat16  # the rest of the model did run in bf16
    for layer in mixed.pldr_attentions:
        for got in layer:
            # A, A_LM, A_P, G_LM float32 (their inputs, the queries, come from bf16 projections, so values move)
            assert got.dtype == torch.float32 and torch.isfinite(got).all()


def _sft_dataset():
    from datasets import Dataset

    words = "the a cat dog sat on mat and ran far away over hill bird sang".split()
    generator = torch.Generator().manual_seed(1)
    texts = [" ".join(words[i] for i in torch.randint(0, len(words), (12,), generator=generator)) for _ in range(16)]
    return Dataset.from_dict({"text": texts})


def test_trl_sft_trainer_with_default_config_lora_and_the_dag_term(tmp_path):
    tokenizer = tiny_pldrllm_tokenizer()
    defaults = trl.SFTConfig(str(tmp_path / "defaults"), use_cpu=True)
    assert defaults.bf16, "SFTConfig's default is bf16 mixed precision"

    def run(weights):
        torch.manual_seed(0)
        model = tiny_model(vocab_size=len(tokenizer)).train()
        dag, seen = DagLossCallback(weights), _SeenLogs()
        args = trl.SFTConfig(
            str(tmp_path / str(weights)), max_steps=3, per_device_train_batch_size=4, logging_steps=1,
            learning_rate=1e-2, report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="no", seed=0,
            max_length=16,
        )  # fmt: skip
        trainer = trl.SFTTrainer(
            model=model,
            args=args,
            train_dataset=_sft_dataset(),
            processing_class=tokenizer,
            peft_config=LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, target_modules=["wq", "wk", "wv", "dense"]),
            callbacks=[dag, seen],
            compute_loss_func=dag.compute_loss,
        )
        assert trainer.args.bf16
        trainer.train()
        return [e for e in trainer.state.log_history if "loss" in e], [e for e in seen.logs if "loss" in e]

    with_dag, seen = run(DAG_WEIGHTS)
    without, _ = run((0.0, 0.0, 0.0))
    assert len(with_dag) == 3
    for entry in seen:
        assert {"lm_loss", *DAG_LOG_NAMES, *DAG_WEIGHT_FIELDS} <= set(entry), entry
        weights = tuple(entry[name] for name in DAG_WEIGHT_FIELDS)
        assert weights == pytest.approx(DAG_WEIGHTS)
        # one process, one micro-batch: loss = CE + Σ w·dag (the loss in bf16 autocast, so to its precision)
        total = entry["lm_loss"] + sum(w * entry[name] for w, name in zip(weights, DAG_LOG_NAMES))
        assert total == pytest.approx(entry["loss"], rel=1e-2)
        assert entry["loss"] > entry["lm_loss"]
    assert [e["loss"] for e in with_dag] != pytest.approx([e["loss"] for e in without], rel=1e-4)
