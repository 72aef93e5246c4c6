"""Marked copies between the families' remote code stay equal to their originals.

Each family's remote code is self-contained (it may import only torch, transformers and its own folder), so the
version shim and the input checks both modeling files need are written in each. The copy is marked with a line
`# Copied from plldr_hf.models.<family>.<module>.<name>` right above it, the idea of transformers' `# Copied from`
and `utils/check_copies.py`: a copy that drifts from its original fails here.
"""

import ast
import re
from pathlib import Path

import pytest

from tests.utils import REPO_ROOT


MARK = re.compile(r"^# Copied from (plldr_hf(?:\.\w+)+)\.(\w+)\s*$")


def definitions(path: Path) -> dict[str, str]:
    """Source text of every top-level function, class and single-name assignment of `path`, by name."""
    text = path.read_text(encoding="utf-8")
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[node.name] = ast.get_source_segment(text, node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.get_source_segment(text, node)
    return found


def marked_copies() -> list[tuple[Path, int, str, str]]:
    copies = []
    for path in sorted((REPO_ROOT / "plldr_hf").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            match = MARK.match(line)
            if match:
                copies.append((path, number + 1, match.group(1), match.group(2)))
    return copies


def test_the_shared_blocks_are_marked_in_both_modeling_files():
    marked = {(p.name, name) for p, _, _, name in marked_copies()}
    assert {("modeling_pldrllm.py", n) for n in ("CACHE_NAME", "merge_cache_kwargs")} <= marked
    assert {("inputs.py", n) for n in ("check_inputs", "check_position_ids", "embed_ids")} <= marked


@pytest.mark.parametrize("path, line, module, name", marked_copies(), ids=lambda v: getattr(v, "name", str(v)))
def test_marked_copy_equals_its_original(path, line, module, name):
    original_file = REPO_ROOT.joinpath(*module.split(".")).with_suffix(".py")
    original = definitions(original_file).get(name)
    assert original is not None, f"{path.name}:{line}: {module}.{name} does not exist"
    # the definition right below the mark is the copy
    text = path.read_text(encoding="utf-8")
    below = [n for n in ast.parse(text).body if n.lineno == line + 1]
    assert below, f"{path.name}:{line}: no definition right below the mark"
    copy = ast.get_source_segment(text, below[0])
    assert copy == original, f"{path.name}:{line}: the copy of {module}.{name} differs from its original"
