"""The import lines of optional backends, hidden while this package imports them.

transformers imports torchao, bitsandbytes and the kernels hub whenever they are installed, and they warn while
importing (torchao of its kernels built for CUDA, torch's pytree of their enums, bitsandbytes and kernels of a
missing or unverified kernel package): lines before every command's own output, about nothing the user did. Their
loggers show errors only while `import plldr_hf` (and a `plldr-hf` command) runs, and get their levels back after.

Standard library only: the command line loads it without importing the package
(`plldr_hf_cli.arguments.load_light_module`).
"""

import logging


IMPORT_NOISE_LOGGERS = ("torchao", "torch.utils._pytree", "bitsandbytes", "kernels")


def quiet_import_noise():
    """Sets the import-noise loggers to ERROR; returns the function that gives them back their levels."""
    loggers = [logging.getLogger(name) for name in IMPORT_NOISE_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    return lambda: [logger.setLevel(level) for logger, level in zip(loggers, levels)]
