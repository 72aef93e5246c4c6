"""`plldr-hf` command line: one argparse subcommand per module in `plldr_hf/commands/`.

Each module in `plldr_hf.commands` defines `register(subparsers)`, which adds its subcommand(s) and sets
`func` on the parser defaults; this file only discovers them, so adding a command never touches this file.
"""

import argparse
import importlib
import pkgutil
import sys

from plldr_hf import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plldr-hf",
        description="PLDR-LLM and AGF translation models for Hugging Face Transformers.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
