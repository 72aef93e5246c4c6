"""The README's and the docs pages' commands work as written: the set-up commands match `.ci/run`, the Python blocks
print what the pages show (`# →` lines), every `plldr-hf` command line parses against the real CLI, the `--tiny`
training commands run, every referenced script and file exists, and the README stays short."""

import re
import shlex
import subprocess
import sys

import pytest

from plldr_hf.cli import build_parser
from plldr_hf_cli import parse_args
from tests.utils import REPO_ROOT


README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {"README.md": README} | {
    f"docs/{path.name}": path.read_text(encoding="utf-8") for path in sorted((REPO_ROOT / "docs").glob("*.md"))
}
DOCS = "\n".join(PAGES.values())


def code_blocks(language: str, text: str = DOCS) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def shell_lines() -> list[str]:
    lines = []
    for block in code_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line:
                lines.append(line)
    return lines


def plldr_commands() -> list[list[str]]:
    # optional parts written as [--flag VALUE] are documentation, not arguments
    return [shlex.split(re.sub(r"\[[^\]]*\]", "", line))[1:] for line in shell_lines() if line.startswith("plldr-hf ")]


def test_setup_commands_match_ci():
    install, test = code_blocks("bash", README)[:2]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "pip install torch==2.13.0" in install and 'pip install -e ".[dev]"' in install
    assert install.strip().endswith("plldr-hf quickstart")
    assert test.strip() == "python -m pytest -q -n 2"
    for command in ("pip install torch==2.13.0", 'pip install -e ".[dev]"', "python -m pytest -q -n 2"):
        assert command in ci, f".ci/run does not run {command!r}"


# the self-contained quick starts (they import plldr_hf); blocks that continue another one, or need files a reader
# downloads (written with a `path/to/` placeholder), are not run
RUNNABLE = [block for block in code_blocks("python") if "import plldr_hf" in block and "path/to/" not in block]


def expected_output(block: str) -> list[str]:
    """The lines a block says it prints: the text after `# → ` on each `print(...)` line, in order."""
    return [line.split("# → ", 1)[1].strip() for line in block.splitlines() if "# → " in line]


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_python_quick_starts_print_what_they_say(index, capsys):
    assert len(RUNNABLE) >= 2
    block = RUNNABLE[index]
    expected = expected_output(block)
    assert expected, f"README python block {index} shows no `# →` output to check"
    exec(compile(block, f"README python block {index}", "exec"), {})
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.parametrize("argv", plldr_commands(), ids=lambda argv: " ".join(argv)[:60])
def test_cli_lines_parse(argv):
    args = parse_args(build_parser(), argv)
    assert callable(args.func)


def test_referenced_scripts_exist():
    for line in shell_lines():
        for path in re.findall(r"\b((?:examples|benchmarks|tools)/[\w/.-]+\.py)", line):
            assert (REPO_ROOT / path).is_file(), f"README refers to missing {path}"
    for path in re.findall(r"`((?:plldr_hf|examples|benchmarks|model_cards|tools|docs)/[\w/.*-]+)`", DOCS):
        if "*" not in path:
            assert (REPO_ROOT / path).exists(), f"README refers to missing {path}"


@pytest.mark.parametrize("family", ["pldrllm", "agf"])
def test_tiny_training_commands_run(family, tmp_path):
    assert f"plldr-hf train {family} --tiny" in DOCS
    result = subprocess.run(
        [sys.executable, "-m", "plldr_hf", "train", family, "--tiny", "--output-dir", str(tmp_path / family)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / family / "model.safetensors").is_file()


def test_readme_is_short_and_links_every_docs_page():
    assert len(README.splitlines()) <= 250
    for name in PAGES:
        if name.startswith("docs/"):
            assert f"]({name})" in README, f"README does not link {name}"


@pytest.mark.parametrize("page", sorted(PAGES), ids=str)
def test_links_between_pages_resolve(page):
    base = REPO_ROOT / page
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", PAGES[page]):
        assert (base.parent / target).exists(), f"{page} links to missing {target}"


def test_the_help_and_the_docs_quote_the_same_numbers_and_commands():
    """One source for what both say: the quickstart's time, the serving extra's install line, the sizes' widths."""
    from plldr_hf_cli.commands.quickstart import QUICKSTART_MINUTES
    from plldr_hf_cli.commands.serve import SERVING_INSTALL

    quickstart_help = subprocess.run(
        [sys.executable, "-c", "import sys, plldr_hf_cli; sys.exit(plldr_hf_cli.main(['--help']))"],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    said = f"about {QUICKSTART_MINUTES} minutes"
    assert said in " ".join(quickstart_help.split()) and said in README
    from plldr_hf_cli.quickstart import QuickstartPlan

    # the plan line the command prints before it starts
    assert QuickstartPlan.named("default").reference_minutes == QUICKSTART_MINUTES
    # no other time for the quickstart anywhere in the README or the quickstart page
    for page in ("README.md", "docs/quickstart.md"):
        times = re.findall(r"about (\d+) minutes on an idle 2-core CPU", PAGES[page])
        assert set(times) <= {str(QUICKSTART_MINUTES)}, (page, times)
    serve_help = subprocess.run(
        [sys.executable, "-c", "import sys, plldr_hf_cli; sys.exit(plldr_hf_cli.main(['serve', '--help']))"],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert SERVING_INSTALL in " ".join(serve_help.split()) and SERVING_INSTALL in PAGES["docs/serving.md"]
    train_help = " ".join(
        subprocess.run(
            [sys.executable, "-c", "import sys, plldr_hf_cli; sys.exit(plldr_hf_cli.main(['train', 'pldrllm', '--help']))"],
            capture_output=True, text=True,
        ).stdout.split()
    )  # fmt: skip
    from plldr_hf.training.options import PRESETS

    for name, preset in PRESETS["pldrllm"].items():
        assert f"{name} ({preset['model']['hidden_size']} wide" in train_help, name
    assert "one document per paragraph" in train_help
