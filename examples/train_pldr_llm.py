"""Train a PLDR-LLM from scratch: the script is `plldr-hf train pldrllm` (the same flags, checks, progress,
checkpoints, Ctrl-C and --resume), and the Python API it runs is two lines.

The Python API: every flag is a field of `TrainOptions`, and `train` returns the run's `RunReport` (scores, paths,
timings), saved as `train_report.json` in the output folder:

    from plldr_hf.training import TrainOptions, train

    report = train(TrainOptions.from_name("tiny", output_dir="runs/tiny", dag_weights=(0.05, 0.05, 0.05)))
    print(report.scores["validation"]["perplexity"])

As a script (python examples/train_pldr_llm.py --help lists every flag):

    python examples/train_pldr_llm.py --tiny                        # CPU, seconds
    python examples/train_pldr_llm.py --size small --max-steps 300 --save-steps 100 --dag-weights 0.05,0.05,0.05
    python examples/train_pldr_llm.py --size small --max-steps 300 --save-steps 100 --resume   # after Ctrl-C

Several GPUs or processes, unchanged (only the main process writes the output folder):

    torchrun --nproc_per_node 4 examples/train_pldr_llm.py --size 110m --streaming \
        --dataset tiiuae/falcon-refinedweb --text-column content --save-steps 5000     # the papers' run, streamed
    accelerate launch --multi_gpu --num_processes 4 examples/train_pldr_llm.py --size 110m --save-steps 5000
"""

import sys

from plldr_hf.cli import main


if __name__ == "__main__":
    sys.exit(main(["train", "pldrllm", *sys.argv[1:]]))
