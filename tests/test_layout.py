"""The package's layout keeps its promises: data flows one way (models ← training ← commands), each family's folder
holds its remote code and its package-side modules, nothing imports in a circle, no module outgrows ~600 lines
except the modeling files, and tests and examples use public code only."""

import ast
import dataclasses
import inspect
from pathlib import Path

from plldr_hf.models import FAMILIES
from tests.utils import REPO_ROOT


PACKAGE = REPO_ROOT / "plldr_hf"
MODELING_FILES = {"modeling_pldrllm.py", "modeling_agf.py"}
# what the package side of a family folder may use besides the families themselves
FAMILY_SIDE_ALLOWED = ("plldr_hf.models", "plldr_hf._compat", "plldr_hf.plots")


def import_nodes(path: Path):
    return [
        n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Import | ast.ImportFrom)
    ]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute module names `path` imports (at any depth), relative imports resolved; `from package import name`
    counts as importing `package.name` when that is a module of this repository."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names = set()
    for node in import_nodes(path):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        names.add(base)
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            if _is_repo_module(candidate):
                names.add(candidate)
    return names


def _is_repo_module(name: str) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def remote_code_paths() -> set[Path]:
    return {PACKAGE / "models" / name / file for name, family in FAMILIES.items() for file in family.code_files}


def test_remote_code_is_what_the_descriptors_name():
    # every file save_pretrained ships exists in its family folder, and nothing else in the folder is remote code
    for path in remote_code_paths():
        assert path.is_file(), path
    assert FAMILIES["pldrllm"].code_files[:2] == ("configuration_pldrllm.py", "modeling_pldrllm.py")
    assert {"plga.py", "fused_units.py", "dag.py", "collapse.py"} <= set(FAMILIES["pldrllm"].code_files)


def test_family_folders_import_nothing_from_training_hub_loading_or_the_cli():
    # remote code: only torch, transformers and siblings (tests/test_self_contained.py); the package side of a
    # family may use the shared plot helpers, never what is built on the families
    for path in python_files(PACKAGE / "models"):
        for name in imported_modules(path):
            if name.startswith(("plldr_hf", "plldr_hf_cli")):
                assert name.startswith(FAMILY_SIDE_ALLOWED), f"{path.relative_to(REPO_ROOT)} imports {name}"


def test_the_library_never_imports_the_command_line():
    for path in python_files(PACKAGE):
        if path.relative_to(PACKAGE).as_posix() in ("cli.py", "__main__.py"):  # the `plldr-hf` entry shims
            continue
        assert not any(name.startswith("plldr_hf_cli") for name in imported_modules(path)), path


def test_no_import_circles():
    modules = {module_name(p): p for folder in ("plldr_hf", "plldr_hf_cli") for p in python_files(REPO_ROOT / folder)}
    graph = {name: {m for m in imported_modules(path) if m in modules and m != name} for name, path in modules.items()}
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_no_module_outgrows_600_lines_except_the_modeling_files():
    for path in python_files(PACKAGE):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if path.name not in MODELING_FILES:
            assert lines <= 620, f"{path.relative_to(REPO_ROOT)}: {lines} lines"


def test_the_pldrllm_model_file_stays_under_1100_lines():
    # the forward reads top to bottom; what it needs lives in its siblings (layout.py, plga.py, g_cache.py, ...)
    path = PACKAGE / "models" / "pldrllm" / "modeling_pldrllm.py"
    assert len(path.read_text(encoding="utf-8").splitlines()) < 1100


def test_test_modules_do_not_import_each_other():
    for path in python_files(REPO_ROOT / "tests"):
        for name in imported_modules(path):
            leaf = name.rsplit(".", 1)[-1]
            assert not (name.startswith("tests.") and (leaf.startswith("test_") or leaf == "conftest")), (
                f"{path.relative_to(REPO_ROOT)} imports {name}"
            )


def test_tests_and_examples_use_public_names_only():
    # a private name (leading underscore) of the package or the benchmarks is free to change; tests and examples
    # reach the code through what it exports. Examples also stay off the command line's internals.
    for folder in ("tests", "examples"):
        for path in python_files(REPO_ROOT / folder):
            for node in import_nodes(path):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("plldr_hf", "benchmarks")):
                    private = [a.name for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
                    assert not private, f"{path.relative_to(REPO_ROOT)} imports {private} from {node.module}"
            if folder == "examples":
                assert not any(n.startswith("plldr_hf_cli") for n in imported_modules(path)), path


def test_every_family_descriptor_is_complete_and_names_no_training_code():
    for name, family in FAMILIES.items():
        assert family.model_type == name == family.config_class.model_type
        assert family.model_class.config_class is family.config_class
        assert family.decoder_layer_class.__name__ in family.model_class._no_split_modules
        assert (PACKAGE / "model_cards" / family.card.template).is_file()
        assert not any(callable(getattr(family, f.name)) and "training" in getattr(getattr(family, f.name), "__module__", "")
                       for f in dataclasses.fields(family))  # fmt: skip
    # no string names a training module inside the model families (an upward dependency a reader cannot see)
    for path in python_files(PACKAGE / "models"):
        assert "plldr_hf.training" not in path.read_text(encoding="utf-8"), path


def test_both_pipelines_take_one_signature():
    # one signature, so `plldr_hf.training.run.train` calls either the same way
    from plldr_hf.evaluation import perplexity
    from plldr_hf.training.causal_lm import train_causal_lm
    from plldr_hf.training.seq2seq import train_translation
    from plldr_hf.training.translation_trainer import evaluate_translation

    def shape(function):
        signature = inspect.signature(function)
        parameters = [(p.name, p.kind, p.default) for p in signature.parameters.values()]
        return parameters, signature.return_annotation

    assert shape(train_causal_lm) == shape(train_translation)
    parameters, returns = shape(train_causal_lm)
    assert [p[0] for p in parameters] == ["options", "tokenizer", "callbacks"] and returns == "RunReport"
    for evaluate in (perplexity, evaluate_translation):
        signature = inspect.signature(evaluate)
        assert list(signature.parameters)[:3] == ["model", "tokenizer", "data"], evaluate
        assert signature.parameters["batch_size"].kind is inspect.Parameter.KEYWORD_ONLY, evaluate


def test_only_training_builds_training_arguments():
    # one place turns run options into TrainingArguments (plldr_hf/training/recipes.py); the commands, the benchmarks
    # and the rest of the package ask it (the examples show a plain Trainer as a user writes one)
    builders = {"TrainingArguments", "Seq2SeqTrainingArguments"}
    offenders = []
    for folder in ("plldr_hf", "plldr_hf_cli", "benchmarks", "tools"):
        for path in python_files(REPO_ROOT / folder):
            if (PACKAGE / "training") in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name in builders:
                        offenders.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not offenders, f"TrainingArguments built outside plldr_hf/training: {offenders}"
