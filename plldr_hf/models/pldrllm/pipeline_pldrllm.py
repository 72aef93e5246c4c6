"""`pipeline("question-answering")` for extractive QA heads such as `PldrllmForQuestionAnswering`.

Transformers 5 removed its built-in `question-answering` pipeline (`pipelines.REMOVED_TASKS`). This small `Pipeline`
subclass brings the familiar interface back for models with start/end logits: `question=`, `context=` in,
`{"answer", "score", "start", "end"}` out (character offsets into the context, from a fast tokenizer's offsets).
The best span maximises start_logit + end_logit over start ≤ end ≤ start + `max_answer_len` − 1 inside the context;
its score is the product of the start and end softmax probabilities over the context tokens.

`import plldr_hf` registers it for the task name `"question-answering"`. Self-contained (torch and transformers).
"""

import torch
from transformers import Pipeline


class ExtractiveQuestionAnsweringPipeline(Pipeline):
    """Extract the answer span of `question` from `context`.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> qa = pipeline("question-answering", model=model, tokenizer=tokenizer)  # doctest: +SKIP
    >>> qa(question="Welche Seite?", context="Das steht auf Seite 42.")  # doctest: +SKIP
    {'answer': '42', 'score': 0.93, 'start': 20, 'end': 22}
    ```
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def _sanitize_parameters(self, max_answer_len=None, max_seq_len=None, **kwargs):
        preprocess_params = {} if max_seq_len is None else {"max_seq_len": max_seq_len}
        postprocess_params = {} if max_answer_len is None else {"max_answer_len": max_answer_len}
        return preprocess_params, {}, postprocess_params

    def __call__(self, *args, question=None, context=None, **kwargs):
        """`qa(question=..., context=...)`, or `qa({"question": ..., "context": ...})` / a list of such dicts."""
        if question is not None or context is not None:
            if not isinstance(question, str) or not isinstance(context, str):
                raise TypeError("question-answering pipeline: pass `question=` and `context=` as strings")
            inputs = {"question": question, "context": context}
        elif len(args) == 1:
            inputs = args[0]
        else:
            raise TypeError("question-answering pipeline: pass `question=` and `context=`")
        return super().__call__(inputs, **kwargs)

    def preprocess(self, inputs, max_seq_len=None):
        if not isinstance(inputs, dict) or not {"question", "context"} <= set(inputs):
            raise TypeError("question-answering pipeline: each input needs 'question' and 'context'")
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError("question-answering pipeline: needs a fast tokenizer (character offsets)")
        encoding = self.tokenizer(
            inputs["question"],
            inputs["context"],
            truncation="only_second" if max_seq_len else False,
            max_length=max_seq_len,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        # 1 for context tokens: the answer must come from the context
        sequence_ids = encoding.sequence_ids(0)
        context_mask = torch.tensor([[s == 1 for s in sequence_ids]])
        offsets = encoding.pop("offset_mapping")
        return {
            "model_inputs": dict(encoding),
            "context_mask": context_mask,
            "offsets": offsets,
            "context": inputs["context"],
        }

    def _forward(self, inputs):
        out = self.model(**inputs["model_inputs"])
        return {**inputs, "start_logits": out.start_logits, "end_logits": out.end_logits}

    def postprocess(self, outputs, max_answer_len=15):
        mask = outputs["context_mask"][0]
        if not mask.any():
            raise ValueError("question-answering pipeline: the context is empty after tokenisation")
        neg = torch.finfo(torch.float32).min
        start = outputs["start_logits"][0].float().masked_fill(~mask, neg)
        end = outputs["end_logits"][0].float().masked_fill(~mask, neg)
        # (S, S) span scores, start ≤ end < start + max_answer_len
        span = start[:, None] + end[None, :]
        length = torch.arange(span.shape[0])
        valid = (length[None, :] >= length[:, None]) & (length[None, :] - length[:, None] < max_answer_len)
        valid &= mask[:, None] & mask[None, :]
        span = span.masked_fill(~valid, neg)
        best = int(span.flatten().argmax())
        i, j = divmod(best, span.shape[1])
        probability = start.softmax(-1)[i] * end.softmax(-1)[j]
        offsets = outputs["offsets"][0]
        char_start, char_end = int(offsets[i][0]), int(offsets[j][1])
        return {
            "answer": outputs["context"][char_start:char_end].strip(),
            "score": float(probability),
            "start": char_start,
            "end": char_end,
        }


__all__ = ["ExtractiveQuestionAnsweringPipeline"]
