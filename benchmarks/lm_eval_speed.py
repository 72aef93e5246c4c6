"""lm-evaluation-harness scoring speed: PLDR-LLM learned-G and collapsed vs an equal-size Llama, batch 1 vs 16.

The local multiple-choice task of `plldr_hf.models.pldrllm.lm_eval_task` (200 questions × 4 choices, Shakespeare continuations) is
scored by `lm_eval.simple_evaluate` with `HFLM(pretrained=model)`, float32 on the CPU, random weights. The
contenders run round-robin inside each repeat (load from other processes hits them alike); the table gives the
median wall time of `--repeats` runs and the largest per-choice log-likelihood difference between batch 1 and 16.

    python benchmarks/lm_eval_speed.py            # 110M sizes, writes benchmarks/results/lm_eval_speed.md
    python benchmarks/lm_eval_speed.py --quick    # tiny sizes, seconds: a smoke run of the script
"""

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 20 questions (smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per contender (default: %(default)s)")
    parser.add_argument("--questions", type=int, default=200, help="questions of the task (default: %(default)s)")
    parser.add_argument("--output", default="benchmarks/results/lm_eval_speed.md", help="Markdown table to write")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    import plldr_hf
    from plldr_hf.models.pldrllm.lm_eval_task import write_continuation_task
    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.recipes import llama_config_like, pldrllm_config
    from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    folder = tempfile.mkdtemp(prefix="plldr_lm_eval_")
    questions = 20 if args.quick else args.questions
    task = write_continuation_task(folder, load_text_corpus()["validation"]["text"], num_questions=questions)
    manager = TaskManager(include_path=folder)
    tokenizer = train_sentencepiece_tokenizer(load_text_corpus()["train"], vocab_size=2000, max_documents=3000)
    # the package's named sizes: 110M (the released width and depth), or tiny for the smoke run
    config = pldrllm_config("tiny" if args.quick else "110m", len(tokenizer), max_position_embeddings=256)
    learned = plldr_hf.PldrllmForCausalLM(config).eval()
    # collapse() marks its own config, so the collapsed copy gets a config of its own
    collapsed = plldr_hf.PldrllmForCausalLM(copy.deepcopy(config)).eval()
    collapsed.load_state_dict(learned.state_dict())
    collapsed.collapse(force=True)
    llama = LlamaForCausalLM(llama_config_like(config)).eval()
    contenders = {"PLDR-LLM learned G": learned, "PLDR-LLM collapsed": collapsed, "Llama": llama}

    def run(model, batch_size):
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device="cpu")
        start = time.perf_counter()
        out = simple_evaluate(model=lm, tasks=[task], task_manager=manager, log_samples=True, bootstrap_iters=0)
        elapsed = time.perf_counter() - start
        scores = np.array([r[0] for s in out["samples"][task] for r in s["filtered_resps"]])
        return elapsed, scores

    times = {(name, b): [] for name in contenders for b in (1, 16)}
    scores = {}
    for repeat in range(args.repeats):
        for batch_size in (1, 16):
            for name, model in contenders.items():
                elapsed, values = run(model, batch_size)
                times[name, batch_size].append(elapsed)
                scores[name, batch_size] = values
            print(f"round {repeat + 1}/{args.repeats}, batch {batch_size} done", file=sys.stderr)

    median = {key: statistics.median(value) for key, value in times.items()}
    lines = [
        f"# lm-eval scoring speed ({'quick' if args.quick else '110M'} sizes, {questions} questions × 4 choices, "
        f"float32 CPU, {torch.get_num_threads()} threads, median of {args.repeats})",
        "",
        "| model | batch 1 (s) | batch 16 (s) | batch 16 / Llama | max abs(Δ log-likelihood) b1 vs b16 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in contenders:
        diff = float(np.abs(scores[name, 1] - scores[name, 16]).max())
        ratio = median[name, 16] / median["Llama", 16]
        lines.append(f"| {name} | {median[name, 1]:.2f} | {median[name, 16]:.2f} | {ratio:.2f}× | {diff:.2e} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.quick:
        Path(args.output).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
