"""`plldr-hf serve MODEL [transformers serve options]`: transformers' OpenAI-compatible server with both families.

`transformers serve` resolves a folder's `config.architectures` on the `transformers` module, where only in-tree
models live; `import plldr_hf` puts this package's classes there too (`plldr_hf._compat.expose_in_transformers`),
so this command is `import plldr_hf` followed by transformers' own `serve` with the same arguments. A collapsed
PLDR-LLM (fixed G) serves with `--continuous-batching`; a learned-G model is refused with it when the server starts
(collapse it first).
"""

import argparse


# how to install what `plldr-hf serve` needs, as docs/serving.md gives it (tests/test_readme.py checks that they agree)
SERVING_INSTALL = 'pip install -e ".[serving]"'


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="transformers' OpenAI-compatible server (transformers serve) for PLDR-LLM and AGF folders",
        description=(
            "Run `transformers serve` with this package's model families registered: MODEL is a saved folder or "
            "Hub id, every other argument is transformers serve's own (e.g. --continuous-batching --port 8000; see "
            "`transformers serve --help`). Needs the serving extra: "
            + SERVING_INSTALL
            + " (in the package's checkout)."
        ),
    )
    parser.add_argument("serve_args", nargs=argparse.REMAINDER, metavar="MODEL [OPTIONS]")
    parser.set_defaults(func=run)


def check_model_argument(serve_args: list[str]) -> str:
    """The MODEL the server holds, checked before it starts: a saved folder must hold a readable config (a
    `ModelFolderError` names what is wrong), a path that does not exist is refused, and no MODEL at all is refused
    (transformers serve would listen with no model, loading whatever a request names)."""
    from pathlib import Path

    from plldr_hf.loading import read_config
    from plldr_hf_cli.arguments import UsageError, looks_like_path

    model = next((arg for arg in serve_args if not arg.startswith("-")), None)
    if model is None or (serve_args and serve_args[0].startswith("-")):
        raise UsageError("give MODEL first (a saved model folder or a Hub id), then transformers serve's options")
    if Path(model).exists() or looks_like_path(model):
        read_config(model)
    return model


def refuse_learned_g_with_continuous_batching(serve_args: list[str]) -> None:
    """A learned-G PLDR-LLM folder with `--continuous-batching` is refused when the server starts, with the reason
    and the fix, instead of a bare `Internal Server Error` at its first request."""
    from pathlib import Path

    from plldr_hf.loading import read_config
    from plldr_hf.models.pldrllm.modeling_pldrllm import CONTINUOUS_BATCHING_NEEDS_FIXED_G
    from plldr_hf_cli.arguments import UsageError

    model = next((arg for arg in serve_args if not arg.startswith("-")), None)
    if model is None or "--continuous-batching" not in serve_args or not Path(model).is_dir():
        return
    config = read_config(model)
    fixed = config.get("custom_G_type") is not None or bool(config.get("collapsed"))
    if config.get("model_type") == "pldrllm" and not fixed:
        raise UsageError(f"{model}: {CONTINUOUS_BATCHING_NEEDS_FIXED_G}")


def run(args) -> int:
    import sys

    # first: importing plldr_hf after transformers' CLI would expose the classes on a `transformers` module object
    # that the server no longer reads (it looks architectures up there)
    import plldr_hf.models  # noqa: F401  (registers the families and exposes their classes on `transformers`)

    model = check_model_argument(args.serve_args)
    refuse_learned_g_with_continuous_batching(args.serve_args)
    from transformers.cli.transformers import main as transformers_main

    answer_request_errors_as_client_errors(model)
    use_package_model_loader()

    sys.argv = ["transformers", "serve", *args.serve_args]
    try:
        return transformers_main() or 0
    finally:
        stop_generation_threads()


def use_package_model_loader() -> None:
    """From transformers 5.25 each model loads in a spawned process, which must import plldr_hf too
    (`plldr_hf_cli.serve_loader`); earlier releases load in this process and have no such loader class."""
    try:
        from transformers.cli.serving.model_manager import ModelLoader  # noqa: F401
    except ImportError:
        return
    from plldr_hf_cli import serve_loader

    serve_loader.install()


def answer_request_errors_as_client_errors(model: str | None = None) -> None:
    """Give transformers serve's app the request checks of `plldr_hf_cli.serve_checks` (a client mistake is a 4xx
    naming the field, before any work) and a handler for the `ValueError`s a request still causes: a chat request
    to a model without a chat template is HTTP 400 with the reason and the fix, any other one a 500 that says what
    failed (the server's default is a bare `Internal Server Error`, with the reason only in its log)."""
    try:
        # `transformers serve` imports `build_server` from here when it starts, so the wrapped one is used
        from transformers.cli.serving import server as hf_serve
    except ImportError:  # no serving extra: transformers serve says so itself
        return
    build_server = hf_serve.build_server
    if getattr(build_server, "plldr_hf_handlers", False):
        return

    def build_server_with_handlers(*args, **kwargs):
        from fastapi.responses import JSONResponse

        from plldr_hf_cli.serve_checks import ModelLimits, RequestChecks

        app = build_server(*args, **kwargs)
        app.add_middleware(RequestChecks, limits=ModelLimits(model))

        @app.exception_handler(ValueError)
        async def request_value_error(_request, error: ValueError):
            if "chat_template" in str(error):
                message = (
                    "this model has no chat template, so /v1/chat/completions cannot format messages: use "
                    "/v1/completions with a prompt, or save a tokenizer with a chat_template"
                )
                return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=400)
            return JSONResponse({"error": {"message": str(error), "type": "server_error"}}, status_code=500)

        return app

    build_server_with_handlers.plldr_hf_handlers = True
    hf_serve.build_server = build_server_with_handlers


def stop_generation_threads() -> None:
    """Stop the continuous-batching managers left running: `transformers serve` (5.24) returns from Ctrl-C with the
    manager's generation thread still alive, and that non-daemon thread would keep the process up (it waits for
    requests forever)."""
    import gc

    try:
        from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager
    except ImportError:  # a transformers without continuous batching starts no such thread
        return
    # by exact type: isinstance on every live object would touch torch's deprecated module attributes
    for manager in [obj for obj in gc.get_objects() if type(obj) is ContinuousBatchingManager]:
        if manager.is_running():
            manager.stop(block=True, timeout=10, hard_stop=True)
