"""Trainer callbacks of both families' runs: clipping by value, step timing, a time budget, the order parameters of a
PLDR-LLM before and after training, and the progress bar (`add_run_callbacks` installs a run's set).

The DAG term and its schedule are `DagLossCallback` (`plldr_hf.training.dag_loss`), which any Trainer takes.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback


__all__ = [
    "ClipGradValueCallback",
    "LossProgressCallback",
    "OrderParameterCallback",
    "RunCallbacks",
    "StepTimerCallback",
    "TimeBudgetCallback",
    "add_run_callbacks",
    "use_progress_bar",
]

logger = logging.getLogger(__name__)


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
        self.start = None
        self.tokens = None

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        self.start = time.perf_counter()
        if self.training_bar is not None and self.desc:
            self.training_bar.set_description(self.desc)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        # the validation loss shown is the language-model part (`eval_lm_loss`, what the report's perplexity is
        # exp of) when the loss also holds the DAG term; the training loss is the whole objective
        shown = {"loss": ("loss",), "val loss": ("eval_lm_loss", "eval_loss"), "val acc": ("eval_accuracy",)}
        tokens = logs.get("num_input_tokens_seen")
        if isinstance(tokens, (int, float)) and tokens > 0:
            # tokens seen, and their rate since the first step (the bar's own rate counts steps)
            elapsed = time.perf_counter() - (self.start or time.perf_counter())
            self.tokens = f"{tokens:,.0f}" + (f" ({tokens / elapsed:,.0f}/s)" if elapsed > 0 else "")
        postfix = {}
        for label, keys in shown.items():
            value = next((logs[key] for key in keys if isinstance(logs.get(key), float)), None)
            if value is not None:
                postfix[label] = f"{value:.4g}"
        if self.tokens:
            postfix["tokens"] = self.tokens
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


class OrderParameterCallback(TrainerCallback):
    """The order parameters of a PLDR-LLM with a learned G (`plldr_hf.models.pldrllm.diagnostics.order_parameters`)
    before the first step (`before`), at every evaluation (G_LM's, across the calibration inputs, as
    `order_parameter_G_LM` in the log history beside the validation loss) and after the last step (`after`),
    measured on the main process.

    The untrained model's values are kept in `init_file`, so a resumed run (`resumed=True`) reports the values of
    the run's start instead of measuring the checkpoint. The measurement restores the random-number state it found,
    so the run trains exactly as without it. Under FSDP the parameters are sharded across processes and one process
    cannot run the model alone: nothing is measured, and the log says so.
    """

    def __init__(self, init_file, resumed: bool = False, real_text: list | None = None):
        self.init_file = Path(init_file)
        self.resumed = resumed
        # held-out text the model is trained to predict (validation blocks, as token ids): calibration inputs it
        # visits, measured beside the default ones after the last step
        self.real_text = real_text
        self.before = self.after = self.after_real_text = None

    def _measure(self, args, model, calibration=None):
        from plldr_hf.models.pldrllm.diagnostics import order_parameters

        if args.fsdp:
            logger.warning("order parameters not measured: the model is sharded with FSDP")
            return None
        cpu = torch.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        try:
            return order_parameters(model, calibration)
        finally:
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if self.resumed:
            self.before = json.loads(self.init_file.read_text()) if self.init_file.exists() else None
            return
        self.before = self._measure(args, model)
        self.init_file.write_text(json.dumps(self.before))

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        logged = [entry["step"] for entry in state.log_history if "order_parameter_G_LM" in entry]
        if not state.is_world_process_zero or (logged and logged[-1] == state.global_step):
            return  # the final evaluation right after an evaluation at the last step
        measured = self._measure(args, model)
        if measured is not None:
            entry = {"order_parameter_G_LM": measured["across_inputs_max_over_layers"]["G_LM"]}
            stages = measured.get("stages_of_the_headline_layer") or {}
            entry.update({f"stage_{key}": value for key, value in stages.items() if key.startswith("relative_")})
            state.log_history.append({**entry, "step": state.global_step})

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero:
            self.after = self._measure(args, model)
            if self.real_text:
                self.after_real_text = self._measure(args, model, self.real_text)


@dataclass
class RunCallbacks:
    """The callbacks `add_run_callbacks` installed that a run reads back afterwards."""

    timer: StepTimerCallback
    order_parameters: OrderParameterCallback | None = None


def add_run_callbacks(
    trainer,
    *,
    clip_by_value: bool = False,
    progress: bool = True,
    desc: str | None = None,
    order_parameter_file=None,
    resumed: bool = False,
    real_text: list | None = None,
) -> RunCallbacks:
    """Installs the callbacks of a training run on `trainer`: step timing, clipping by value 1.0 (the PLDR-LLM
    reference recipe), the order parameters before and after (`order_parameter_file`: a PLDR-LLM with a learned G)
    and the progress display (`use_progress_bar`)."""
    installed = RunCallbacks(timer=StepTimerCallback())
    trainer.add_callback(installed.timer)
    if clip_by_value:
        trainer.add_callback(ClipGradValueCallback(1.0))
    if order_parameter_file is not None:
        installed.order_parameters = OrderParameterCallback(order_parameter_file, resumed=resumed, real_text=real_text)
        trainer.add_callback(installed.order_parameters)
    use_progress_bar(trainer, progress, desc)
    return installed
