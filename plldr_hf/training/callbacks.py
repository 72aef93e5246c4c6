"""Trainer callbacks for PLDR-LLM training: the DAG-weight schedule, clipping by value, and step timing.

The DAG regulariser itself is computed by the model's forward (`PldrllmForCausalLM`: `loss = lm_loss + dag_loss`,
weights from the config fields `dag_weight_a_lm`, `dag_weight_a_p`, `dag_weight_g_lm` or the `dag_weights`
argument of each call). `DagLossCallback` holds a schedule of those weights; `PldrTrainer` passes the scheduled
weights into every forward call, so the config is never changed by training. A callback cannot put values into
`state.log_history` or the reporting integrations (they run before user callbacks), so the logging of the DAG
components is done by `plldr_hf.training.trainer.PldrTrainer` too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback


__all__ = [
    "DAG_WEIGHT_FIELDS",
    "DagLossCallback",
    "ClipGradValueCallback",
    "LossProgressCallback",
    "StepTimerCallback",
    "dag_config",
    "use_progress_bar",
]

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


def _check_weights(weights: Sequence[float]) -> tuple[float, float, float]:
    weights = tuple(float(w) for w in weights)
    if len(weights) != 3:
        raise ValueError(f"DAG weights are three numbers (A_LM, A_P, G_LM); got {len(weights)}: {weights}")
    if any(not w >= 0 for w in weights):
        raise ValueError(f"DAG weights must be non-negative finite numbers; got {weights}")
    return weights


class DagLossCallback(TrainerCallback):
    """Turns the DAG regulariser on and schedules its weights, with `PldrTrainer`.

    Every forward call of training and evaluation gets `dag_weights = weights × factor(step)` from `PldrTrainer`,
    where `step` is the number of completed optimizer steps and

        factor(step) = 0                                          for step < start_step
                       min(1, (step − start_step + 1) / warmup_steps)   otherwise (1 when warmup_steps == 0).

    The schedule depends only on `state.global_step`, so a resumed run continues it exactly; the model config is not
    changed. Works with a PEFT model and under DDP / FSDP (every process passes the same weights). With a Trainer
    that does not pass the weights, training stops at the first step with an error naming `PldrTrainer`.

    Args:
        weights: target weights (A_LM, A_P, G_LM); None: the weights in the model config.
        warmup_steps: length of the linear ramp to the target weights (0: constant).
        start_step: optimizer steps with the DAG term off before the ramp starts.
        form: optionally set `config.dag_loss_form` (`"log_ratio"` or `"notears"`) at the start of training.

    Example:

    ```python
    >>> from plldr_hf.training.callbacks import DagLossCallback
    >>> callback = DagLossCallback(weights=(0.04, 0.04, 0.04), warmup_steps=4)
    >>> [callback.weights_at(step)[0] for step in range(5)]
    [0.01, 0.02, 0.03, 0.04, 0.04]
    ```
    """

    def __init__(
        self,
        weights: Sequence[float] | None = None,
        warmup_steps: int = 0,
        start_step: int = 0,
        form: str | None = None,
    ):
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be a non-negative integer, got {start_step!r}")
        if form is not None and form not in ("log_ratio", "notears"):
            raise ValueError(f"DAG loss form must be 'log_ratio' or 'notears', got {form!r}")
        self.weights = None if weights is None else _check_weights(weights)
        self.warmup_steps = warmup_steps
        self.start_step = start_step
        self.form = form
        # set by the trainer that passes the weights into the forward calls (PldrTrainer)
        self.applied = False

    def factor(self, step: int) -> float:
        if step < self.start_step:
            return 0.0
        if self.warmup_steps == 0:
            return 1.0
        return min(1.0, (step - self.start_step + 1) / self.warmup_steps)

    def weights_at(self, step: int) -> tuple[float, float, float]:
        if self.weights is None:
            raise ValueError("DagLossCallback: no target weights yet (they are read from the model at train begin)")
        factor = self.factor(step)
        return tuple(w * factor for w in self.weights)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        config = dag_config(model)
        if config is None:
            name = type(_unwrap(model)).__name__ if model is not None else None
            raise TypeError(
                f"DagLossCallback needs a model whose config has {', '.join(DAG_WEIGHT_FIELDS)} (a PLDR-LLM); "
                f"got {name}"
            )
        if getattr(config, "custom_G_type", None) is not None or getattr(config, "collapsed", False):
            raise ValueError(
                "DagLossCallback: this PLDR-LLM has a fixed G (custom_G_type or collapsed), for which no DAG terms "
                "are computed; remove the callback or train the learned-G model"
            )
        if self.weights is None:
            self.weights = _check_weights([getattr(config, name) for name in DAG_WEIGHT_FIELDS])
        if self.form is not None:
            config.dag_loss_form = self.form

    def on_step_end(self, args, state, control, **kwargs):
        if not self.applied:
            raise RuntimeError(
                "DagLossCallback: the trainer did not pass the scheduled DAG weights into the model; train with "
                "plldr_hf.training.trainer.PldrTrainer, or set the weights in the model config without the callback"
            )


class ClipGradValueCallback(TrainerCallback):
    """Clips every gradient entry to [−clip_value, clip_value] before the optimizer step (the reference recipe,
    the reference code, github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality). Trainer's own `max_grad_norm` clips by norm; set it to 0 when using this.

    Runs after gradient accumulation and the DDP all-reduce; refuses fp16 (GradScaler-scaled gradients) and
    DeepSpeed (gradients not in `.grad`).
    """

    def __init__(self, clip_value: float = 1.0):
        if not clip_value > 0:
            raise ValueError(f"clip_value must be positive, got {clip_value!r}")
        self.clip_value = float(clip_value)

    def on_train_begin(self, args, state, control, **kwargs):
        if args.fp16:
            raise ValueError(
                "ClipGradValueCallback: fp16 gradients are loss-scaled when callbacks see them; use bf16, or clip "
                "by norm (max_grad_norm) with fp16"
            )
        if args.deepspeed:
            raise ValueError("ClipGradValueCallback: DeepSpeed keeps gradients outside `.grad`; clip by norm instead")

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        params = [p for p in model.parameters() if p.grad is not None]
        if params:
            torch.nn.utils.clip_grad_value_(params, self.clip_value)


class StepTimerCallback(TrainerCallback):
    """Records the wall time of every optimizer step (forward, backward and optimizer, including accumulation)
    in `step_times` and this process's CPU time in `cpu_times` (seconds); evaluation and checkpointing fall outside
    the measured interval. With one thread per run the CPU time is what the step costs on an idle core, so its ratio
    stays meaningful when other jobs share the machine."""

    def __init__(self):
        self.step_times: list[float] = []
        self.cpu_times: list[float] = []
        self._start = self._start_cpu = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start, self._start_cpu = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        if self._start is not None:
            self.step_times.append(time.perf_counter() - self._start)
            self.cpu_times.append(time.process_time() - self._start_cpu)
            self._start = self._start_cpu = None

    def summary(self, skip: int = 2) -> dict:
        """Median / mean seconds per step, skipping the first `skip` steps (allocation and warm-up)."""
        times = self.step_times[skip:] if len(self.step_times) > skip else self.step_times
        if not times:
            return {"steps_timed": 0, "median_s_per_step": None, "mean_s_per_step": None}
        ordered = sorted(times)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
        return {"steps_timed": len(times), "median_s_per_step": median, "mean_s_per_step": sum(times) / len(times)}


class TimeBudgetCallback(TrainerCallback):
    """Stops training once `seconds` of wall time have passed since the first step (checked after every step).

    Used by `plldr-hf quickstart --minutes N`: `max_steps` still defines the learning-rate schedule, and a run that
    hits the budget first ends early with its schedule unfinished; `stopped_early` and `steps_done` say so.
    """

    def __init__(self, seconds: float):
        if seconds <= 0:
            raise ValueError(f"TimeBudgetCallback: seconds must be positive, got {seconds}")
        self.seconds = seconds
        self.start: float | None = None
        self.stopped_early = False
        self.steps_done = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps_done = state.global_step
        if time.perf_counter() - self.start > self.seconds and state.global_step < state.max_steps:
            self.stopped_early = True
            control.should_training_stop = True
        return control


class LossProgressCallback(ProgressCallback):
    """Trainer's own tqdm bar (steps, rate, time left), with the latest training and validation loss shown on the bar
    instead of each log dict written as a line to stdout. Both families train with it (`use_progress_bar`)."""

    def __init__(self, desc: str | None = None):
        super().__init__()
        self.desc = desc

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if self.training_bar is not None and self.desc:
            self.training_bar.set_description(self.desc)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        shown = {"loss": "loss", "eval_loss": "val loss", "eval_accuracy": "val acc"}
        postfix = {label: f"{logs[key]:.4g}" for key, label in shown.items() if isinstance(logs.get(key), float)}
        if postfix:
            self.training_bar.set_postfix(postfix, refresh=False)


def use_progress_bar(trainer, enabled: bool = True, desc: str | None = None) -> None:
    """One progress display for every training run: `LossProgressCallback` when `enabled`, else nothing (Trainer's
    own `PrinterCallback`, which prints every log dict to stdout, is removed too; the logs stay in
    `trainer.state.log_history` and the reporting integrations)."""
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if enabled:
        trainer.add_callback(LossProgressCallback(desc))
