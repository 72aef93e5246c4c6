"""Local, offline tasks for lm-evaluation-harness (`lm_eval`), built from plain-text documents.

`write_continuation_task(folder, documents)` writes a multiple-choice task in lm-eval's YAML format with its data
next to it: each question is the first half of a line of the documents (`plldr-hf lm-eval-task FOLDER` uses the
embedded Shakespeare validation plays), the choices are its true second half and three second halves of other
lines. Run it with

    lm_eval --model hf --model_args pretrained=MODEL_DIR,trust_remote_code=True --include_path FOLDER \\
        --tasks plldr_continuation --device cpu --batch_size 16

or in Python with `lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer), tasks=[...],
task_manager=TaskManager(include_path=FOLDER))` after `import plldr_hf`. No network access is needed.

`write_papers_suite(folder)` writes the task group `pldrllm_zeroshot`: the eight zero-shot benchmarks the PLDR-LLM
papers report (arXiv 2410.16703, 2502.13502), as lm-eval's own task definitions (their prompts, metrics and data
from the Hub, so running it needs the network or a datasets cache):

    lm_eval --model hf --model_args pretrained=MODEL_DIR,trust_remote_code=True --include_path FOLDER \
        --tasks pldrllm_zeroshot --num_fewshot 0 --batch_size 8
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path


TASK_NAME = "plldr_continuation"
SUITE_NAME = "pldrllm_zeroshot"
# lm-eval's task names of ARC-easy, ARC-challenge, HellaSwag, WinoGrande, TruthfulQA (mc2), OpenBookQA, PIQA and
# SocialIQA; each reports lm-eval's own metrics (acc and, where defined, acc_norm; mc2's acc for TruthfulQA)
PAPERS_TASKS = (
    "arc_easy",
    "arc_challenge",
    "hellaswag",
    "winogrande",
    "truthfulqa_mc2",
    "openbookqa",
    "piqa",
    "social_iqa",
)

__all__ = ["PAPERS_TASKS", "SUITE_NAME", "TASK_NAME", "write_continuation_task", "write_papers_suite"]


def write_papers_suite(folder: str | os.PathLike) -> str:
    """Write `pldrllm_zeroshot.yaml` into `folder`: the group of `PAPERS_TASKS`, zero-shot. Returns the group name."""
    tasks = "".join(f"  - task: {name}\n    num_fewshot: 0\n" for name in PAPERS_TASKS)
    Path(folder, f"{SUITE_NAME}.yaml").write_text(
        f"group: {SUITE_NAME}\ntask:\n{tasks}metadata:\n  version: 1.0\n", encoding="utf-8"
    )
    return SUITE_NAME


# lm-eval calls this module's `load` (`custom_dataset`), found next to the YAML: the data path is relative to the task
# folder, so the folder can be moved or shared
LOADER = f"""\"\"\"The data of the lm-eval task `{TASK_NAME}`: the JSON lines next to this file.\"\"\"

from pathlib import Path

import datasets


def load(**kwargs):
    return datasets.load_dataset("json", data_files={{"test": str(Path(__file__).with_name("{TASK_NAME}.jsonl"))}})
"""


def _line_pairs(documents) -> list[tuple[str, str]]:
    """(first half, second half) of each line of 8–16 words. No leading space on the second half: lm-eval joins
    context and choice with its `target_delimiter` (" ")."""
    pairs = []
    for document in documents:
        for line in document.splitlines():
            words = line.split()
            if 8 <= len(words) <= 16:
                half = len(words) // 2
                pairs.append((" ".join(words[:half]), " ".join(words[half:])))
    return pairs


def write_continuation_task(folder: str | os.PathLike, documents, num_questions: int = 200, seed: int = 0) -> str:
    """Write the task YAML, its JSON-lines data and the data's loader into `folder`, with questions from the lines
    of 8–16 words of `documents` (texts); returns the task name. Nothing in the folder names an absolute path."""
    folder = Path(folder)
    rng = random.Random(seed)
    pairs = _line_pairs(documents)
    if len(pairs) < 4:
        raise ValueError(f"the documents have {len(pairs)} lines of 8-16 words; a task needs at least 4")
    folder.mkdir(parents=True, exist_ok=True)
    chosen = rng.sample(range(len(pairs)), min(num_questions, len(pairs)))
    rows = []
    for index in chosen:
        question, answer = pairs[index]
        others = rng.sample([j for j in range(len(pairs)) if j != index], 3)
        choices = [answer] + [pairs[j][1] for j in others]
        rng.shuffle(choices)
        rows.append({"question": question, "choices": choices, "answer": choices.index(answer)})
    data = folder / f"{TASK_NAME}.jsonl"
    data.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    (folder / f"{TASK_NAME}_data.py").write_text(LOADER, encoding="utf-8")
    metric = ["    aggregation: mean", "    higher_is_better: true"]
    (folder / f"{TASK_NAME}.yaml").write_text(
        "\n".join(
            [
                f"task: {TASK_NAME}",
                f"custom_dataset: !function {TASK_NAME}_data.load",
                "test_split: test",
                "output_type: multiple_choice",
                'doc_to_text: "{{question}}"',
                'doc_to_choice: "{{choices}}"',
                'doc_to_target: "{{answer}}"',
                'target_delimiter: " "',
                "metric_list:",
                "  - metric: acc",
                *metric,
                "  - metric: acc_norm",
                *metric,
                "metadata:",
                "  version: 1.0",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return TASK_NAME
