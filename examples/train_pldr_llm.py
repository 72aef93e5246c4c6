"""Train a PLDR-LLM from scratch with the Hugging Face Trainer (same flags as `plldr-hf train pldrllm`).

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

    torchrun --nproc_per_node 4 examples/train_pldr_llm.py --size 110m --dataset tiiuae/falcon-refinedweb \
        --text-column content --max-steps 250000 --warmup-steps 2000 --learning-rate 1.2e-3
    accelerate launch --num_processes 4 examples/train_pldr_llm.py --size 110m ...
    # CPU-only multi-process (gloo): `accelerate launch --cpu --num_processes 2` runs ONE process; use
    torchrun --nproc_per_node 2 examples/train_pldr_llm.py --tiny
"""

import argparse
import sys

from plldr_hf_cli.commands.train.pldrllm import add_arguments, train_and_report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return train_and_report(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
