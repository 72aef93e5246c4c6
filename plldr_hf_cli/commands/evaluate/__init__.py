"""`plldr-hf evaluate MODEL_DIR ...`: score a saved model; dispatches on the `model_type` in its config.json.

One module per model family in this package (`agf.py`, ...), discovered like the commands themselves. Each defines

- `MODEL_TYPES`: the `model_type` values it handles;
- `add_arguments(parser)`: its own options (in an argument group; the options below are shared);
- `run(args, config: dict) -> int`: the evaluation, given the parsed arguments and the saved config dict.

A new family adds a module here without touching this file.
"""

import argparse
import importlib
import pkgutil

from plldr_hf_cli.arguments import UsageError, positive_int


def _families() -> dict[str, object]:
    modules = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for model_type in module.MODEL_TYPES:
            modules[model_type] = module
    return modules


def register(subparsers) -> None:
    families = _families()
    parser = subparsers.add_parser(
        "evaluate",
        help="score a saved model on a test set (translation: BLEU, chrF, accuracy; language models: perplexity)",
        description=(
            "Score a saved model folder (or Hub id). The model type in its config.json selects the evaluation; "
            f"supported model types: {', '.join(sorted(families))}."
        ),
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by save_pretrained / plldr-hf train")
    parser.add_argument(
        "--split",
        nargs="+",
        default=["test"],
        help="split(s) to score [test: the in-domain test split]; more: --split test gnome validation",
    )
    parser.add_argument(
        "--dataset", nargs="+", help="dataset name or files, as for plldr-hf train [the family's embedded corpus]"
    )
    parser.add_argument("--max-samples", type=positive_int, help="score a fixed random subset of each split")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="[%(default)s]")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="stdout format [%(default)s]")
    parser.add_argument("--output-json", metavar="PATH", help="also write the scores to this JSON file")
    owners = {}  # flag dest → (model types, option string) of the family that added it
    for module in dict.fromkeys(families.values()):
        before = len(parser._actions)
        module.add_arguments(parser)
        for action in parser._actions[before:]:
            owners[action.dest] = (module.MODEL_TYPES, max(action.option_strings, key=len))
            _record_when_given(action)
    parser.set_defaults(func=run, family_flags=owners, given_flags=frozenset())


def run(args: argparse.Namespace) -> int:
    import plldr_hf.models  # noqa: F401  (registers the model types)
    from plldr_hf.loading import read_config

    config = read_config(args.model_dir)  # one line naming the folder when it is missing or not a model
    model_type = config.get("model_type")
    families = _families()
    if model_type not in families:
        raise UsageError(
            f"no evaluation for model_type {model_type!r} (in {args.model_dir}); "
            f"supported: {', '.join(sorted(families))}"
        )
    check_family_flags(args, model_type)
    return families[model_type].run(args, config)


def _record_when_given(action: argparse.Action) -> None:
    """Make `action` note its dest in `namespace.given_flags` when the command line uses it (argparse alone cannot
    tell a flag given with its default value from one not given)."""

    class Recorded(type(action)):
        def __call__(self, parser, namespace, values, option_string=None):
            namespace.given_flags = namespace.given_flags | {self.dest}
            super().__call__(parser, namespace, values, option_string)

    action.__class__ = Recorded


def check_family_flags(args: argparse.Namespace, model_type: str) -> None:
    """A flag of another family's evaluation that the command line gives is refused with the family it belongs to,
    instead of being ignored."""
    for dest, (model_types, flag) in args.family_flags.items():
        if model_type not in model_types and dest in args.given_flags:
            raise UsageError(
                f"{flag} applies to {'/'.join(model_types)} models, and {args.model_dir} holds a model of type "
                f"{model_type!r}: drop {flag}"
            )
