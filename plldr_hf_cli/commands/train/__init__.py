"""`plldr-hf train FAMILY ...`: one sub-subcommand per model family, one module each in this package.

The same discovery rule as `plldr_hf_cli/__init__.py`, one level down: every module in `plldr_hf_cli/commands/train/` defines
`register(family_subparsers)`, which adds its family's parser (`agf`, `pldrllm`, ...) and sets `func`. Adding a
family therefore means adding a module here, without touching this file or another family's.
"""

import importlib
import pkgutil


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model (one subcommand per model family)",
        description="Train a model. Choose the model family; `plldr-hf train FAMILY --help` lists its options.",
    )
    families = parser.add_subparsers(dest="family", metavar="FAMILY", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}").register(families)
