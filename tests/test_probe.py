"""The bad-input probe (`tools/probe_bad_inputs.py`): every case ends in a clear error, none is silent, none loses
data. The probe's table lists each case that does not, so a failure here names it."""

import json
import sys

from tests.utils import REPO_ROOT


def test_every_probed_mistake_gets_a_clear_error(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_bad_inputs", REPO_ROOT / "tools" / "probe_bad_inputs.py")
    probe = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = probe  # dataclasses look their module up by name
    spec.loader.exec_module(probe)
    status = probe.main(["--out", str(tmp_path)])
    table = capsys.readouterr().out
    counts = json.loads((tmp_path / "probe.json").read_text())["counts"]
    assert counts["cases"] >= 70, counts
    assert (counts["silent"], counts["data loss"], counts["traceback"], counts["unclear"]) == (0, 0, 0, 0), table
    assert status == 0 and counts["clear"] == counts["cases"]
