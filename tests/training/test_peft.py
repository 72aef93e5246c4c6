"""PEFT LoRA on PLDR-LLM: q/k/v/o and the PLGA tensors, the DAG gradient into the adapters, Trainer with the DAG
callback, merge before collapse, and the FFN-only regex."""

import pytest
import torch
from peft import LoraConfig, TaskType, get_peft_model
from transformers import TrainingArguments, default_data_collator

from plldr_hf import PldrllmForCausalLM
from plldr_hf.training.trainer import DAG_LOG_NAMES, DagSchedule, PldrTrainer
from tests.ddp_one_step import DAG_WEIGHTS, four_examples, tiny_model
from tests.utils import assert_close


PLGA = ("Wlst", "blst", "pwlst", "alst", "balst")
FFN_REGEX = r".*\.ffn\.gluw[123]"


def lora_config(num_layers=2, **overrides):
    fields = dict(
        task_type=TaskType.CAUSAL_LM,
        r=4,
        lora_alpha=8,
        target_modules=["wq", "wk", "wv", "dense"],
        target_parameters=[
            f"decoder.dec_layers.{i}.mha1.plgatt_layer.{name}" for i in range(num_layers) for name in PLGA
        ],
    )
    fields.update(overrides)
    return LoraConfig(**fields)


def _ids():
    return torch.randint(6, 99, (2, 9), generator=torch.Generator().manual_seed(3))


def test_lora_targets_attention_and_plga_tensors_only():
    peft_model = get_peft_model(tiny_model(), lora_config())
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    for projection in ("wq", "wk", "wv", "dense"):
        assert any(f"mha1.{projection}.lora_A" in n for n in names), projection
    assert sum("plgatt_layer" in n and "lora_B" in n for n in names) == 2 * len(PLGA)
    assert not any("reslayerAs" in n or ".ffn." in n for n in names)


def test_ffn_regex_skips_the_metric_learner_glus():
    peft_model = get_peft_model(tiny_model(), LoraConfig(task_type=TaskType.CAUSAL_LM, r=2, target_modules=FFN_REGEX))
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert len(names) == 2 * 3 * 2  # layers × (gluw1, gluw2, gluw3) × (lora_A, lora_B)
    assert all(".ffn.gluw" in n for n in names)


def test_dag_gradient_reaches_the_plga_adapters():
    peft_model = get_peft_model(tiny_model(), lora_config())
    ids = _ids()
    out = peft_model(input_ids=ids, labels=ids)
    # only the DAG values: their gradient can reach a PLGA adapter only if the DAG terms are computed inside
    # plgatt_layer.forward (outside it, module.Wlst is the frozen base tensor)
    out.dag_losses.sum().backward()
    plga_grads = {n: p.grad for n, p in peft_model.named_parameters() if "plgatt_layer" in n and "lora_B" in n}
    assert len(plga_grads) == 2 * len(PLGA)
    for name, grad in plga_grads.items():
        assert grad is not None and torch.isfinite(grad).all(), name
    assert sum(grad.abs().sum() for grad in plga_grads.values()) > 0


def test_trainer_with_dag_callback_trains_lora_then_merge_then_collapse(tmp_path):
    base = tiny_model(dag_weights=(0.0, 0.0, 0.0))
    reference = {n: p.detach().clone() for n, p in base.named_parameters()}
    peft_model = get_peft_model(base, lora_config())
    args = TrainingArguments(
        str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = PldrTrainer(
        model=peft_model,
        args=args,
        train_dataset=four_examples(),
        data_collator=default_data_collator,
        dag_schedule=DagSchedule(weights=DAG_WEIGHTS),
    )
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert len(logs) == 3
    assert all({"lm_loss", *DAG_LOG_NAMES, "dag_weight_a_p"} <= set(e) for e in logs)
    # the trainer passed the scheduled weights into each call through the PEFT wrapper; the config is untouched
    assert all((e["dag_weight_a_lm"], e["dag_weight_a_p"], e["dag_weight_g_lm"]) == DAG_WEIGHTS for e in logs)
    assert base.config.dag_weights == (0.0, 0.0, 0.0)
    assert all(e["loss"] > e["lm_loss"] for e in logs)
    # only the adapters moved
    for name, param in base.named_parameters():
        if "lora_" not in name and "base_layer" not in name:
            assert torch.equal(param, reference[name]), name
    assert any(p.abs().sum() > 0 for n, p in peft_model.named_parameters() if "plgatt_layer" in n and "lora_B" in n)

    # compared in float64: merging changes the summation order of each adapted matmul, and the metric learner
    # amplifies that float32 rounding to 2e-5–2e-4 in the logits depending on the trained adapters (peft 0.21 /
    # 0.22 trajectories); in float64 the two agree to about 1e-15, so a wrong merge cannot hide in a tolerance
    peft_model.eval().double()
    ids = _ids()
    with torch.no_grad():
        adapted = peft_model(input_ids=ids).logits
    with pytest.raises(ValueError, match="merge_and_unload"):
        peft_model.get_base_model().collapse(force=True)
    merged = peft_model.merge_and_unload()
    assert type(merged) is PldrllmForCausalLM
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        assert_close("merged vs adapter logits", adapted, merged(input_ids=ids).logits, atol=1e-10, rtol=1e-10)
        assert not torch.allclose(
            merged.decoder.dec_layers[0].mha1.plgatt_layer.pwlst.float(),
            reference["decoder.dec_layers.0.mha1.plgatt_layer.pwlst"],
        )
    report = merged.float().collapse(force=True)
    assert merged.config.collapsed and "G_LM" in report.order_parameter


def test_lora_on_the_metric_learner_glus_is_seen():
    # adapters on the metric learner's GLUs: the units are then called as modules (not the fused path, which reads
    # the base weights), so the adapters change the output and get gradients
    from plldr_hf.models.pldrllm.fused_units import is_plain

    model = tiny_model()
    regex = r".*\.reslayerAs\.\d+\.denseAs\.\d+\.gluw[12]"
    peft_model = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=2, target_modules=regex))
    units = peft_model.base_model.model.decoder.dec_layers[0].mha1.reslayerAs
    assert not is_plain(units)
    ids = _ids()
    base = peft_model(input_ids=ids).logits.detach()
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    out = peft_model(input_ids=ids, labels=ids)
    assert (out.logits - base).abs().max() > 1e-4
    out.loss.backward()
    adapters = [p for n, p in peft_model.named_parameters() if "lora_A" in n]
    assert adapters and all(p.grad is not None and p.grad.abs().sum() > 0 for p in adapters)


@pytest.mark.parametrize("family", ["pldrllm", "agf"])
def test_lora_config_without_target_modules_adapts_the_registered_attention_projections(family, tmp_path, monkeypatch):
    """`LoraConfig(task_type=...)` alone works, as for the architectures PEFT knows; the adapter names its base model
    by an absolute path, so it loads from any working directory."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from plldr_hf.models import FAMILIES
    from tests.utils import tiny_agf

    base = tiny_model() if family == "pldrllm" else tiny_agf()
    auto, task = {
        "pldrllm": (AutoModelForCausalLM, TaskType.CAUSAL_LM),
        "agf": (AutoModelForSeq2SeqLM, TaskType.SEQ_2_SEQ_LM),
    }[family]
    folder = tmp_path / "work" / "base"
    base.save_pretrained(folder)
    monkeypatch.chdir(tmp_path / "work")
    loaded = auto.from_pretrained("base")  # a relative path, as a user types it
    peft_model = get_peft_model(loaded, LoraConfig(task_type=task, r=2))
    adapted = {n.split(".")[-4] for n, p in peft_model.named_parameters() if p.requires_grad}
    assert adapted == set(FAMILIES[family].lora_target_modules)
    peft_model.save_pretrained("adapter")

    monkeypatch.chdir(tmp_path)  # somewhere else: the adapter's base path still loads
    adapter = tmp_path / "work" / "adapter"
    config = PeftConfig.from_pretrained(adapter)
    assert config.base_model_name_or_path == str(folder)
    reloaded = PeftModel.from_pretrained(auto.from_pretrained(config.base_model_name_or_path), adapter)
    with torch.no_grad():
        ids = torch.tensor([[5, 6, 7, 8]])
        inputs = {"input_ids": ids} if family == "pldrllm" else {"input_ids": ids, "decoder_input_ids": ids}
        assert torch.equal(reloaded(**inputs).logits, peft_model.eval()(**inputs).logits)
