"""The Hub-facing files are self-contained, and a saved folder loads as remote code without the package.

`save_pretrained` / `push_to_hub` copy `configuration_*.py`, `modeling_*.py` and the siblings they import (and the
package's push adds `pipeline_agf.py` for AGF) next to the weights. On the loading side, transformers treats an absolute import
of anything but an installed package as a missing requirement and cannot resolve parent-relative imports, so these
files may import only torch, transformers, the standard library and single-dot siblings.
"""

import ast
import inspect
import sys
from pathlib import Path

import pytest
import torch

from plldr_hf.cli import main as cli_main
from plldr_hf.models import FAMILIES
from tests.hub_loader import compute_outputs
from tests.hub_utils import (
    MAX_NEW_TOKENS,
    PROMPTS_EN,
    run_loader,
    subprocess_env,
    tiny_agf,
    tiny_pldrllm,
    tiny_tokenizer,
)
from tests.utils import assert_close


PACKAGE = Path(__file__).resolve().parents[1] / "plldr_hf"
# what save_pretrained ships: each family's configuration and modeling files with every sibling they import, and
# its custom pipelines
HUB_FACING = sorted(
    {PACKAGE / "models" / name / file for name, family in FAMILIES.items() for file in family.code_files}
    | {Path(inspect.getfile(cls)) for family in FAMILIES.values() for cls in family.pipelines.values()}
)
ALLOWED_TOP_LEVEL = {"torch", "transformers", *sys.stdlib_module_names}


def import_violations(path: Path) -> list[str]:
    """Every import in `path` (at any depth, try blocks included) that remote-code loading cannot satisfy."""
    problems = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            problems += [f"import {a.name}" for a in node.names if a.name.split(".")[0] not in ALLOWED_TOP_LEVEL]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module.split(".")[0] not in ALLOWED_TOP_LEVEL:
                    problems.append(f"from {node.module} import ...")
            elif node.level > 1 or node.module is None or "." in node.module:
                problems.append(f"from {'.' * node.level}{node.module or ''} import ... (not a single-dot sibling)")
            elif not (path.parent / f"{node.module}.py").is_file():
                problems.append(f"from .{node.module} import ... (no sibling file {node.module}.py)")
    return problems


def test_the_scan_covers_both_families():
    names = {path.name for path in HUB_FACING}
    assert {"configuration_pldrllm.py", "modeling_pldrllm.py", "configuration_agf.py", "modeling_agf.py"} <= names
    assert {"plga.py", "fused_units.py", "dag.py", "collapse.py", "pipeline_agf.py"} <= names


@pytest.mark.parametrize("path", HUB_FACING, ids=lambda p: p.name)
def test_hub_facing_file_imports_only_torch_transformers_stdlib_and_siblings(path):
    from transformers.dynamic_module_utils import get_relative_imports

    assert import_violations(path) == []
    # what transformers itself copies next to the file when saving: every sibling must exist in the same folder
    for name in get_relative_imports(str(path)):
        assert (path.parent / f"{name}.py").is_file(), name


def test_the_scan_flags_what_breaks_remote_code(tmp_path):
    (tmp_path / "configuration_x.py").write_text("")
    bad = tmp_path / "modeling_x.py"
    bad.write_text(
        "import os\nimport numpy\nimport plldr_hf.hub\nfrom torch import nn\nfrom .configuration_x import C\n"
        "from ..helpers import h\nfrom .missing import m\nfrom . import configuration_x\n"
        "try:\n    from plldr_hf import hub\nexcept ImportError:\n    hub = None\n"
    )
    assert import_violations(bad) == [
        "import numpy",
        "import plldr_hf.hub",
        "from ..helpers import ... (not a single-dot sibling)",
        "from .missing import ... (no sibling file missing.py)",
        "from . import ... (not a single-dot sibling)",
        "from plldr_hf import ...",
    ]


def test_saved_folders_load_as_remote_code_without_the_package(tmp_path):
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    learned = tiny_pldrllm(len(tokenizer), collapsed=False)
    fixed_g = tiny_pldrllm(len(tokenizer), collapsed=True).to_fixed_g()  # the released fixed-G format
    agf = tiny_agf(len(tokenizer))
    for name, model in (("learned", learned), ("fixed_g", fixed_g)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    agf_saved = tmp_path / "agf_saved"
    agf.save_pretrained(agf_saved)
    tokenizer.save_pretrained(agf_saved)
    # `plldr-hf push --dry-run`: the repo contents (with pipeline_agf.py), written locally
    assert cli_main(["push", str(agf_saved), "org/agf", "--dry-run", str(tmp_path / "agf")]) == 0

    for name in ("learned", "fixed_g"):
        assert {"configuration_pldrllm.py", "modeling_pldrllm.py"} <= {p.name for p in (tmp_path / name).iterdir()}
    assert (tmp_path / "agf" / "pipeline_agf.py").is_file() and (tmp_path / "agf" / "README.md").is_file()

    common = {"trust_remote_code": True, "prompts": PROMPTS_EN, "max_new_tokens": MAX_NEW_TOKENS}
    cases = [
        {"name": "learned", "source": str(tmp_path / "learned"), "kind": "causal", **common},
        {"name": "fixed_g", "source": str(tmp_path / "fixed_g"), "kind": "causal", **common},
        {
            "name": "agf",
            "source": str(tmp_path / "agf"),
            "kind": "seq2seq",
            "decoder_input_ids": [[1, 8, 9, 10]],
            "pipeline": True,
            **common,
        },
    ]
    models = {"learned": learned, "fixed_g": fixed_g, "agf": agf}
    refs = {case["name"]: compute_outputs(models[case["name"]], tokenizer, case) for case in cases}
    results = run_loader({"mode": "no-package", "cases": cases}, tmp_path / "load", subprocess_env(tmp_path / "home"))

    assert results["package_importable"] is False and results["plldr_hf_modules"] == []
    assert results["on_sys_path"] is False and results["editable_finders"] == []
    for name, ref in refs.items():
        got = results[name]
        assert got["model_class"].startswith("transformers_modules."), got["model_class"]
        assert got["state_dict_keys"] == sorted(models[name].state_dict()), name
        assert_close(f"{name} logits", ref["logits"], got["logits"], atol=1e-6, rtol=0)
        assert torch.equal(got["generated"], ref["generated"]), f"{name}: greedy generation differs"
    pipelines = results["agf"]["pipelines"]
    assert pipelines["pipeline_class"].endswith(".pipeline_agf.AgfTranslationPipeline")
    assert pipelines["single"] == [{"translation_text": refs["agf"]["generated_text"][0]}]
