"""Version shims for package-only code (training, evaluation, CLI). Model files never import this module."""
