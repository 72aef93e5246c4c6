"""Training: the DAG regulariser in the model's loss, its scaling under gradient accumulation, the DAG callback and
PldrTrainer logging, resume, the reference schedule, and the causal-LM data / tokenizer / pipeline."""

import copy
import gzip
import json
import math

import pytest
import torch
import torch.nn.functional as F
from transformers import TrainerCallback, TrainingArguments, default_data_collator

from plldr_hf.models.pldrllm import plga
from plldr_hf.models.pldrllm.dag import dag_loss, dag_values
from plldr_hf.training.callbacks import ClipGradValueCallback, StepTimerCallback
from plldr_hf.training.trainer import DAG_LOG_NAMES, DagSchedule, PldrTrainer
from tests.ddp_one_step import DAG_WEIGHTS, PADDED, four_examples, one_step, tiny_model
from tests.utils import assert_close


def _direct_dag(m: torch.Tensor, form: str) -> torch.Tensor:
    """Unshifted float64 evaluation, averaged over the leading axes (fine while tr e^{M∘M} fits in float64)."""
    d = m.shape[-1]
    trace = torch.linalg.matrix_exp(m.double().square()).diagonal(dim1=-2, dim2=-1).sum(-1)
    values = (trace / d).log().abs() if form == "log_ratio" else trace - d
    return values.mean()


def _batch(seed=0, batch=3, seq=7, pad_tail=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 99, (batch, seq), generator=generator)
    labels = ids.clone()
    if pad_tail:
        labels[0, -pad_tail:] = -100
    return ids, labels


def _cross_entropy(logits, labels, num_items=None):
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    shift_labels = labels[:, 1:].reshape(-1)
    if num_items is None:
        return F.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
    return F.cross_entropy(shift_logits, shift_labels, ignore_index=-100, reduction="sum") / num_items


# ---------------------------------------------------------------------------------------------------------------
# the DAG terms (computed by the model; the maths in plldr_hf/models/pldrllm/dag.py)


@pytest.mark.parametrize("form", ["log_ratio", "notears"])
def test_dag_loss_equals_direct_evaluation(form):
    m = 0.4 * torch.randn(2, 3, 5, 5)
    assert_close(f"dag_loss {form}", _direct_dag(m, form), dag_loss(m, form).double(), atol=1e-6, rtol=1e-6)


def test_dag_log_ratio_is_log_of_one_plus_h_over_d():
    m = 0.5 * torch.randn(4, 6, 6)
    h = torch.stack([dag_loss(x, "notears") for x in m]).double()
    expected = torch.log1p(h / 6).abs().mean()
    assert_close("|ln(1 + h/d)|", expected, dag_loss(m, "log_ratio").double(), atol=1e-6, rtol=1e-6)


def test_dag_loss_is_overflow_safe():
    # M = c·J (all ones, d×d): M∘M = c²J has eigenvalues c²d (once) and 0, so ln tr e^{M∘M} = c²d + ln(1 + (d−1)e^{−c²d})
    d, c = 8, 12.0
    m = torch.full((d, d), c)
    # direct evaluation overflows float64
    with torch.no_grad():
        assert torch.isinf(torch.linalg.matrix_exp(m.double().square()).diagonal().sum())
    assert_close("log-ratio, c²d = 1152", torch.tensor(c * c * d - math.log(d)), dag_loss(m), atol=1e-3, rtol=1e-6)


def test_dag_loss_gradient_matches_direct_evaluation():
    # A_P-like input (entries ≈ 1, as at initialisation, where P ≈ 0) with one large row: the largest row sum of
    # M∘M is far above its spectral radius. tr e^{M∘M} still fits in float64, so direct autograd is the reference.
    generator = torch.Generator().manual_seed(0)
    m = 1.0 + 0.1 * torch.rand(2, 16, 16, generator=generator, dtype=torch.float64)
    m[:, 0] = 9.0
    grads = []
    for fn in (lambda x: _direct_dag(x, "log_ratio"), lambda x: dag_loss(x, "log_ratio")):
        x = m.clone().requires_grad_(True)
        fn(x).backward()
        grads.append(x.grad)
    assert torch.isfinite(grads[1]).all(), "dag_loss gradient is not finite"
    assert_close("d dag_loss / dM", grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_all_dag_weights_zero_is_exactly_cross_entropy(monkeypatch):
    model = tiny_model(dag_weights=(0.0, 0.0, 0.0))
    ids, labels = _batch(pad_tail=2)

    def fail(*args, **kwargs):
        raise AssertionError("a DAG value was evaluated although every DAG weight is 0")

    monkeypatch.setattr(plga, "dag_values", fail)
    out = model(input_ids=ids, labels=labels)
    assert out.dag_loss is None and out.dag_losses is None
    assert out.loss is not out.lm_loss and torch.equal(out.loss, out.lm_loss)
    assert_close("loss vs cross-entropy", _cross_entropy(out.logits, labels), out.loss, atol=1e-6, rtol=1e-6)
    num_items = int((labels[:, 1:] != -100).sum()) + 5
    out = model(input_ids=ids, labels=labels, num_items_in_batch=num_items)
    assert_close("sum CE / num_items", _cross_entropy(out.logits, labels, num_items), out.loss, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("form", ["log_ratio", "notears"])
def test_dag_terms_in_loss_match_deductive_outputs(form):
    weights = (0.1, 0.02, 0.3)
    model = tiny_model(dag_weights=weights, dag_loss_form=form)
    ids, labels = _batch(pad_tail=2)
    out = model(input_ids=ids, labels=labels, output_pldr_attentions=True)
    assert out.dag_losses.dtype == torch.float32 and out.dag_losses.shape == (3,)
    # independent recomputation from the returned deductive outputs: per sequence the mean over layers and heads,
    # then the mean over sequences weighted by their label tokens (the rows have unequal lengths)
    layers = out.pldr_attentions
    per_sequence = torch.stack(
        [torch.stack([dag_values(layer[k], form).mean(-1) for layer in layers]).mean(0) for k in (1, 2, 3)], dim=-1
    )  # (B, 3)
    tokens = (labels[:, 1:] != -100).sum(-1).float()
    assert len(set(tokens.tolist())) > 1
    expected = (per_sequence * tokens[:, None]).sum(0) / tokens.sum()
    assert_close("dag_losses (A_LM, A_P, G_LM)", expected, out.dag_losses, atol=1e-5, rtol=1e-5)
    # the batch mean of dag_loss() is the unweighted one, and differs here
    unweighted = torch.stack([torch.stack([dag_loss(layer[k], form) for layer in layers]).mean() for k in (1, 2, 3)])
    assert_close("dag_loss() = unweighted mean", per_sequence.mean(0), unweighted, atol=1e-5, rtol=1e-5)
    assert_close("lm_loss", _cross_entropy(out.logits, labels), out.lm_loss, atol=1e-6, rtol=1e-6)
    total = out.lm_loss + sum(w * v for w, v in zip(weights, out.dag_losses))
    assert_close("loss = CE + Σ w·dag", total, out.loss, atol=1e-5, rtol=1e-6)


def test_dag_term_token_fraction_with_num_items_in_batch():
    # under Trainer each sequence's DAG value is weighted by its label tokens over the accumulated batch's total,
    # Σ_i n_i·(w·dag_i) / N, like the summed CE; exact for padded rows of unequal length too
    weights = (0.1, 0.02, 0.3)
    model = tiny_model(dag_weights=weights)
    ids, labels = _batch(pad_tail=3)
    tokens = (labels[:, 1:] != -100).sum(-1)
    num_items = 3 * int(tokens.sum())  # as if this micro-batch held a third of the accumulated batch's label tokens
    out = model(input_ids=ids, labels=labels, num_items_in_batch=num_items, output_pldr_attentions=True)
    per_layer = [
        torch.stack([dag_values(t).mean(-1) for t in (a_lm, a_p, g_lm)], dim=-1)
        for _, a_lm, a_p, g_lm in out.pldr_attentions
    ]
    per_sequence = torch.stack(per_layer).mean(0)  # (B, 3)
    token_mean = (per_sequence * tokens[:, None]).sum(0) / tokens.sum()
    assert_close("mean over label tokens", token_mean, out.dag_losses, atol=1e-6)
    dag_term = (per_sequence @ torch.tensor(weights) * tokens).sum() / num_items
    assert_close("dag_loss", dag_term, out.dag_loss, atol=1e-6)
    assert_close("lm_loss = sum CE / N", _cross_entropy(out.logits, labels, num_items), out.lm_loss, atol=1e-6)
    assert_close("loss = CE + Σ_i n_i·(w·dag_i) / N", out.lm_loss + dag_term, out.loss, atol=1e-5, rtol=1e-6)


def test_dag_values_stay_float32_under_bf16_autocast():
    model = tiny_model()
    ids, labels = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=labels)
    assert out.dag_losses.dtype == torch.float32
    assert torch.isfinite(out.dag_losses).all() and torch.isfinite(out.loss)


# ---------------------------------------------------------------------------------------------------------------
# gradient accumulation (the 2-process check is in test_training_ddp.py)


def test_accumulation_gives_the_same_step_with_dag_term():
    # packed blocks (every row has the same number of label tokens), as in pretraining
    reference, _ = one_step(4, 1)
    accumulated, _ = one_step(2, 2)
    for name, value in reference.items():
        assert_close(name, value, accumulated[name], atol=1e-6, rtol=0)
    # the check has teeth: the DAG term moves the parameters far more than the tolerance
    without_dag, _ = one_step(4, 1, dag_weights=(0.0, 0.0, 0.0))
    initial = dict(tiny_model().named_parameters())
    dag_effect = max(
        ((reference[n] - initial[n]) - (without_dag[n] - initial[n])).abs().max().item() for n in reference
    )
    assert dag_effect > 1e-3, f"the DAG term changes the step by only {dag_effect:.2e}"


def test_accumulation_gives_the_same_step_with_padded_rows():
    reference, _ = one_step(4, 1, label_tokens=PADDED)
    accumulated, _ = one_step(2, 2, label_tokens=PADDED)
    for name, value in reference.items():
        assert_close(name, value, accumulated[name], atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# callbacks and PldrTrainer


def test_dag_schedule_and_errors():
    constant = DagSchedule(weights=(0.1, 0.2, 0.3))
    assert constant.weights_at(0) == (0.1, 0.2, 0.3)
    ramp = DagSchedule(weights=(0.4, 0.0, 0.8), warmup_steps=4, start_step=2)
    assert [ramp.weights_at(s)[0] for s in range(7)] == pytest.approx([0, 0, 0.1, 0.2, 0.3, 0.4, 0.4])
    with pytest.raises(ValueError, match="three numbers"):
        DagSchedule(weights=(0.1, 0.2))
    for bad in (-0.2, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="non-negative finite"):
            DagSchedule(weights=(0.1, bad, 0.0))
    with pytest.raises(ValueError, match="warmup_steps"):
        DagSchedule(weights=(0.1, 0.1, 0.1), warmup_steps=-1)


def test_dag_schedule_refuses_a_fixed_g_model(tmp_path):
    args = TrainingArguments(str(tmp_path), max_steps=1, report_to="none", use_cpu=True, disable_tqdm=True)
    with pytest.raises(ValueError, match="fixed G"):
        PldrTrainer(
            model=tiny_model(custom_G_type="identity"),
            args=args,
            train_dataset=four_examples(),
            dag_schedule=DagSchedule(weights=(0.1, 0.1, 0.1)),
        )


def test_dag_schedule_rejects_model_without_dag_fields(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(
        LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2)
    )
    args = TrainingArguments(str(tmp_path), max_steps=1, report_to="none", use_cpu=True, disable_tqdm=True)
    with pytest.raises(TypeError, match="LlamaForCausalLM"):
        PldrTrainer(
            model=llama,
            args=args,
            train_dataset=four_examples(),
            data_collator=default_data_collator,
            dag_schedule=DagSchedule(weights=(0.1, 0.1, 0.1)),
        )


def _tiny_trainer(
    tmp_path, max_steps=2, callbacks=(), report_to="none", dag_schedule=None, log_dag_losses=False, **args_overrides
):
    fields = dict(
        max_steps=max_steps,
        per_device_train_batch_size=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=report_to,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        lr_scheduler_type="constant",
    )
    fields.update(args_overrides)
    args = TrainingArguments(str(tmp_path), **fields)
    model = tiny_model(dag_weights=(0.0, 0.0, 0.0))
    return PldrTrainer(
        model=model,
        args=args,
        train_dataset=four_examples(),
        eval_dataset=four_examples(),
        data_collator=default_data_collator,
        callbacks=list(callbacks),
        dag_schedule=dag_schedule,
        log_dag_losses=log_dag_losses,
    )


def test_trainer_logs_cross_entropy_and_each_dag_component(tmp_path):
    schedule = DagSchedule(weights=DAG_WEIGHTS, warmup_steps=2)
    trainer = _tiny_trainer(tmp_path, dag_schedule=schedule, report_to="tensorboard")
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logs] == [1, 2]
    for step, entry in enumerate(logs):
        missing = {"lm_loss", *DAG_LOG_NAMES, "dag_weight_a_lm", "dag_weight_a_p", "dag_weight_g_lm"} - set(entry)
        assert not missing, f"log at step {entry['step']} lacks {missing}"
        weights = (entry["dag_weight_a_lm"], entry["dag_weight_a_p"], entry["dag_weight_g_lm"])
        assert weights == pytest.approx(schedule.weights_at(step))
        # one process, one micro-batch per step: loss = CE + Σ w·dag exactly
        total = entry["lm_loss"] + sum(w * entry[name] for w, name in zip(weights, DAG_LOG_NAMES))
        assert total == pytest.approx(entry["loss"], rel=1e-5)
        assert entry["lm_loss"] < entry["loss"]

    metrics = trainer.evaluate()
    assert {"eval_lm_loss", "eval_dag_a_lm", "eval_dag_a_p", "eval_dag_g_lm"} <= set(metrics)
    assert metrics["eval_lm_loss"] < metrics["eval_loss"]
    # lm_loss and dag_losses are in keys_to_ignore_at_inference: predictions are the logits alone
    predictions = trainer.predict(four_examples()).predictions
    assert not isinstance(predictions, tuple) and predictions.shape == (4, 9, 99)

    # the same values reached the TensorBoard integration
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    event_files = list(tmp_path.glob("runs/**/events.out.tfevents.*"))
    assert event_files, "no TensorBoard event file written"
    tags = set()
    for path in event_files:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert {"train/lm_loss", "train/dag_a_lm", "train/dag_a_p", "train/dag_g_lm", "train/dag_weight_a_p"} <= tags


def test_the_schedule_goes_in_per_call_and_leaves_the_config_alone(tmp_path):
    schedule = DagSchedule(weights=DAG_WEIGHTS, warmup_steps=2)
    trainer = _tiny_trainer(tmp_path, dag_schedule=schedule)
    seen = []
    trainer.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["dag_weights"]), with_kwargs=True
    )
    trainer.train()
    assert seen == [schedule.weights_at(0), schedule.weights_at(1)]
    assert trainer.model.config.dag_weights == (0.0, 0.0, 0.0)


def test_trainer_can_monitor_dag_values_without_regularising(tmp_path):
    trainer = _tiny_trainer(tmp_path, log_dag_losses=True)
    trainer.train()
    for entry in (e for e in trainer.state.log_history if "loss" in e):
        assert entry["dag_weight_a_p"] == 0.0 and entry["dag_a_p"] > 0
        assert entry["lm_loss"] == pytest.approx(entry["loss"], rel=1e-6)


def test_trainer_keeps_use_cache_in_saved_config(tmp_path):
    trainer = _tiny_trainer(tmp_path, max_steps=1)
    assert trainer.model.config.use_cache is False  # what Trainer sets for training
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    assert json.loads((tmp_path / "final" / "config.json").read_text())["use_cache"] is True
    assert trainer.model.config.use_cache is False


def test_trainer_decays_every_parameter_when_asked(tmp_path):
    trainer = _tiny_trainer(tmp_path, weight_decay=0.1)
    trainer.decay_all_parameters = True
    optimizer = trainer.create_optimizer()
    decayed = sum(len(g["params"]) for g in optimizer.param_groups if g["weight_decay"] == 0.1)
    assert decayed == len(list(trainer.model.parameters()))
    stock = _tiny_trainer(tmp_path, weight_decay=0.1).create_optimizer()
    assert any(g["weight_decay"] == 0.0 and g["params"] for g in stock.param_groups)


def test_clip_grad_value_callback(tmp_path):
    model = tiny_model()
    ids, labels = _batch()
    model(input_ids=ids, labels=labels).loss.mul(1e3).backward()
    assert max(p.grad.abs().max() for p in model.parameters() if p.grad is not None) > 0.5
    ClipGradValueCallback(0.5).on_pre_optimizer_step(None, None, None, model=model)
    assert max(p.grad.abs().max() for p in model.parameters() if p.grad is not None) <= 0.5
    with pytest.raises(ValueError, match="positive"):
        ClipGradValueCallback(0.0)


def test_loss_falls_on_a_small_batch_within_a_few_dozen_steps():
    model = tiny_model(dag_weights=(0.01, 0.0, 0.01))
    ids, labels = _batch(batch=4, seq=9)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-5)
    losses = []
    for _ in range(30):
        out = model(input_ids=ids, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.lm_loss.item())
    assert losses[-1] < 0.5 * losses[0], f"cross-entropy {losses[0]:.3f} -> {losses[-1]:.3f} after 30 steps"


class _StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


def test_resume_continues_the_same_loss_trajectory(tmp_path):
    schedule = DagSchedule(weights=DAG_WEIGHTS, warmup_steps=4)
    common = dict(
        max_steps=6,
        per_device_train_batch_size=2,
        save_strategy="steps",
        save_steps=3,
        lr_scheduler_type="linear",
        warmup_steps=2,
    )
    full = _tiny_trainer(tmp_path / "full", dag_schedule=schedule, **common)
    full.train()
    # interrupted right after the checkpoint at step 3 (same max_steps, so the same LR schedule)
    first = _tiny_trainer(tmp_path / "resumed", callbacks=[_StopAt(3)], dag_schedule=schedule, **common)
    first.train()
    assert first.state.global_step == 3
    resumed = _tiny_trainer(tmp_path / "resumed", dag_schedule=schedule, **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-3"))

    def trajectory(trainer, keys=("loss", "lm_loss", "dag_a_p", "dag_weight_g_lm")):
        return {e["step"]: [e[k] for k in keys] for e in trainer.state.log_history if "loss" in e}

    expected, got = trajectory(full), trajectory(resumed)
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    for step in (4, 5, 6):
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), f"step {step}"


def test_reference_schedule_is_warmup_then_cosine_to_ten_percent(tmp_path):
    from plldr_hf.training.options import TrainOptions

    args = TrainOptions(
        output_dir=str(tmp_path), max_steps=50, warmup_steps=10, learning_rate=1e-3, report_to=["none"], use_cpu=True
    )
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon, args.weight_decay) == (0.9, 0.95, 1e-5, 0.1)
    assert args.max_grad_norm == 0.0  # clipping by value, in ClipGradValueCallback
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    trainer = _tiny_trainer(tmp_path)
    trainer.args = args
    scheduler = trainer.create_scheduler(num_training_steps=50, optimizer=optimizer)
    for step in range(51):
        if step <= 10:
            factor = step / 10
        else:
            factor = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - 10) / 40))
        assert scheduler.get_last_lr()[0] == pytest.approx(1e-3 * factor, abs=1e-12), f"step {step}"
        optimizer.step()
        scheduler.step()


def test_step_timer_summary():
    timer = StepTimerCallback()
    timer.step_times = [5.0, 4.0, 1.0, 3.0, 2.0]
    assert timer.summary(skip=2) == {"steps_timed": 3, "median_s_per_step": 2.0, "mean_s_per_step": 2.0}


# ---------------------------------------------------------------------------------------------------------------
# data, tokenizer and the pipeline


@pytest.fixture(scope="module")
def shakespeare_tokenizer():
    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

    corpus = load_text_corpus()
    return train_sentencepiece_tokenizer(corpus["train"], vocab_size=600, max_documents=3000)


def test_sentencepiece_tokenizer_matches_sentencepiece(shakespeare_tokenizer, tmp_path):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from plldr_hf.training.corpus import load_text_corpus

    tok = shakespeare_tokenizer
    specials = "[PAD] [UNK] [START] [END] [SEP] [CLS] <0x00>".split()
    assert tok.convert_ids_to_tokens(list(range(7))) == specials
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 3, 2)
    tok.save_pretrained(tmp_path)
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tokenizer.model"))
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = load_text_corpus()["validation"]["text"][:300] + ["Ünïcödé ☃ 12345 naïve — “quotes”  double  spaces"]
    for text in texts:
        expected = processor.encode(text)
        assert tok(text, add_special_tokens=False)["input_ids"] == expected, text
        assert reloaded(text, add_special_tokens=False)["input_ids"] == expected, text
    # byte fallback: characters outside the corpus survive a round trip
    text = "Ünïcödé ☃ 12345"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert tok.unk_token_id not in tok("☃ 漢字", add_special_tokens=False)["input_ids"]


def test_pack_into_blocks_appends_end_and_cuts_fixed_blocks(shakespeare_tokenizer):
    from datasets import Dataset

    from plldr_hf.training.preprocessing import pack_into_blocks

    tok = shakespeare_tokenizer
    docs = ["To be, or not to be.", "That is the question.", "Whether 'tis nobler in the mind to suffer"]
    blocks = pack_into_blocks(Dataset.from_dict({"text": docs}), tok, block_size=5)
    stream = [i for d in docs for i in tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
    assert tok.bos_token_id not in stream
    assert blocks["input_ids"] == [stream[i : i + 5] for i in range(0, len(stream) // 5 * 5, 5)]
    with pytest.raises(ValueError, match="fewer than one block"):
        pack_into_blocks(Dataset.from_dict({"text": ["Hi."]}), tok, block_size=512)


def test_load_text_corpus_local_files_and_errors(tmp_path):
    from plldr_hf.training.corpus import load_text_corpus

    (tmp_path / "train.txt").write_text("first paragraph\nstill first\n\nsecond paragraph\n\n\nthird\n")
    with gzip.open(tmp_path / "validation.txt.gz", "wt") as f:
        f.write("held out\n\nalso held out\n")
    corpus = load_text_corpus([str(tmp_path)])
    assert corpus["train"]["text"] == ["first paragraph\nstill first", "second paragraph", "third"]
    assert len(corpus["validation"]) == 2

    (tmp_path / "table.jsonl").write_text('{"body": "a"}\n{"body": "b"}\n{"body": "c"}\n')
    with pytest.raises(ValueError, match="no text column 'text'.*body"):
        load_text_corpus([str(tmp_path / "table.jsonl")])
    corpus = load_text_corpus([str(tmp_path / "table.jsonl")], text_column="body", validation_fraction=0.34)
    assert len(corpus["train"]) + len(corpus["validation"]) == 3
    (tmp_path / "notes.docx").write_text("x")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_text_corpus([str(tmp_path / "notes.docx")])
    with pytest.raises(ValueError, match="no-such-user/no-such-dataset"):
        load_text_corpus("no-such-user/no-such-dataset")


def test_cli_tiny_run_writes_report_and_resumes(tmp_path, capsys):
    from plldr_hf.cli import main

    out = tmp_path / "run"
    flags = "--max-steps 4 --save-steps 2 --logging-steps 1 --eval-steps 0 --max-train-documents 400 "
    flags += "--vocab-size 400 --dag-weights 0.01,0.01,0.01 --report-to none"
    argv = ["train", "pldrllm", "--tiny", "--output-dir", str(out), *flags.split()]
    assert main(argv) == 0
    report = json.loads((out / "train_report.json").read_text())
    perplexity = report["scores"]["validation"]["perplexity"]
    assert math.isfinite(perplexity) and perplexity > 1
    assert set(report["diagnostics"]["order_parameter_before"]["prompt_vs_continuation_max_over_layers"]) == {
        "A",
        "A_LM",
        "A_P",
        "G_LM",
    }
    assert report["diagnostics"]["order_parameter_after"]["prompt_vs_continuation_max_over_layers"]["G_LM"] is not None
    assert (out / "loss_curves.png").stat().st_size > 1000
    assert json.loads((out / "config.json").read_text())["use_cache"] is True
    history = {e["step"]: e for e in json.loads((out / "log_history.json").read_text()) if "loss" in e}
    assert {"lm_loss", *DAG_LOG_NAMES} <= set(history[4])

    # --resume from checkpoint-2 (saved tokenizer, same schedule) reproduces steps 3 and 4
    assert main([*argv, "--resume", str(out / "checkpoint-2")]) == 0
    again = {e["step"]: e for e in json.loads((out / "log_history.json").read_text()) if "loss" in e}
    for step in (3, 4):
        assert again[step]["loss"] == pytest.approx(history[step]["loss"], rel=1e-5), f"step {step}"
        assert again[step]["dag_a_p"] == pytest.approx(history[step]["dag_a_p"], rel=1e-5), f"step {step}"
    capsys.readouterr()
    assert main([*argv, "--resume", "--block-size", "32"]) == 2
    assert "block_size" in capsys.readouterr().err


def test_padding_free_batches_give_the_padded_loss_and_train_from_the_cli(shakespeare_tokenizer, tmp_path):
    from transformers import DataCollatorForLanguageModeling

    from plldr_hf.cli import main
    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.preprocessing import split_into_documents, training_collator

    corpus = load_text_corpus()
    documents = split_into_documents(corpus["validation"].select(range(40)), shakespeare_tokenizer, 48)
    features = [documents[i] for i in range(6)]
    assert len({len(f["input_ids"]) for f in features}) > 1  # documents of different lengths
    flat = training_collator(padding_free=True)(features)
    assert flat["input_ids"].shape[0] == 1 and "attention_mask" not in flat
    # right padding, as for training: with left padding the last pad position would predict each row's first token
    right = copy.deepcopy(shakespeare_tokenizer)
    right.padding_side = "right"
    padded = DataCollatorForLanguageModeling(right, mlm=False)(features)
    # float64 outside the PLGA maths, which runs in float32 whatever the model dtype: the two batchings are the same
    # maths, with the Gram matrices summed in another order (7e-8 relative measured; a wrong mask or segment is 1e-2)
    model = tiny_model(vocab_size=len(shakespeare_tokenizer), max_position_embeddings=64).double()
    with torch.no_grad():
        out_flat = model(**flat, use_cache=False)
        out_padded = model(**padded, use_cache=False)
    assert int((padded["attention_mask"] == 0).sum()) > 0
    assert out_flat.lm_loss.item() == pytest.approx(out_padded.lm_loss.item(), rel=1e-6)
    assert out_flat.loss.item() == pytest.approx(out_padded.loss.item(), rel=1e-6)  # with the DAG term

    out = tmp_path / "padding_free"
    flags = "--max-steps 4 --logging-steps 1 --eval-steps 0 --max-train-documents 300 --vocab-size 400 "
    flags += "--report-to none --padding-free"
    assert main(["train", "pldrllm", "--tiny", "--output-dir", str(out), *flags.split()]) == 0
    report = json.loads((out / "train_report.json").read_text())
    assert math.isfinite(report["scores"]["validation"]["perplexity"])
