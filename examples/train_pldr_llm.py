"""Train a PLDR-LLM from scratch with the Hugging Face Trainer through the Python API (`TrainOptions`,
`plldr_hf.training.run.train`; `plldr-hf train pldrllm` has a flag for every option).

Default data: the Shakespeare corpus embedded in the package; `--dataset` takes local text / JSON / Parquet / CSV
files or a Hugging Face dataset name. The run trains a SentencePiece unigram tokenizer (byte fallback, the
released special ids), packs `[END]`-separated documents into fixed blocks, trains with the reference recipe
(AdamW 0.9/0.95, eps 1e-5, weight decay 0.1, clipping by value 1.0, warm-up then cosine to 10 %, bf16 on GPUs
that support it) and writes checkpoints, the final model and tokenizer, `loss_curves.png` and `train_report.json`
(validation perplexity, SOC order parameter before and after) to `--output-dir`.

    python examples/train_pldr_llm.py --tiny                        # CPU, seconds
    python examples/train_pldr_llm.py --size small --max-steps 300 --dag-weights 0.05,0.05,0.05
    python examples/train_pldr_llm.py --size small --max-steps 600 --resume      # continue the last checkpoint

Several GPUs or processes, unchanged (Trainer picks up the launcher's environment):

    torchrun --nproc_per_node 4 examples/train_pldr_llm.py --size 110m --streaming \
        --dataset tiiuae/falcon-refinedweb --text-column content      # the papers' run: ~8B tokens, streamed
    accelerate launch --num_processes 4 examples/train_pldr_llm.py --size 110m ...
    # CPU-only multi-process (gloo): `accelerate launch --cpu --num_processes 2` runs ONE process; use
    torchrun --nproc_per_node 2 examples/train_pldr_llm.py --tiny
"""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the CPU smoke run (the tiny preset)")
    parser.add_argument("--size", default="small", help="named size (a key of PRESETS['pldrllm'])")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--dag-weights", help="DAG weights a,p,g on A_LM, A_P, G_LM")
    parser.add_argument("--dataset", nargs="+", help="text files, or a Hugging Face dataset name")
    parser.add_argument("--text-column")
    parser.add_argument("--streaming", action="store_true", help="read the corpus as a stream (large corpora)")
    parser.add_argument("--tokenizer", help="an existing tokenizer folder instead of training one")
    parser.add_argument("--bf16", action="store_true", default=None, help="bf16 mixed precision (GPUs)")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--output-dir")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    args = parser.parse_args(argv)

    from plldr_hf.training.options import TrainOptions, parse_dag_weights
    from plldr_hf.training.run import train

    # every setting of the run: a preset (size, recipe defaults) with what was given on the command line
    given = {k: v for k, v in vars(args).items() if v not in (None, False) and k not in ("tiny", "size")}
    if "dag_weights" in given:
        given["dag_weights"] = parse_dag_weights(given["dag_weights"])
    if given.pop("resume", False):
        given["resume"] = "last"
    options = TrainOptions.from_name("tiny" if args.tiny else args.size, **given)
    report = train(options)
    if report.main_process:
        print(f"validation perplexity {report.scores['validation']['perplexity']:.3g}; report in {report.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
