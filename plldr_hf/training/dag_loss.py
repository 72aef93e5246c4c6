"""The DAG regulariser of PLDR-LLM training as a callback any `Trainer` takes: `DagLossCallback`, the one owner of
the DAG-weight schedule (arXiv 2410.16703, the NOTEARS-style term on A_LM, A_P and G_LM).

| what | where |
|---|---|
| weights (A_LM, A_P, G_LM) at each optimizer step | `DagSchedule.weights_at` |
| the weights into each forward call that carries labels (stock `Trainer`, `Seq2SeqTrainer`, `PldrTrainer`) | `DagLossCallback` (a forward pre-hook) |
| CE + DAG for trainers that compute their own loss from logits (TRL's `SFTTrainer`) | `DagLossCallback.compute_loss` (a `compute_loss_func`) |
| `lm_loss`, `dag_a_lm`, `dag_a_p`, `dag_g_lm`, `dag_weight_*` in the training logs; `eval_lm_loss`, `eval_dag_*` | `DagLossCallback.on_log` / `on_evaluate` |

The model computes the DAG term itself when a call carries labels and `dag_weights` (`PldrllmForCausalLM.forward`),
weighting each sequence by its label tokens over `num_items_in_batch` as the cross-entropy is weighted, so gradient
accumulation and DDP see the same objective. The callback only decides the weights of each call: the model config is
never changed, and the schedule depends only on the completed optimizer steps, so a resumed run continues it exactly.

Logging: the values are added to the `logs` of `on_log` (and to `state.log_history`). The reporting integrations
(TensorBoard, W&B, ...) come before user callbacks in a `Trainer`, so to reach them too, put the callback first with
`DagLossCallback.add_to(trainer)` (`PldrTrainer` does this).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import DefaultFlowCallback


__all__ = ["DAG_LOG_NAMES", "DAG_WEIGHT_FIELDS", "DagLossCallback", "DagSchedule", "dag_config"]

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

    Example:

    ```python
    >>> from plldr_hf.training.dag_loss import DagSchedule
    >>> schedule = DagSchedule(weights=(0.04, 0.04, 0.04), warmup_steps=4)
    >>> [schedule.weights_at(step)[0] for step in range(5)]
    [0.01, 0.02, 0.03, 0.04, 0.04]
    ```
    """

    weights: tuple[float, float, float]
    warmup_steps: int = 0
    start_step: int = 0

    def __post_init__(self):
        weights = self.weights
        if isinstance(weights, (int, float)) and not isinstance(weights, bool):
            weights = (weights,) * 3
        weights = tuple(float(w) for w in weights) if isinstance(weights, Sequence) else ()
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


class _Totals:
    """Token totals of the cross-entropy and of the three DAG values over a logging window: [CE sum, label tokens]
    and [DAG sums (3), label tokens], on the training device."""

    def __init__(self):
        self.lm = self.dag = None

    @staticmethod
    def _add(total, values):
        values = values.detach().float()
        return values if total is None else total + values.to(total.device)

    def add(self, lm_sum: torch.Tensor, dag_sums: torch.Tensor | None, tokens: torch.Tensor) -> None:
        tokens = tokens.detach().float().reshape(1)
        self.lm = self._add(self.lm, torch.cat([lm_sum.detach().float().reshape(1).to(tokens.device), tokens]))
        if dag_sums is not None:
            self.dag = self._add(self.dag, torch.cat([dag_sums.detach().float().reshape(3).to(tokens.device), tokens]))

    def pop_means(self, device, reduce: bool) -> dict[str, float]:
        """`lm_loss` and the DAG components as token means, summed over processes when `reduce` (a collective every
        process must call), and the window reset."""
        both = torch.zeros(6, device=device)
        if self.lm is not None:
            both[:2] = self.lm.to(device)
        if self.dag is not None:
            both[2:] = self.dag.to(device)
        self.lm = self.dag = None
        if reduce:
            torch.distributed.all_reduce(both)
        means = {}
        if both[1] > 0:
            means["lm_loss"] = (both[0] / both[1]).item()
        if both[5] > 0:
            means.update(zip(DAG_LOG_NAMES, (both[2:5] / both[5]).tolist()))
        return means


def _distributed() -> bool:
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


class DagLossCallback(TrainerCallback):
    """Adds the scheduled DAG term to the loss of a PLDR-LLM trained by any `Trainer`, and logs its components.

    Args:
        weights: DAG weights on (A_LM, A_P, G_LM), or one number for all three.
        warmup_steps: linear ramp of the weights over the first optimizer steps (`DagSchedule`).
        start_step: no DAG term before this step.
        log_dag: compute and log the DAG values even where the weights are 0 (monitoring only; costs one matrix
            exponential per layer, sequence and head).

    Use it with the stock `Trainer` / `Seq2SeqTrainer`:

    ```python
    >>> from transformers import Trainer
    >>> from plldr_hf.training import DagLossCallback
    >>> dag = DagLossCallback(weights=(0.005, 0.005, 0.005), warmup_steps=100)  # doctest: +SKIP
    >>> trainer = Trainer(model=model, args=args, train_dataset=blocks, callbacks=[dag])  # doctest: +SKIP
    >>> dag.add_to(trainer)  # optional: first in line, so TensorBoard / W&B log the DAG values too  # doctest: +SKIP
    ```

    and with trainers that compute the loss from the logits themselves (TRL's `SFTTrainer`), also as their
    `compute_loss_func`: `SFTTrainer(..., callbacks=[dag], compute_loss_func=dag.compute_loss)`.

    A forward pre-hook on the PLDR-LLM gives each call that carries labels this step's `dag_weights`; the model then
    returns loss = CE + DAG term and the callback's forward hook records `lm_loss` and `dag_losses` for the logs.
    Calls without labels during training (TRL's loss path) are asked for the DAG values, which `compute_loss` adds
    to the cross-entropy with the same token weighting as the model's own loss. The hooks are installed when the
    trainer is built and stay until `remove()`: a model called with labels after training gets the last step's weights.
    """

    def __init__(self, weights=(0.0, 0.0, 0.0), warmup_steps: int = 0, start_step: int = 0, log_dag: bool = False):
        self.schedule = DagSchedule(weights, warmup_steps, start_step)
        if not isinstance(log_dag, bool):
            raise ValueError(f"DagLossCallback: log_dag must be True or False, got {log_dag!r}")
        self.log_dag = log_dag
        self.step = 0
        self.active = False
        self._model = None
        self._hooks = []
        self._last_sequence_values = None
        self._train, self._eval = _Totals(), _Totals()
        self._device = None

    # -- wiring ----------------------------------------------------------------------------------------------------

    def attach(self, model) -> None:
        """Install the hooks on the PLDR-LLM inside `model` (DDP, FSDP and PEFT wrappers are looked through)."""
        target = _unwrap(model)
        config = dag_config(target)
        if config is None:
            raise TypeError(
                f"DagLossCallback needs a PLDR-LLM, whose config has {', '.join(DAG_WEIGHT_FIELDS)}; got "
                f"{type(target).__name__}"
            )
        if config.has_fixed_G and (any(self.schedule.weights) or self.log_dag):
            raise ValueError(
                "DagLossCallback: this PLDR-LLM has a fixed G (custom_G_type or collapsed), for which no DAG terms "
                "are computed; drop the callback or train the learned-G model"
            )
        if target is self._model:
            return
        self.remove()
        self._model = target
        self._hooks = [
            target.register_forward_pre_hook(self._before_forward, with_kwargs=True),
            target.register_forward_hook(self._after_forward, with_kwargs=True),
            target.get_decoder().register_forward_hook(self._after_decoder),
        ]

    def remove(self) -> None:
        """Take the hooks off the model."""
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._model = [], None

    def add_to(self, trainer) -> DagLossCallback:
        """Add this callback to `trainer` right after its flow callback, ahead of the reporting integrations, so
        that they log the DAG values too (public `Trainer.add_callback` / `remove_callback` only)."""
        later = [
            cb
            for cb in trainer.callback_handler.callbacks
            if not isinstance(cb, DefaultFlowCallback) and cb is not self
        ]
        if self in trainer.callback_handler.callbacks:
            trainer.remove_callback(self)
        for callback in later:
            trainer.remove_callback(callback)
        for callback in [self, *later]:
            trainer.add_callback(callback)
        self.attach(trainer.model)
        self.step = trainer.state.global_step
        return self

    # -- hooks -------------------------------------------------------------------------------------------------------

    def weights(self) -> tuple[float, float, float]:
        """The DAG weights of the current optimizer step."""
        return self.schedule.weights_at(self.step)

    def _before_forward(self, module, args, kwargs):
        if kwargs.get("fused_lm_head") or kwargs.get("dag_weights") is not None:
            return None  # TRL's metrics-only pass, or a caller that chose its own weights
        extra = {}
        if kwargs.get("labels") is not None or kwargs.get("shift_labels") is not None:
            extra["dag_weights"] = self.weights()
            if self.log_dag:
                extra["output_dag_losses"] = True
        elif self.active and module.training and (any(self.weights()) or self.log_dag):
            extra["output_dag_losses"] = True  # for `compute_loss` (a trainer that computes the loss itself)
        return (args, {**kwargs, **extra}) if extra else None

    def _after_decoder(self, module, args, output):
        values = getattr(output, "dag_losses", None)
        self._last_sequence_values = None if values is None else (values, getattr(output, "sequence_ids", None))

    def _after_forward(self, module, args, kwargs, output):
        lm_loss = getattr(output, "lm_loss", None) if isinstance(output, dict) else None
        labels, shift_labels = kwargs.get("labels"), kwargs.get("shift_labels")
        if lm_loss is None or (labels is None and shift_labels is None):
            return
        targets = shift_labels if shift_labels is not None else labels[..., 1:]
        tokens = (targets != -100).sum()  # the label tokens the model averaged this batch's lm_loss over
        divisor = kwargs.get("num_items_in_batch")
        divisor = tokens.clamp(min=1) if divisor is None else divisor
        lm_sum = lm_loss.detach().float() * (divisor.to(lm_loss.device) if torch.is_tensor(divisor) else divisor)
        dag_losses = output.get("dag_losses")
        dag_sums = None if dag_losses is None else dag_losses.detach().float() * tokens.to(dag_losses.device)
        self._device = lm_loss.device
        (self._train if module.training else self._eval).add(lm_sum, dag_sums, tokens.to(lm_loss.device))

    def compute_loss(self, outputs, labels, num_items_in_batch=None):
        """A `compute_loss_func` (`Trainer` / TRL's `SFTTrainer`): the cross-entropy of `outputs.logits` against
        `labels` (the model's own `loss_function`), plus this step's DAG term with the model's token weighting."""
        model = self._model
        if model is None:
            raise RuntimeError("DagLossCallback.compute_loss: add the callback to the trainer too (callbacks=[...])")
        lm_loss = model.loss_function(
            logits=outputs.logits, labels=labels, vocab_size=model.config.vocab_size,
            num_items_in_batch=num_items_in_batch,
        )  # fmt: skip
        stashed, self._last_sequence_values = self._last_sequence_values, None
        tokens = (labels[..., 1:] != -100).sum()
        divisor = tokens.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        if torch.is_tensor(divisor):
            divisor = divisor.to(lm_loss.device)
        dag_sums = None
        loss = lm_loss
        if stashed is not None:
            per_sequence, sequence_ids = stashed
            counts = type(model)._label_tokens_per_sequence(labels, None, sequence_ids).to(per_sequence.dtype)
            dag_sums = (per_sequence * counts[:, None]).sum(0)
            weights = self.weights()
            if any(weights):
                loss = lm_loss + ((dag_sums @ dag_sums.new_tensor(weights)) / divisor).to(lm_loss.dtype)
        totals = self._train if model.training else self._eval
        self._device = lm_loss.device
        totals.add(lm_loss.detach().float() * divisor, dag_sums, tokens.to(lm_loss.device))
        return loss

    # -- callback events ---------------------------------------------------------------------------------------------

    def on_init_end(self, args, state, control, model=None, **kwargs):
        self.attach(model)
        self.step = state.global_step

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.attach(model)
        self.step, self.active = state.global_step, True

    def on_step_begin(self, args, state, control, **kwargs):
        self.step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        # evaluation and logging after this step use the weights the next step will have, as the model sees them
        self.step = state.global_step
        self._last_sequence_values = None  # holds the step's graph otherwise

    def on_train_end(self, args, state, control, **kwargs):
        self.active = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        # "loss" marks the periodic training log, which every process writes at the same step
        if logs is None or "loss" not in logs:
            return
        added = self._train.pop_means(self._device or args.device, _distributed())
        added.update(zip(DAG_WEIGHT_FIELDS, self.schedule.weights_at(max(state.global_step - 1, 0))))
        logs.update(added)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(added)

    def evaluation_metrics(self, prefix: str = "eval") -> dict[str, float]:
        """`{prefix}_lm_loss` and `{prefix}_dag_*` of the evaluation since the last call (a collective under DDP)."""
        means = self._eval.pop_means(self._device or "cpu", _distributed())
        return {f"{prefix}_{name}": value for name, value in means.items()}

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        # the stock Trainer: after its log of the metrics (`PldrTrainer` adds them before, in its evaluation loop)
        prefix = next((key[: -len("_loss")] for key in (metrics or {}) if key.endswith("_loss")), "eval")
        added = {k: v for k, v in self.evaluation_metrics(prefix).items() if k not in (metrics or {})}
        if metrics is not None and added:
            metrics.update(added)
            if state.log_history:
                state.log_history[-1].update(added)

    def on_predict(self, args, state, control, metrics=None, **kwargs):
        self._eval = _Totals()
