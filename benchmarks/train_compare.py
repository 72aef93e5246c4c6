"""PLDR-LLM vs a Llama of the same width and depth: same corpus, tokenizer, steps and recipe, in one process.

Both models are trained by `plldr_hf.training.run.train` on the embedded Shakespeare corpus with
one SentencePiece tokenizer (so one set of packed blocks), one after the other, so the wall time per step of the
two comes from the same run on the same machine. Reported: parameters, validation perplexity (exp of the
validation cross-entropy over every validation block), the median wall time per optimizer step (forward, backward,
optimizer; evaluation excluded; first 2 steps skipped) and their ratio, and PLDR-LLM's SOC order parameter
(`plldr_hf.models.pldrllm.diagnostics.diagnose` on validation prompts) before and after training.

    python benchmarks/train_compare.py --quick          # 8 steps each, minutes: checks the pipeline, times a step
    python benchmarks/train_compare.py --steps 200      # the README comparison (see the printed estimate)

Results: `<output-dir>/train_compare.json` and a Markdown table on stdout (paste it into the README).
"""

import argparse
import dataclasses
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path


def _fmt(value, spec=".3g"):
    return "n/a" if value is None else format(value, spec)


def markdown_table(results: dict) -> str:
    pldr, llama = results["pldrllm"], results["llama"]
    tp, tl = pldr["step_timing"]["median_s_per_step"], llama["step_timing"]["median_s_per_step"]
    before = (pldr["diagnostics"].get("order_parameter_before") or {}).get("across_inputs_max_over_layers") or {}
    after = (pldr["diagnostics"].get("order_parameter_after") or {}).get("across_inputs_max_over_layers") or {}
    ppl = {name: run["scores"]["validation"]["perplexity"] for name, run in (("pldrllm", pldr), ("llama", llama))}
    rows = [
        "| | PLDR-LLM (small) | Llama (same width/depth) |",
        "|---|---|---|",
        f"| parameters | {pldr['parameters']:,} | {llama['parameters']:,} |",
        f"| validation perplexity | {ppl['pldrllm']:.2f} | {ppl['llama']:.2f} |",
        f"| validation cross-entropy (nats/token) | {pldr['eval_metrics'].get('eval_lm_loss', pldr['eval_metrics']['eval_loss']):.4f} "
        f"| {llama['eval_metrics']['eval_loss']:.4f} |",
        f"| median s / optimizer step | {_fmt(tp, '.3f')} | {_fmt(tl, '.3f')} |",
        f"| step time ratio PLDR / Llama | {_fmt(tp / tl if tp and tl else None, '.2f')} | 1 |",
        f"| train wall time (s) | {pldr['train_metrics']['train_runtime']:.0f} | {llama['train_metrics']['train_runtime']:.0f} |",
        f"| order parameter G_LM (SOC), before → after | {_fmt(before.get('G_LM'))} → {_fmt(after.get('G_LM'))} | — |",
        f"| order parameter A_LM (SOC), before → after | {_fmt(before.get('A_LM'))} → {_fmt(after.get('A_LM'))} | — |",
    ]
    setup = results["setup"]
    note = (
        f"\n{setup['steps']} steps × {setup['batch_size']} blocks × {setup['block_size']} tokens, "
        f"{setup['vocab_size']}-piece SentencePiece tokenizer, {setup['eval_blocks']} validation blocks; "
        f"AdamW (0.9, 0.95), eps 1e-5, wd 0.1, lr {setup['learning_rate']:g} with {setup['warmup_steps']} warm-up "
        f"steps then cosine to 10 %, clipping by value 1.0, DAG weights {tuple(setup['dag_weights'])}; "
        f"{setup['torch_threads']} torch threads on {setup['machine']}; torch {setup['torch']}, transformers "
        f"{setup['transformers']}."
    )
    return "\n".join(rows) + note


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 steps each on 16 validation blocks (pipeline check)")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per model (default: 200)")
    parser.add_argument("--size", default="small", help="model size for both (default: small)")
    parser.add_argument("--batch-size", type=int, default=None, help="blocks per step (default: by size)")
    parser.add_argument("--block-size", type=int, default=None, help="tokens per block (default: by size)")
    parser.add_argument("--learning-rate", type=float, default=None, help="peak learning rate (default: 1e-3)")
    parser.add_argument("--warmup-steps", type=int, default=None, help="default: 10%% of the steps")
    parser.add_argument("--dag-weights", default="0,0,0", help="DAG weights a,p,g for PLDR-LLM (default: off)")
    parser.add_argument("--max-eval-blocks", type=int, default=None, help="cap on validation blocks (default: all)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output-dir", default="benchmarks/runs/train_compare")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    import transformers

    from plldr_hf.training.causal_lm import language_model_data
    from plldr_hf.training.options import TrainOptions, parse_dag_weights
    from plldr_hf.training.run import train

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    steps = 8 if args.quick else args.steps
    max_eval_blocks = 16 if args.quick and args.max_eval_blocks is None else args.max_eval_blocks
    out = Path(args.output_dir)
    base = TrainOptions(
        size=args.size,
        output_dir=str(out / "pldrllm"),
        batch_size=args.batch_size,
        block_size=args.block_size,
        max_steps=steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        dag_weights=parse_dag_weights(args.dag_weights),
        logging_steps=max(1, steps // 30),
        eval_steps=0,
        save_total_limit=1,
        max_eval_blocks=max_eval_blocks,
        report_to=[],
        seed=args.seed,
    )

    start = time.perf_counter()
    data = language_model_data(base)
    tokenizer, train_blocks, eval_blocks = data.tokenizer, data.train, data.validation
    print(
        f"data ready in {time.perf_counter() - start:.0f} s: {len(tokenizer)} pieces, {len(train_blocks)} train "
        f"and {len(eval_blocks)} validation blocks of {base.block_size} tokens"
    )

    results = {}
    for architecture in ("pldrllm", "llama"):
        options = dataclasses.replace(base, architecture=architecture, output_dir=str(out / architecture))
        if architecture == "llama":
            options.dag_weights = (0.0, 0.0, 0.0)
        results[architecture] = train(options, tokenizer=tokenizer).to_dict()
    warmup = base.warmup_steps if base.warmup_steps is not None else min(2000, max(1, steps // 10))
    results["setup"] = {
        "steps": steps,
        "size": base.size,
        "batch_size": base.batch_size,
        "block_size": base.block_size,
        "vocab_size": len(tokenizer),
        "eval_blocks": len(eval_blocks),
        "learning_rate": base.learning_rate,
        "warmup_steps": warmup,
        "dag_weights": list(base.dag_weights),
        "torch_threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''} ({os.cpu_count()} CPUs)".replace("  ", " "),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "total_wall_s": time.perf_counter() - start,
    }
    (out / "train_compare.json").write_text(json.dumps(results, indent=2, default=str))
    print()
    print(markdown_table(results))
    if args.quick:
        per_step = sum(results[a]["step_timing"]["median_s_per_step"] or 0 for a in ("pldrllm", "llama"))
        print(
            f"\nestimate for --steps {args.steps}: about {per_step * args.steps / 60:.0f} min of training for both "
            f"models together (plus evaluation and data preparation)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
