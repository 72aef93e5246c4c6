"""CLI subcommands, one module each; every module defines `register(subparsers)` (see `plldr_hf_cli/__init__.py`).

Modules keep heavy imports (torch, transformers, datasets) inside the command function, so `plldr-hf --help`
stays fast.
"""
