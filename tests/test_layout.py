"""The package's layout keeps its promises (issue 16): data flows one way (models ← training ← commands; the Hub
code, diagnostics, plots and loading beside training, never imported by the model families), no module outgrows
~600 lines except the two modeling files, and test modules share code through helper modules, not each other."""

import ast
from pathlib import Path

from tests.utils import REPO_ROOT


PACKAGE = REPO_ROOT / "plldr_hf"
MODELING_FILES = {"modeling_pldrllm.py", "modeling_agf.py"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def test_model_families_import_only_themselves_torch_and_transformers():
    # the package side of the families (registration, tokenizer, pipelines) included: nothing from training, Hub,
    # diagnostics, plots or loading
    for path in python_files(PACKAGE / "models"):
        for name in imported_modules(path):
            if name.startswith("plldr_hf"):
                assert name.startswith(("plldr_hf.models", "plldr_hf._compat")), f"{path.name} imports {name}"


def test_the_library_never_imports_the_command_line():
    for path in python_files(PACKAGE):
        if path.relative_to(PACKAGE).as_posix() in ("cli.py", "__main__.py"):  # the `plldr-hf` entry shims
            continue
        assert not any(name.startswith("plldr_hf_cli") for name in imported_modules(path)), path


def test_no_module_outgrows_600_lines_except_the_modeling_files():
    for path in python_files(PACKAGE):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if path.name not in MODELING_FILES:
            assert lines <= 620, f"{path.relative_to(REPO_ROOT)}: {lines} lines"


def test_test_modules_do_not_import_each_other():
    for path in python_files(REPO_ROOT / "tests"):
        for name in imported_modules(path):
            leaf = name.rsplit(".", 1)[-1]
            assert not (name.startswith("tests.") and (leaf.startswith("test_") or leaf == "conftest")), (
                f"{path.relative_to(REPO_ROOT)} imports {name}"
            )
