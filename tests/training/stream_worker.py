"""One process of a streamed PLDR-LLM run under `torchrun` (tests/training/test_streaming.py runs it).

Usage: torchrun --nproc_per_node N tests/training/stream_worker.py SHARD_DIR OUTPUT_DIR [--resume] [--kill-at STEP]

Trains the tiny PLDR-LLM on `SHARD_DIR/*.parquet` with `--streaming` through `plldr_hf.training.train`, and writes
`OUTPUT_DIR/documents.rank{R}.json`: the ids of the training documents this process read (documents are written
as "document ID: text"), taken where the pipeline hands the stream to the packer. `--kill-at STEP` SIGKILLs every
process when step STEP begins (checkpoint-STEP saved just before), as a crash would.
"""

import json
import os
import signal
import sys
from pathlib import Path

from transformers import TrainerCallback

import plldr_hf.training.preprocessing as preprocessing
from plldr_hf.training import TrainOptions, train


class KillAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv) -> int:
    shards, out = argv[0], Path(argv[1])
    kill_at = int(argv[argv.index("--kill-at") + 1]) if "--kill-at" in argv else None
    seen = []
    pack_stream = preprocessing.pack_stream

    def recording_pack_stream(stream, *args, **kwargs):
        def note(batch):
            seen.extend(int(text.split(":", 1)[0].removeprefix("document ")) for text in batch["text"])
            return batch

        return pack_stream(stream.map(note, batched=True), *args, **kwargs)

    preprocessing.pack_stream = recording_pack_stream
    options = TrainOptions.from_name(
        "tiny",
        output_dir=str(out),
        dataset=[f"{shards}/*.parquet"],
        streaming=True,
        max_train_documents=None,
        block_size=64,
        per_device_train_batch_size=4,
        max_steps=16,
        save_steps=6,
        save_total_limit=None,
        eval_steps=0,
        logging_steps=1,
        vocab_size=512,
        resume_from_checkpoint="last" if "--resume" in argv else None,
        report_to=["none"],
        disable_tqdm=True,
    )
    train(options, callbacks=[KillAt(kill_at)] if kill_at is not None else [])
    rank = int(os.environ.get("RANK", "0"))
    (out / f"documents.rank{rank}.json").write_text(json.dumps(seen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
