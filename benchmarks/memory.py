"""Peak memory of one training step in a fresh process: `python -m benchmarks.memory CONTENDER SIZE
BATCH LENGTH` prints one JSON line with the largest extra heap in use during a step (after a warm-up step), so no
other model, cache or allocator history of the suite counts. The suite runs it once per training contender.
"""

from __future__ import annotations

import json
import sys


def build(contender: str, size: str):
    """The suite's training contenders: `llama`, `pldr` (default settings), `pldr_store`, `pldr_fast`, `pldr_dag`, and
    `llama_small` / `pldr_small`."""
    from benchmarks import generate_speed, suite

    sizes = dict(suite.small_sizes(size) if contender.endswith("_small") else suite.pldr_sizes(size))
    sizes["new_tokens"] = 0
    llama = contender.startswith("llama")
    variant = "llama" if llama else "uncollapsed"
    model = generate_speed.build_models(sizes, [variant], prompt_len=0)[variant]
    if not llama:
        suite.configure_pldr(model, contender.removesuffix("_small"))
    return model


def main(argv: list[str]) -> int:
    import torch

    from benchmarks import generate_speed, suite

    contender, size, batch, length = argv[0], argv[1], int(argv[2]), int(argv[3])
    torch.set_num_threads(int(argv[4]) if len(argv) > 4 else 1)
    model = build(contender, size)
    ids = suite.random_ids(batch, length, model.config.vocab_size, seed=4)
    step = suite.training_step(model, ids)
    step()
    with generate_speed.HeapPeak(suite.HEAP_INTERVAL) as heap:
        step()
    print(json.dumps({"contender": contender, "peak_extra_bytes": heap.peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
