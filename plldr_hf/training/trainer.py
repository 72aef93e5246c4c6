"""`PldrTrainer`: a `transformers.Trainer` that logs the model's auxiliary losses and keeps `use_cache` on save.

What it adds to the stock Trainer:

- **Logging.** PLDR-LLM returns the cross-entropy `lm_loss` and the unweighted DAG values `dag_losses`
  (A_LM, A_P, G_LM) next to `loss`. They are accumulated over the micro-batches and processes exactly like the
  Trainer accumulates `loss`, and merged in `log()` before `super().log()`, so they reach `state.log_history`
  and every reporting integration (TensorBoard, ...) as `lm_loss`, `dag_a_lm`, `dag_a_p`, `dag_g_lm`, with the
  current weights `dag_weight_a_lm`, `dag_weight_a_p`, `dag_weight_g_lm`. Evaluation adds `eval_lm_loss` and
  `eval_dag_*`, so perplexity is `exp(eval_lm_loss)` even when `eval_loss` includes the DAG term.
- **`use_cache`.** Trainer writes `config.use_cache = args.use_cache` (False by default) into every saved
  config; the value the model had before is restored for saving (the released PLDR-LLM config has `true`).
- **Weight decay on every parameter** (`decay_all_parameters=True`), as in the reference recipe
  (the reference code, github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality); the stock Trainer exempts biases and LayerNorm weights.

The gradient scaling of the DAG term under gradient accumulation and DDP is done by the model (token fraction with
`num_items_in_batch`), not here; any Trainer trains PLDR-LLM correctly, this one only reports more.
"""

from __future__ import annotations

import torch
from transformers import Trainer

from plldr_hf.training.callbacks import DAG_WEIGHT_FIELDS, dag_config


__all__ = ["PldrTrainer", "DAG_LOG_NAMES"]

# log names of the three DAG components, in the order of the model's `dag_losses`
DAG_LOG_NAMES = ("dag_a_lm", "dag_a_p", "dag_g_lm")


class _AuxAccumulator:
    """Running sums of (lm_loss, dag A_LM, dag A_P, dag G_LM) with their weights, on the training device."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.lm_sum = None
        self.lm_count = 0.0
        self.dag_sum = None
        self.dag_count = 0.0
        # optimizer steps that contributed (all micro-batches of one step share `global_step`)
        self.steps = set()

    def add_lm(self, value: torch.Tensor, weight: float = 1.0):
        value = value.detach().float() * weight
        self.lm_sum = value if self.lm_sum is None else self.lm_sum + value
        self.lm_count += weight

    def add_dag(self, values: torch.Tensor, weight: float = 1.0):
        values = values.detach().float().reshape(-1) * weight
        self.dag_sum = values if self.dag_sum is None else self.dag_sum + values
        self.dag_count += weight

    @property
    def empty(self) -> bool:
        return self.lm_sum is None and self.dag_sum is None


class PldrTrainer(Trainer):
    """`Trainer` that logs `lm_loss` and the DAG components, restores `use_cache` on save and can apply weight
    decay to every parameter. Use it with `DagLossCallback` to schedule the DAG weights.

    Args:
        decay_all_parameters: apply `args.weight_decay` to every parameter (reference recipe) instead of
            exempting biases and LayerNorm weights.
        log_dag_losses: also compute and log the DAG values when all DAG weights are 0 (monitoring only; the loss
            stays the cross-entropy). Costs one matrix exponential per layer, batch item and head.
        *args, **kwargs: passed to `Trainer`.

    Example:

    ```python
    >>> from transformers import TrainingArguments
    >>> from plldr_hf.training.callbacks import DagLossCallback
    >>> from plldr_hf.training.trainer import PldrTrainer
    >>> args = TrainingArguments("out", max_steps=2, logging_steps=1, report_to="none")  # doctest: +SKIP
    >>> trainer = PldrTrainer(model=model, args=args, train_dataset=blocks,
    ...                       callbacks=[DagLossCallback(weights=(0.05, 0.05, 0.05))])  # doctest: +SKIP
    >>> trainer.train()  # log_history holds loss, lm_loss, dag_a_lm, dag_a_p, dag_g_lm, dag_weight_*  # doctest: +SKIP
    ```
    """

    def __init__(self, *args, decay_all_parameters: bool = False, log_dag_losses: bool = False, **kwargs):
        model = kwargs.get("model", args[0] if args else None)
        config = getattr(model, "config", None)
        # Trainer.__init__ overwrites config.use_cache with args.use_cache; remember what the model had
        self._use_cache_to_save = getattr(config, "use_cache", None)
        self.decay_all_parameters = decay_all_parameters
        self.log_dag_losses = log_dag_losses
        super().__init__(*args, **kwargs)
        self._train_aux = _AuxAccumulator()
        self._eval_aux = _AuxAccumulator()

    def get_decay_parameter_names(self, model) -> list[str]:
        if self.decay_all_parameters:
            return [name for name, _ in model.named_parameters()]
        return super().get_decay_parameter_names(model)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        config = dag_config(model)
        if self.log_dag_losses and config is not None:
            inputs = {**inputs, "output_dag_losses": True}
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if isinstance(outputs, dict) and outputs.get("loss") is not None:
            self._record(outputs, inputs, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    def _record(self, outputs, inputs, num_items_in_batch) -> None:
        lm_loss, dag_losses = outputs.get("lm_loss"), outputs.get("dag_losses")
        if lm_loss is None and dag_losses is None:
            return
        if lm_loss is None:
            lm_loss = outputs["loss"]
        lm_value = lm_loss.detach().float() * self._loss_scale(num_items_in_batch)
        if self.model.training:
            # training_step divides by the accumulation steps unless the loss was normalised by num_items_in_batch
            scaled_for_ga = self.loss_is_scaled_for_ga
            if scaled_for_ga is None:
                scaled_for_ga = (
                    self.model_accepts_loss_kwargs and num_items_in_batch is not None
                ) or self.compute_loss_func is not None
            if not scaled_for_ga:
                lm_value = lm_value / self.current_gradient_accumulation_steps
            self._train_aux.add_lm(lm_value)
            self._train_aux.steps.add(self.state.global_step)
            if dag_losses is not None:
                self._train_aux.add_dag(dag_losses)
        else:
            # evaluation averages per example, like the Trainer's eval_loss
            batch_size = float(inputs["input_ids"].shape[0]) if "input_ids" in inputs else 1.0
            self._eval_aux.add_lm(lm_value, batch_size)
            if dag_losses is not None:
                self._eval_aux.add_dag(dag_losses, batch_size)

    def _loss_scale(self, num_items_in_batch) -> float:
        # Trainer.compute_loss multiplies the loss by the number of processes when num_items_in_batch was summed
        # over them (average_tokens_across_devices); it does so in place, so the factor cannot be read off the
        # outputs and is recomputed here the same way
        if (
            self.args.average_tokens_across_devices
            and (self.model_accepts_loss_kwargs or self.compute_loss_func)
            and num_items_in_batch is not None
        ):
            if self.args.n_gpu > 1:
                return float(self.args.n_gpu)
            return float(self.accelerator.num_processes // self.get_tp_size())
        return 1.0

    def _reduce(self, aux: _AuxAccumulator) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """Sums over processes of [lm_sum, lm_count] and [dag_sum (3), dag_count]; a collective on every rank."""
        device = self.args.device
        lm = torch.zeros(2, device=device)
        dag = torch.zeros(4, device=device)
        if aux.lm_sum is not None:
            lm[0], lm[1] = aux.lm_sum.to(device), aux.lm_count
        if aux.dag_sum is not None:
            dag[:3], dag[3] = aux.dag_sum.to(device), aux.dag_count
        both = torch.cat([lm, dag])
        if self.accelerator.num_processes > 1:
            both = self.accelerator.reduce(both, reduction="sum")
        return (both[0], both[1]), both[2:]

    def _current_weights(self) -> dict[str, float]:
        config = dag_config(self.model)
        if config is None:
            return {}
        return {name: float(getattr(config, name)) for name in DAG_WEIGHT_FIELDS}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # "loss" marks the periodic training log, which every process calls at the same step
        if "loss" in logs:
            steps = max(1, len(self._train_aux.steps))
            if not self._train_aux.empty or self.accelerator.num_processes > 1:
                (lm_sum, lm_count), dag = self._reduce(self._train_aux)
                if lm_count > 0:
                    # same normalisation as Trainer's "loss": mean over processes, per optimizer step
                    logs["lm_loss"] = (lm_sum / self.accelerator.num_processes / steps).item()
                if dag[3] > 0:
                    for name, value in zip(DAG_LOG_NAMES, (dag[:3] / dag[3]).tolist()):
                        logs[name] = value
            self._train_aux.reset()
            logs.update(self._current_weights())
        super().log(logs, start_time)

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        self._eval_aux.reset()
        output = super().evaluation_loop(
            dataloader,
            description,
            prediction_loss_only=prediction_loss_only,
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        if self._eval_aux.empty and self.accelerator.num_processes == 1:
            return output
        (lm_sum, lm_count), dag = self._reduce(self._eval_aux)
        if lm_count > 0:
            output.metrics[f"{metric_key_prefix}_lm_loss"] = (lm_sum / lm_count).item()
        if dag[3] > 0:
            for name, value in zip(DAG_LOG_NAMES, (dag[:3] / dag[3]).tolist()):
                output.metrics[f"{metric_key_prefix}_{name}"] = value
        self._eval_aux.reset()
        return output

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
        if config is None or self._use_cache_to_save is None or not hasattr(config, "use_cache"):
            return super().save_model(output_dir, _internal_call=_internal_call)
        training_value = config.use_cache
        config.use_cache = self._use_cache_to_save
        try:
            super().save_model(output_dir, _internal_call=_internal_call)
        finally:
            config.use_cache = training_value
