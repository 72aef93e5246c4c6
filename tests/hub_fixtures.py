"""Session fixtures of the Hub tests; test modules load this file with `pytest_plugins = ["tests.hub_fixtures"]`,
so that one fake Hub, one publishing run and one remote-code load serve every module.

- `fake_hub`: `tools/fake_hub.py` on a free loopback port, with a throwaway store;
- `published`: `tests.hub_utils.publish` run in a subprocess against it (the pushed repos and the reference outputs);
- `remote_results`: the pushed repos loaded with `trust_remote_code=True` where `plldr_hf` cannot be imported;
- `installed_results`: the pushed repos loaded with the package imported and without `trust_remote_code`.
"""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.hub_utils import FAKE_HUB, REPO_ROOT, cases, run_loader, run_python, subprocess_env


@dataclass
class FakeHub:
    url: str
    store: Path
    process: subprocess.Popen

    def files(self, repo_id: str) -> set[str]:
        root = self.store / repo_id
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def fake_hub(tmp_path_factory):
    store = tmp_path_factory.mktemp("fake_hub_store")
    errors = open(store / "server.stderr", "w")  # noqa: SIM115  (closed below, after the server stops)
    process = subprocess.Popen(
        [sys.executable, str(FAKE_HUB), "0", str(store), "--max-requests", "5000"],
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("fake hub listening on "), f"fake hub did not start: {line!r}"
        yield FakeHub(url=line.rsplit(" ", 1)[-1], store=store, process=process)
    finally:
        process.terminate()
        process.wait(timeout=10)
        errors.close()


@dataclass
class Published:
    hub: FakeHub
    refs: dict
    workdir: Path
    log: str


@pytest.fixture(scope="session")
def published(fake_hub, tmp_path_factory) -> Published:
    workdir = tmp_path_factory.mktemp("published")
    env = subprocess_env(workdir / "hf_home", fake_hub.url)
    proc = run_python(["-c", f"from tests.hub_utils import publish; publish({str(workdir)!r})"], env, REPO_ROOT)
    refs = torch.load(workdir / "refs.pt", weights_only=False)
    return Published(hub=fake_hub, refs=refs, workdir=workdir, log=proc.stdout + proc.stderr)


@pytest.fixture(scope="session")
def remote_results(published, tmp_path_factory) -> dict:
    """The two pushed repos loaded from the fake Hub with trust_remote_code=True where plldr_hf cannot be imported."""
    workdir = tmp_path_factory.mktemp("remote")
    env = subprocess_env(workdir / "hf_home", published.hub.url)
    return run_loader({"mode": "no-package", "cases": cases("org/", True)}, workdir, env)


@pytest.fixture(scope="session")
def installed_results(published) -> dict:
    """The same repos loaded from the fake Hub with plldr_hf imported and without trust_remote_code (done by the
    publishing process after its pushes: it has the package imported and the endpoint set)."""
    return torch.load(published.workdir / "installed.pt", weights_only=False)
