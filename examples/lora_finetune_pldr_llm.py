"""LoRA fine-tuning of a PLDR-LLM with PEFT: attention projections and PLGA tensors, merged before `collapse()`.

The adapters sit on the attention projections `wq`, `wk`, `wv`, `dense` (q/k/v/o) and, through PEFT's
`target_parameters`, on the raw PLGA tensors `plgatt_layer.{Wlst, blst, pwlst, alst, balst}` of every layer (the
DAG terms are computed inside `plgatt_layer.forward`, so the PLGA adapters receive their gradient; `--dag-weights`
turns the regulariser on). `--ffn` adds the feed-forward GLUs through a regex (`gluw*` also names the metric
learner's GLUs, which a plain list entry would match too). After training the adapter is saved, merged into the
weights with `merge_and_unload()`, and only then is the merged model collapsed to a constant G
(`collapse(force=True)`; an approximation unless G is input-invariant, which the printed order parameter tells).

    python examples/lora_finetune_pldr_llm.py --tiny                 # CPU, seconds: trains a tiny base first
    python examples/lora_finetune_pldr_llm.py --model pldrllm-run --dataset my_texts/ --max-steps 500 \
        --dag-weights 0.01,0.01,0.01

Writes to `--output-dir`: `adapter/` (PEFT), `merged/` (uncollapsed, for further training), `collapsed/`
(constant-G SDPA model) and `lora_report.json` (validation perplexity before, after, after collapse; order
parameters).
"""

import argparse
import json
import logging
import sys
from pathlib import Path


PLGA_TENSORS = ("Wlst", "blst", "pwlst", "alst", "balst")
ATTENTION = ("wq", "wk", "wv", "dense")


def lora_config(config, r: int, alpha: int, plga: bool = True, ffn: bool = False):
    from peft import LoraConfig, TaskType

    # a list matches module-name suffixes; a string is a full-name regex (needed to keep the FFN GLUs apart from
    # the metric learner's `reslayerAs.*.denseAs.*.gluw*`)
    if ffn:
        targets = r".*\.mha1\.(" + "|".join(ATTENTION) + r")|.*\.ffn\.gluw[123]"
    else:
        targets = list(ATTENTION)
    parameters = []
    if plga:
        parameters = [
            f"decoder.dec_layers.{i}.mha1.plgatt_layer.{name}"
            for i in range(config.num_hidden_layers)
            for name in PLGA_TENSORS
        ]
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=r,
        lora_alpha=alpha,
        lora_dropout=0.0,
        target_modules=targets,
        target_parameters=parameters,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="trained PLDR-LLM folder (model + tokenizer), e.g. a `train pldrllm` output")
    parser.add_argument("--tiny", action="store_true", help="train a tiny base model first (CPU, seconds)")
    parser.add_argument("--dataset", nargs="+", default=[], help="fine-tuning text (default: embedded Shakespeare)")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--output-dir", default="pldrllm-lora")
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--r", type=int, default=8, help="LoRA rank")
    parser.add_argument("--alpha", type=int, default=16, help="LoRA alpha")
    parser.add_argument("--no-plga", action="store_true", help="adapters on the attention projections only")
    parser.add_argument("--ffn", action="store_true", help="also adapt the feed-forward GLUs")
    parser.add_argument("--dag-weights", default="0,0,0", help="DAG regulariser weights a,p,g (default: off)")
    parser.add_argument("--max-eval-blocks", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, set_seed

    import plldr_hf  # noqa: F401  (registers model_type "pldrllm" with the Auto classes)
    from plldr_hf.evaluation import perplexity_from_metrics
    from plldr_hf.models.pldrllm.diagnostics import order_parameters
    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.options import TrainOptions, parse_dag_weights
    from plldr_hf.training.preprocessing import pack_into_blocks
    from plldr_hf.training.run import train
    from plldr_hf.training.trainer import DagSchedule, PldrTrainer

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = args.model
    if args.tiny:
        model_dir = model_dir or str(out / "base")
        if args.model is None:
            train(
                TrainOptions(
                    size="tiny",
                    output_dir=model_dir,
                    max_steps=30,
                    max_train_documents=2000,
                    vocab_size=512,
                    max_eval_blocks=16,
                    logging_steps=10,
                    eval_steps=0,
                    report_to=[],
                )
            )
        args.max_steps = min(args.max_steps, 20)
        args.max_eval_blocks = min(args.max_eval_blocks, 16)
        args.block_size = min(args.block_size, 64)
    if model_dir is None:
        parser.error("give --model PATH (a trained PLDR-LLM with its tokenizer) or --tiny")

    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if model.config.model_type != "pldrllm":
        raise ValueError(f"{model_dir} holds a {model.config.model_type!r} model; this example fine-tunes PLDR-LLM")
    if model.config.custom_G_type is not None or model.config.collapsed:
        raise ValueError(f"{model_dir} has a fixed G (collapsed or custom_G_type); fine-tune the uncollapsed model")
    block_size = min(args.block_size, model.config.max_position_embeddings)
    corpus = load_text_corpus(
        args.dataset or None,
        text_column=args.text_column,
        max_train_documents=2000 if args.tiny else None,
        seed=args.seed,
    )
    train_blocks = pack_into_blocks(corpus["train"], tokenizer, block_size, desc="Packing train")
    eval_blocks = pack_into_blocks(
        corpus["validation"], tokenizer, block_size, max_blocks=args.max_eval_blocks, desc="Packing validation"
    )
    calibration = [eval_blocks[i]["input_ids"][: max(1, block_size - 16)] for i in range(min(8, len(eval_blocks)))]

    weights = parse_dag_weights(args.dag_weights)
    peft_model = get_peft_model(model, lora_config(model.config, args.r, args.alpha, not args.no_plga, args.ffn))
    peft_model.print_trainable_parameters()
    # the HF fine-tuning recipe of the v52-81M-FT cards (model cards of fromthesky/PLDR-LLM-v52-81M-FT-*): warm-up 20, norm clipping 1.0,
    # cosine to 1 % of the peak; no weight decay on the adapters
    training_args = TrainOptions(
        output_dir=str(out / "trainer"),
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        per_device_train_batch_size=args.batch_size,
        clip_by="norm",
        logging_steps=max(1, args.max_steps // 20),
        eval_steps=0,
        save_total_limit=1,
        report_to=["none"],
        seed=args.seed,
        weight_decay=0.0,
        lr_scheduler_kwargs={"min_lr_rate": 0.01},
    )
    trainer = PldrTrainer(
        model=peft_model,
        args=training_args,
        train_dataset=train_blocks,
        eval_dataset=eval_blocks,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        dag_schedule=DagSchedule(weights) if any(weights) else None,
    )
    report = {"before": perplexity_from_metrics(trainer.evaluate())}
    trainer.train()
    report["after"] = perplexity_from_metrics(trainer.evaluate())
    peft_model.save_pretrained(out / "adapter")

    # merge first: collapse() refuses a model that carries PEFT adapters
    merged = peft_model.merge_and_unload()
    merged.config.use_cache = True
    merged.save_pretrained(out / "merged")
    tokenizer.save_pretrained(out / "merged")
    report["order_parameter"] = order_parameters(merged, calibration)
    collapse_report = merged.collapse(calibration=calibration, force=True)
    print(collapse_report)
    report["collapse"] = collapse_report.to_dict()
    collapsed_eval = PldrTrainer(
        model=merged,
        args=training_args,
        eval_dataset=eval_blocks,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    ).evaluate()
    report["after_collapse"] = perplexity_from_metrics(collapsed_eval)
    merged.config.use_cache = True
    merged.save_pretrained(out / "collapsed")
    tokenizer.save_pretrained(out / "collapsed")
    (out / "lora_report.json").write_text(json.dumps(report, indent=2, default=str))
    print(
        f"validation perplexity: before {report['before']:.3f}, after LoRA {report['after']:.3f}, "
        f"after merge + collapse {report['after_collapse']:.3f}; order parameter of G_LM (SOC across the "
        f"calibration inputs, max over layers, as in the collapse report above) "
        f"{report['order_parameter']['across_inputs_max_over_layers']['G_LM']:.3g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
