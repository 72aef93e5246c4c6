"""`PldrTrainer`: a `transformers.Trainer` that passes the scheduled DAG weights, logs the model's auxiliary losses
and keeps `use_cache` on save.

What it adds to the stock Trainer:

- **DAG weights per call.** `dag_schedule=DagSchedule(weights, warmup_steps)` is the one owner of the DAG
  weights of a run: every forward call of training and evaluation gets that step's `dag_weights`, and the model
  config is never changed. Without a schedule the model's own config weights apply (as under a plain `Trainer`).
  `log_dag_losses=True` asks for the DAG values with weights 0 (monitoring only).
- **Logging.** PLDR-LLM returns the cross-entropy `lm_loss` and the DAG values `dag_losses` (A_LM, A_P, G_LM),
  both averaged over this batch's label tokens. They are summed as token totals (`lm_loss` × the label tokens it
  was divided by, `dag_losses` × this batch's label tokens) over the micro-batches and processes of the logging
  window, and logged as token means: `lm_loss`, `dag_a_lm`, `dag_a_p`, `dag_g_lm`, with the weights
  `dag_weight_a_lm`, `dag_weight_a_p`, `dag_weight_g_lm`; evaluation adds `eval_lm_loss` and `eval_dag_*`, so
  perplexity is `exp(eval_lm_loss)` even when `eval_loss` includes the DAG term. Only the public meaning of
  `num_items_in_batch` (the label tokens of the whole accumulated, all-process batch) is used, not Trainer's own
  loss scaling.
- **`use_cache`.** Trainer writes `config.use_cache = args.use_cache` (False by default) into every saved
  config; the value the model had before is restored for saving (the released PLDR-LLM config has `true`).
- **Weight decay on every parameter** (`decay_all_parameters=True`), as in the reference recipe
  (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality); the stock Trainer exempts biases and LayerNorm
  weights.

The weighting of the DAG term under gradient accumulation and DDP is done by the model (label tokens over
`num_items_in_batch`, like the cross-entropy), not here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import Trainer


__all__ = ["DAG_LOG_NAMES", "DAG_WEIGHT_FIELDS", "DagSchedule", "PldrTrainer", "dag_config"]

# log names of the three DAG components, in the order of the model's `dag_losses`
DAG_LOG_NAMES = ("dag_a_lm", "dag_a_p", "dag_g_lm")
# config fields of the three DAG weights, in the order (A_LM, A_P, G_LM) used everywhere
DAG_WEIGHT_FIELDS = ("dag_weight_a_lm", "dag_weight_a_p", "dag_weight_g_lm")


def _unwrap(model):
    # DDP / FSDP wrappers keep the model in `.module`; PEFT models hand out the base model
    while hasattr(model, "module"):
        model = model.module
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def dag_config(model):
    """The config holding the DAG weights of `model` (unwrapping DDP and PEFT), or None if it has none."""
    config = getattr(_unwrap(model), "config", None)
    if config is None or not all(hasattr(config, name) for name in DAG_WEIGHT_FIELDS):
        return None
    return config


@dataclass(frozen=True)
class DagSchedule:
    """The DAG weights (A_LM, A_P, G_LM) of a training run at each optimizer step:

        weights_at(step) = 0                                                for step < start_step
                           weights · min(1, (step − start_step + 1) / warmup_steps)   otherwise (1: warmup_steps 0)

    It depends only on the number of completed optimizer steps, so a resumed run continues it exactly.

    Example:

    ```python
    >>> from plldr_hf.training.trainer import DagSchedule
    >>> schedule = DagSchedule(weights=(0.04, 0.04, 0.04), warmup_steps=4)
    >>> [schedule.weights_at(step)[0] for step in range(5)]
    [0.01, 0.02, 0.03, 0.04, 0.04]
    ```
    """

    weights: tuple[float, float, float]
    warmup_steps: int = 0
    start_step: int = 0

    def __post_init__(self):
        weights = tuple(float(w) for w in self.weights) if isinstance(self.weights, Sequence) else ()
        if len(weights) != 3:
            raise ValueError(f"DAG weights are three numbers (A_LM, A_P, G_LM); got {self.weights!r}")
        if any(not (math.isfinite(w) and w >= 0) for w in weights):
            raise ValueError(f"DAG weights must be non-negative finite numbers; got {weights}")
        for name in ("warmup_steps", "start_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"DagSchedule: {name} must be a non-negative integer, got {value!r}")
        object.__setattr__(self, "weights", weights)

    def weights_at(self, step: int) -> tuple[float, float, float]:
        if step < self.start_step:
            return (0.0, 0.0, 0.0)
        factor = 1.0 if self.warmup_steps == 0 else min(1.0, (step - self.start_step + 1) / self.warmup_steps)
        return tuple(w * factor for w in self.weights)


class _AuxAccumulator:
    """Token totals of the cross-entropy and of the three DAG values over a logging window, on the training device."""

    def __init__(self):
        self.reset()

    def reset(self):
        # [CE sum, label tokens], [DAG sums (3), label tokens]
        self.lm = None
        self.dag = None

    @staticmethod
    def _add(total, values):
        values = values.detach().float()
        return values if total is None else total + values.to(total.device)

    def add(self, lm_sum: torch.Tensor, dag_sums: torch.Tensor | None, tokens: torch.Tensor) -> None:
        tokens = tokens.detach().float().reshape(1)
        self.lm = self._add(self.lm, torch.cat([lm_sum.detach().float().reshape(1), tokens]))
        if dag_sums is not None:
            self.dag = self._add(self.dag, torch.cat([dag_sums.detach().float().reshape(3), tokens]))

    @property
    def empty(self) -> bool:
        return self.lm is None and self.dag is None


class PldrTrainer(Trainer):
    """`Trainer` that passes the scheduled DAG weights, logs `lm_loss` and the DAG components, restores `use_cache`
    on save and can apply weight decay to every parameter.

    Args:
        dag_schedule: the DAG weights of each step (`DagSchedule`); None: the model config's weights apply.
        decay_all_parameters: apply `args.weight_decay` to every parameter (reference recipe) instead of
            exempting biases and LayerNorm weights.
        log_dag_losses: also compute and log the DAG values when all DAG weights are 0 (monitoring only; the loss
            stays the cross-entropy). Costs one matrix exponential per layer, batch item and head.
        *args, **kwargs: passed to `Trainer`.

    Example:

    ```python
    >>> from transformers import TrainingArguments
    >>> from plldr_hf.training.trainer import DagSchedule, PldrTrainer
    >>> args = TrainingArguments("out", max_steps=2, logging_steps=1, report_to="none")  # doctest: +SKIP
    >>> trainer = PldrTrainer(model=model, args=args, train_dataset=blocks,
    ...                       dag_schedule=DagSchedule(weights=(0.05, 0.05, 0.05)))  # doctest: +SKIP
    >>> trainer.train()  # log_history holds loss, lm_loss, dag_a_lm, dag_a_p, dag_g_lm, dag_weight_*  # doctest: +SKIP
    ```
    """

    def __init__(
        self,
        *args,
        dag_schedule: DagSchedule | None = None,
        decay_all_parameters: bool = False,
        log_dag_losses: bool = False,
        **kwargs,
    ):
        model = kwargs.get("model", args[0] if args else None)
        config = getattr(model, "config", None)
        if dag_schedule is not None:
            target = dag_config(model)
            if target is None:
                raise TypeError(
                    f"PldrTrainer: a DAG schedule needs a model whose config has {', '.join(DAG_WEIGHT_FIELDS)} "
                    f"(a PLDR-LLM); got {type(_unwrap(model)).__name__}"
                )
            if target.has_fixed_G:
                raise ValueError(
                    "PldrTrainer: this PLDR-LLM has a fixed G (custom_G_type or collapsed), for which no DAG terms "
                    "are computed; drop dag_schedule or train the learned-G model"
                )
        self.dag_schedule = dag_schedule
        # Trainer.__init__ overwrites config.use_cache with args.use_cache; remember what the model had
        self._use_cache_to_save = getattr(config, "use_cache", None)
        self.decay_all_parameters = decay_all_parameters
        self.log_dag_losses = log_dag_losses
        super().__init__(*args, **kwargs)
        self._train_aux = _AuxAccumulator()
        self._logged_weights = None
        self._eval_aux = _AuxAccumulator()

    def get_decay_parameter_names(self, model) -> list[str]:
        if self.decay_all_parameters:
            return [name for name, _ in model.named_parameters()]
        return super().get_decay_parameter_names(model)

    def current_dag_weights(self) -> tuple[float, float, float] | None:
        """The DAG weights of this step: the schedule's, else the model config's (None for another model)."""
        if self.dag_schedule is not None:
            return self.dag_schedule.weights_at(self.state.global_step)
        config = dag_config(self.model)
        return None if config is None else tuple(float(getattr(config, name)) for name in DAG_WEIGHT_FIELDS)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        extra = {}
        if self.dag_schedule is not None:
            extra["dag_weights"] = self.dag_schedule.weights_at(self.state.global_step)
            if model.training:
                # logged with the window's values: the weights of its last step
                self._logged_weights = extra["dag_weights"]
        if self.log_dag_losses and dag_config(model) is not None:
            extra["output_dag_losses"] = True
        loss, outputs = super().compute_loss(
            model, {**inputs, **extra}, return_outputs=True, num_items_in_batch=num_items_in_batch
        )
        if isinstance(outputs, dict) and outputs.get("lm_loss") is not None:
            self._record(outputs, inputs, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    def _record(self, outputs, inputs, num_items_in_batch) -> None:
        labels, shift_labels = inputs.get("labels"), inputs.get("shift_labels")
        targets = shift_labels if shift_labels is not None else labels[..., 1:]
        tokens = (targets != -100).sum()  # the label tokens the model averaged this batch's lm_loss over
        divisor = num_items_in_batch if num_items_in_batch is not None else tokens.clamp(min=1)
        if isinstance(divisor, torch.Tensor):
            divisor = divisor.to(outputs["lm_loss"].device)
        lm_sum = outputs["lm_loss"].detach().float() * divisor
        dag_losses = outputs.get("dag_losses")
        dag_sums = None if dag_losses is None else dag_losses.detach().float() * tokens.to(dag_losses.device)
        (self._train_aux if self.model.training else self._eval_aux).add(lm_sum, dag_sums, tokens)

    def _reduce(self, aux: _AuxAccumulator) -> tuple[torch.Tensor, torch.Tensor]:
        """Sums over processes of [CE sum, tokens] and [DAG sums (3), tokens]; a collective on every rank."""
        device = self.args.device
        both = torch.zeros(6, device=device)
        if aux.lm is not None:
            both[:2] = aux.lm.to(device)
        if aux.dag is not None:
            both[2:] = aux.dag.to(device)
        if self.accelerator.num_processes > 1:
            both = self.accelerator.reduce(both, reduction="sum")
        return both[:2], both[2:]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # "loss" marks the periodic training log, which every process calls at the same step
        if "loss" in logs:
            if not self._train_aux.empty or self.accelerator.num_processes > 1:
                lm, dag = self._reduce(self._train_aux)
                if lm[1] > 0:
                    logs["lm_loss"] = (lm[0] / lm[1]).item()
                if dag[3] > 0:
                    logs.update(zip(DAG_LOG_NAMES, (dag[:3] / dag[3]).tolist()))
            self._train_aux.reset()
            weights = self._logged_weights or self.current_dag_weights()
            if weights is not None:
                logs.update(zip(DAG_WEIGHT_FIELDS, weights))
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
        lm, dag = self._reduce(self._eval_aux)
        if lm[1] > 0:
            output.metrics[f"{metric_key_prefix}_lm_loss"] = (lm[0] / lm[1]).item()
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
