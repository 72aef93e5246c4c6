"""plldr_hf: PLDR-LLM (Power Law Graph Attention) and the AGF / PCM-V translation Transformer for Transformers 5.

Importing the package registers model types `pldrllm` and `agf` with the Auto classes. `model.push_to_hub` is
transformers' own; `plldr_hf.hub.push_to_hub(model, repo_id, tokenizer=..., card=...)` (and `plldr-hf push`)
publishes a complete repo with the model card and custom pipelines.

`python -m plldr_hf COMMAND` (the command line, as torchrun and accelerate launch it) is `plldr-hf COMMAND`: Python
imports this package before it runs `plldr_hf/__main__.py`, so there the families are imported by the commands that
use them (`plldr_hf.models`), or on the first attribute asked of this package, not before the command line is parsed:
`--help` and a refusal take a tenth of a second instead of the seconds torch and transformers take to import.
"""

import sys


__version__ = "0.1.0"


def _runs_as_command_line() -> bool:
    # while Python imports the package of `python [flags] -m plldr_hf`, argv[0] is "-m" and orig_argv has the name
    try:
        return sys.argv[:1] == ["-m"] and sys.orig_argv[sys.orig_argv.index("-m") + 1] == "plldr_hf"
    except (AttributeError, ValueError, IndexError):
        return False


def _import_families() -> None:
    """Registers the families with the Auto classes and puts their classes on this package (the optional backends
    transformers imports on the way say nothing: `plldr_hf.import_noise`)."""
    from plldr_hf.import_noise import quiet_import_noise

    restore = quiet_import_noise()
    try:
        import plldr_hf.models as models
        from plldr_hf.models.pldrllm.conversion import load_predefined_g
    finally:
        restore()

    globals().update({name: getattr(models, name) for name in models.__all__}, load_predefined_g=load_predefined_g)
    globals()["__all__"] = [*models.__all__, "load_predefined_g", "__version__"]


if _runs_as_command_line():

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        _import_families()
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(f"module 'plldr_hf' has no attribute {name!r}") from None

else:
    _import_families()
