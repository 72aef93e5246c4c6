"""`plldr-hf serve MODEL [transformers serve options]`: transformers' OpenAI-compatible server with both families.

`transformers serve` resolves a folder's `config.architectures` on the `transformers` module, where only in-tree
models live; `import plldr_hf` puts this package's classes there too (`plldr_hf._compat.expose_in_transformers`),
so this command is `import plldr_hf` followed by transformers' own `serve` with the same arguments. A collapsed
PLDR-LLM (fixed G) serves with `--continuous-batching`; a learned-G model is refused at the first request, before it
generates (collapse it first).
"""

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="transformers' OpenAI-compatible server (transformers serve) for PLDR-LLM and AGF folders",
        description=(
            "Run `transformers serve` with this package's model families registered: MODEL is a saved folder or "
            "Hub id, every other argument is transformers serve's own (e.g. --continuous-batching --port 8000; see "
            "`transformers serve --help`). Needs the serving extra: pip install 'transformers[serving]'."
        ),
    )
    parser.add_argument("serve_args", nargs=argparse.REMAINDER, metavar="MODEL [OPTIONS]")
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys

    from transformers.cli.transformers import main as transformers_main

    import plldr_hf  # noqa: F401  (registers the families and exposes their classes on `transformers`)

    sys.argv = ["transformers", "serve", *args.serve_args]
    return transformers_main() or 0
