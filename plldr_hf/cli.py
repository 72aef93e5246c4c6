"""The `plldr-hf` command line, importable from the package too (`plldr_hf.cli.main`); it lives in `plldr_hf_cli`."""

from plldr_hf_cli import build_parser, main


__all__ = ["build_parser", "main"]
