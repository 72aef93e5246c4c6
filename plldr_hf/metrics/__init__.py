"""Local `evaluate` metric modules, loadable offline with `evaluate.load(path)`.

`evaluate.load("sacrebleu")` fetches a script from the Hub; the folders here are the offline
equivalent. Each folder holds one `evaluate.Metric` script named after the folder, as `evaluate.load` expects.
"""

from pathlib import Path


TRANSLATION_SCORES_PATH = str(Path(__file__).resolve().parent / "translation_scores")


def load_translation_metric():
    """`evaluate.load` of the local BLEU + chrF module (no network).

    Example:
        >>> metric = load_translation_metric()
        >>> round(metric.compute(predictions=["Das ist ein Test ."], references=["Das ist ein Test ."])["bleu"], 2)
        100.0
    """
    import evaluate

    return evaluate.load(TRANSLATION_SCORES_PATH)
