"""Local, offline tasks for lm-evaluation-harness (`lm_eval`), built from plain-text documents.

`write_continuation_task(folder, documents)` writes a multiple-choice task in lm-eval's YAML format with its data
next to it: each question is the first half of a line of the documents (`plldr-hf lm-eval-task FOLDER` uses the
embedded Shakespeare validation plays), the choices are its true second half and three second halves of other
lines. Run it with

    lm_eval --model hf --model_args pretrained=MODEL_DIR,trust_remote_code=True --include_path FOLDER \\
        --tasks plldr_continuation --device cpu --batch_size 16

or in Python with `lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer), tasks=[...],
task_manager=TaskManager(include_path=FOLDER))` after `import plldr_hf`. No network access is needed.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path


TASK_NAME = "plldr_continuation"

__all__ = ["TASK_NAME", "write_continuation_task"]


def _line_pairs(documents) -> list[tuple[str, str]]:
    pairs = []
    for document in documents:
        for line in document.splitlines():
            words = line.split()
            if 8 <= len(words) <= 16:
                half = len(words) // 2
                pairs.append((" ".join(words[:half]), " " + " ".join(words[half:])))
    return pairs


def write_continuation_task(folder: str | os.PathLike, documents, num_questions: int = 200, seed: int = 0) -> str:
    """Write the task YAML and its JSON-lines data into `folder`, with questions from the lines of 8–16 words of
    `documents` (texts); returns the task name."""
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
    (folder / f"{TASK_NAME}.yaml").write_text(
        "\n".join(
            [
                f"task: {TASK_NAME}",
                "dataset_path: json",
                "dataset_kwargs:",
                "  data_files:",
                f"    test: {json.dumps(str(data.resolve()))}",
                "test_split: test",
                "output_type: multiple_choice",
                'doc_to_text: "{{question}}"',
                'doc_to_choice: "{{choices}}"',
                'doc_to_target: "{{answer}}"',
                "metric_list:",
                "  - metric: acc",
                "  - metric: acc_norm",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return TASK_NAME
