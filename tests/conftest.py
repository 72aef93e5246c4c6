"""Test environment: offline Hub variables, a throwaway HF_HOME, seeding, and the path of the in-repo fixtures."""

import os
import tempfile
from pathlib import Path

import pytest


# set before transformers / datasets / evaluate are imported by any test module
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_EVALUATE_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="plldr_hf_test_home_")

import datasets  # noqa: E402, F401  (its log handler binds the stderr of the session, not of one test's capsys)
import torch  # noqa: E402


# tiny-model tests are dominated by per-op overhead: one thread is faster than two, and far faster when the two
# cores are shared with other work
torch.set_num_threads(1)


from tests.utils import FIXTURES  # noqa: E402  (after the environment above: it imports plldr_hf)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def libreoffice_pairs() -> list[tuple[str, str]]:
    """(English, German) pairs of the embedded LibreOffice training split, in file order."""
    from plldr_hf.training.corpus import load_translation_dataset

    train = load_translation_dataset("libreoffice", out_of_domain_test=False)["train"]
    return [(pair["en"], pair["de"]) for pair in train.select(range(2000))["translation"]]
