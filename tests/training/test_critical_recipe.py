"""`--recipe critical`, the recipe that collapses (docs/criticality.md): the command as the docs give it.

The default run checks that the recipe trains the released metric learner on 1,024-token blocks (two steps); the
`slow` test runs the documented commands whole (about 2.5 minutes on 2 cores) and checks that `collapse()` accepts
the model on held-out text. The numbers the recipe earned are in `benchmarks/results/criticality_levers.md`."""

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from plldr_hf.training.corpus import embedded_data_path


def _plldr_hf(*args, cwd):
    """The `plldr-hf` console script, as the docs run it."""
    script = shutil.which("plldr-hf", path=os.path.dirname(sys.executable)) or shutil.which("plldr-hf")
    assert script is not None, "the plldr-hf console script is not installed"
    return subprocess.run([script, *args], capture_output=True, text=True, cwd=cwd)


def _held_out_prompts(path, words=250, count=8):
    """8 prompts of 250 words of the embedded plays' test split, which training never reads (as docs/criticality.md)."""
    with gzip.open(embedded_data_path("en_shakespeare", "test.txt.gz"), "rt", encoding="utf-8") as text:
        tokens = text.read().split()
    path.write_text("\n".join(" ".join(tokens[i * words : (i + 1) * words]) for i in range(count)) + "\n")


def test_the_critical_recipe_trains_the_released_learner_on_long_blocks(tmp_path):
    # two steps on the first 2,000 documents: the recipe's model and settings, not its result (the slow test's)
    done = _plldr_hf(
        "train", "pldrllm", "--recipe", "critical", "--max-steps", "2", "--max-train-documents", "2000",
        "--output-dir", "run", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["head_dim"], config["num_reslayerA"], config["A_dff"], config["num_attention_heads"]) == (
        64, 8, 170, 1,
    )  # fmt: skip
    options = json.loads((tmp_path / "run" / "run_options.json").read_text())
    assert (options["block_size"], options["learning_rate"], options["warmup_steps"]) == (1024, 0.01, 60)
    report = json.loads((tmp_path / "run" / "train_report.json").read_text())
    assert report["diagnostics"]["order_parameter_after_real_text"] is not None


@pytest.mark.slow
def test_the_documented_critical_run_collapses_on_held_out_text(tmp_path):
    trained = _plldr_hf("train", "pldrllm", "--recipe", "critical", "--output-dir", "runs/critical", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    _held_out_prompts(tmp_path / "held_out.txt")
    collapsed = _plldr_hf(
        "collapse", "runs/critical", "runs/critical-collapsed", "--texts", "held_out.txt", cwd=tmp_path
    )
    assert collapsed.returncode == 0, collapsed.stderr[-2000:]
    assert "saved the collapsed model" in collapsed.stdout
