"""`PldrTrainer`: a `transformers.Trainer` with what a PLDR-LLM run adds beyond `DagLossCallback`.

The DAG term and its logging belong to `DagLossCallback` (`plldr_hf.training.dag_loss`), which any `Trainer` takes.
This subclass exists for three things the callback interface cannot reach:

- **The DAG callback first in line**, so the reporting integrations log `lm_loss` and the DAG values, and the
  evaluation metrics `eval_lm_loss`, `eval_dag_*` written into the metrics *before* Trainer logs them (a callback's
  `on_evaluate` runs after that log). Perplexity is `exp(eval_lm_loss)` even when `eval_loss` includes the DAG term.
- **`use_cache` on save.** Trainer writes `config.use_cache = args.use_cache` (False by default) into every saved
  config; the value the model had before is restored for saving (the released PLDR-LLM config has `true`).
- **Weight decay on every parameter** (`decay_all_parameters=True`), as in the reference recipe
  (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality); the stock Trainer exempts biases and LayerNorm
  weights, and `TrainingArguments` has no option for it.
"""

from __future__ import annotations

from transformers import Trainer

from plldr_hf.training.dag_loss import DAG_LOG_NAMES, DAG_WEIGHT_FIELDS, DagLossCallback, DagSchedule, dag_config


__all__ = ["DAG_LOG_NAMES", "DAG_WEIGHT_FIELDS", "DagSchedule", "PldrTrainer", "dag_config"]


class PldrTrainer(Trainer):
    """`Trainer` with the DAG callback ahead of the integrations, its evaluation metrics, `use_cache` restored on
    save, and optional weight decay on every parameter.

    Args:
        dag_schedule: the DAG weights of each step (`DagSchedule`); None: the model config's weights.
        decay_all_parameters: apply `args.weight_decay` to every parameter (reference recipe).
        log_dag_losses: also compute and log the DAG values when all DAG weights are 0 (monitoring only).
        *args, **kwargs: passed to `Trainer`.

    A PLDR-LLM gets a `DagLossCallback` (`self.dag_callback`); another model (the Llama baseline) trains as under
    the stock Trainer, and a DAG schedule for it is refused.

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
        self.dag_callback = None
        if dag_config(model) is not None:
            schedule = dag_schedule or DagSchedule(dag_config(model).dag_weights)
            self.dag_callback = DagLossCallback(
                schedule.weights, schedule.warmup_steps, schedule.start_step, log_dag=log_dag_losses
            )
            self.dag_callback.attach(model)  # refuses a fixed-G model with DAG weights before anything is built
        elif dag_schedule is not None:
            DagLossCallback(dag_schedule.weights).attach(model)  # raises: not a PLDR-LLM
        # Trainer.__init__ overwrites config.use_cache with args.use_cache; remember what the model had
        self._use_cache_to_save = getattr(config, "use_cache", None)
        self.decay_all_parameters = decay_all_parameters
        super().__init__(*args, **kwargs)
        if self.dag_callback is not None:
            self.dag_callback.add_to(self)

    def get_decay_parameter_names(self, model) -> list[str]:
        if self.decay_all_parameters:
            return [name for name, _ in model.named_parameters()]
        return super().get_decay_parameter_names(model)

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        if self.dag_callback is not None:
            self.dag_callback.evaluation_metrics()  # drop what a predict() or an earlier call left
        output = super().evaluation_loop(
            dataloader,
            description,
            prediction_loss_only=prediction_loss_only,
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        if self.dag_callback is not None:
            output.metrics.update(self.dag_callback.evaluation_metrics(metric_key_prefix))
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
