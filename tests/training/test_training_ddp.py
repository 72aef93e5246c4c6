"""One optimizer step with the DAG term on: 2 CPU processes (torchrun, gloo DDP) equal 1 process.

`accelerate launch --cpu --num_processes 2` silently runs one process, so the check uses
`torchrun --nproc_per_node 2` (as `python -m torch.distributed.run`) on `tests/ddp_one_step.py`.
"""

import os
import subprocess
import sys

import pytest
import torch

from plldr_hf.training.trainer import DAG_LOG_NAMES
from tests.ddp_one_step import DDP_SETTINGS, PADDED, one_step
from tests.utils import REPO_ROOT, assert_close


HELPER = REPO_ROOT / "tests" / "ddp_one_step.py"


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "params.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(HELPER),
        str(out),
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return torch.load(out)


@pytest.mark.parametrize("setting", DDP_SETTINGS, ids=lambda s: f"batch{s[0]}-accum{s[1]}")
def test_two_processes_give_the_single_process_step(two_process_results, setting):
    assert two_process_results["world_size"] == 2
    reference, _ = one_step(4, 1)
    distributed = two_process_results[f"{setting[0]}x{setting[1]}"]
    for name, value in reference.items():
        assert_close(name, value, distributed[name], atol=1e-6, rtol=0)


@pytest.mark.parametrize("setting", DDP_SETTINGS, ids=lambda s: f"batch{s[0]}-accum{s[1]}")
def test_two_processes_log_the_single_process_values(two_process_results, setting):
    _, reference = one_step(4, 1)
    (expected,), (logged,) = reference, two_process_results[f"{setting[0]}x{setting[1]}-log"]
    for key in ("loss", "lm_loss", *DAG_LOG_NAMES, "dag_weight_a_p"):
        assert logged[key] == pytest.approx(expected[key], rel=1e-5), key
    # the logged loss is the objective CE + Σ w·dag
    weights = [logged[f"dag_weight_{name[4:]}"] for name in DAG_LOG_NAMES]
    total = logged["lm_loss"] + sum(w * logged[name] for w, name in zip(weights, DAG_LOG_NAMES))
    assert total == pytest.approx(logged["loss"], rel=1e-5)


def test_two_processes_give_the_single_process_step_with_padded_rows(two_process_results):
    reference, _ = one_step(4, 1, label_tokens=PADDED)
    distributed = two_process_results["2x1-padded"]
    for name, value in reference.items():
        assert_close(name, value, distributed[name], atol=1e-6, rtol=0)
