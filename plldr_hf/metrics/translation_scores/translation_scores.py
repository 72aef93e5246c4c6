"""Corpus BLEU and chrF through sacrebleu, as a local `evaluate` metric (offline; see `plldr_hf.evaluation`)."""

import datasets
import evaluate

from plldr_hf.evaluation import translation_scores


_DESCRIPTION = """Detokenised corpus BLEU and chrF with sacrebleu's default settings, returned with sacrebleu's
signature strings. Same numbers as `evaluate.load("sacrebleu")` / `evaluate.load("chrf")`, without the network."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): detokenised system outputs, one per segment.
    references (`list[str]` or `list[list[str]]`): one reference per segment, or several references per segment.
Returns:
    `bleu` (float), `chrf` (float), `bleu_signature` (str), `chrf_signature` (str).
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TranslationScores(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references):
        if references and isinstance(references[0], str):
            references = [[ref] for ref in references]
        # evaluate passes references per segment; sacrebleu wants one stream per reference position
        n_refs = len(references[0]) if references else 0
        if any(len(refs) != n_refs for refs in references):
            raise ValueError("every prediction needs the same number of references")
        streams = [[refs[i] for refs in references] for i in range(n_refs)]
        return translation_scores(predictions, streams)
