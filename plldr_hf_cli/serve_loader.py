"""The model loader `plldr-hf serve` hands to `transformers serve` (5.25 and later).

From 5.25 `transformers serve` loads each model in a process started with `spawn`, with a pickled copy of the
server's `ModelLoader` (`transformers/cli/serving/model_manager.py`). That process never ran `import plldr_hf`, so it
could not resolve the families' architectures. Pickling this subclass names this module, so unpickling it in the
child imports the module, and with it the package's registration. Imported only when `serve` runs (it imports
transformers' serving extra).
"""

from transformers.cli.serving.model_manager import ModelLoader

import plldr_hf.models  # noqa: F401  (registers the families and exposes their classes on `transformers` in every process)


class PackageModelLoader(ModelLoader):
    """`transformers serve`'s `ModelLoader`, defined in a module that imports plldr_hf (see the module docstring)."""

    def load_model_and_processor(self, *args, **kwargs):
        # in the spawned process the serving module can hold another `transformers` module object than the one
        # `import plldr_hf` exposed the classes on (seen with 5.25), and it looks the architectures up on its own
        from transformers.cli.serving import model_manager

        from plldr_hf._compat import expose_in_transformers
        from plldr_hf.models import EXPOSED_CLASSES

        expose_in_transformers(*EXPOSED_CLASSES, module=model_manager.transformers)
        return super().load_model_and_processor(*args, **kwargs)


def install() -> None:
    """Make `transformers serve` build `PackageModelLoader` (it imports the name `ModelLoader` from its module
    when the server starts)."""
    from transformers.cli.serving import model_manager

    model_manager.ModelLoader = PackageModelLoader
