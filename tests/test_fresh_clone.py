"""A plain clone of the repository passes its fixture tests without anything beside it.

The clone lands in an empty temporary folder (no `../shared` next to it) and runs the tests that read the in-repo
fixtures, importing `plldr_hf` from the clone itself.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT


FIXTURE_TESTS = [
    "tests/models/pldrllm/test_released_format.py::test_released_folder_loads_without_remote_code",
    "tests/models/pldrllm/test_released_format.py::test_reference_logits_and_deductive_outputs",
    "tests/test_evaluation.py::test_bleu_and_chrf_reproduce_newstest2017_scores",
    "tests/models/pldrllm/test_tokenization_pldrllm.py::test_released_tokenizer_equals_sentencepiece",
    "tests/models/pldrllm/test_conversion.py::test_reference_pth_converts_and_reproduces_its_logits",
    "tests/models/pldrllm/test_conversion.py::test_real_predefined_g_file_loads_on_the_cpu",
]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_clone_passes_its_fixture_tests(tmp_path):
    if not (REPO_ROOT / ".git").exists():
        pytest.fail("the test suite must run from a git checkout of the repository")
    clone = tmp_path / "empty" / "plldr_hf"
    clone.parent.mkdir()
    # the committed tree, as a user gets it (uncommitted changes of a developer's checkout are not in the clone)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(clone)], check=True)
    assert not (clone.parent / "shared").exists() and sorted(os.listdir(clone.parent)) == ["plldr_hf"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = str(clone)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FIXTURE_TESTS],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "error" not in proc.stdout.splitlines()[-1]
    # the package imported in the clone's run is the clone's own
    check = subprocess.run(
        [sys.executable, "-c", "import plldr_hf, sys; sys.stdout.write(plldr_hf.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.stdout.startswith(str(clone)), check.stdout
