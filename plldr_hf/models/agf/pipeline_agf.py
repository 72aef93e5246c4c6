"""`pipeline("translation")` for encoder–decoder models such as the AGF translator.

Transformers 5 removed its built-in `translation` / `text2text-generation` pipelines. This small `Pipeline` subclass
brings the familiar interface back: source texts in, `[{"translation_text": ...}]` out, generation keyword arguments
(`max_new_tokens`, `num_beams`, ...) passed through to `generate()`.

- With `plldr_hf` installed, `import plldr_hf` registers it for the task name `"translation"`.
- Without the package, a Hub repository pushed by `plldr_hf` carries this file and a `custom_pipelines` entry in its
  `config.json`, so `pipeline("translation", model=repo_id, trust_remote_code=True)` loads it from the repository.

Self-contained (transformers and the standard library only), because it travels with the model as remote code.
"""

from transformers import Pipeline


class AgfTranslationPipeline(Pipeline):
    """Translate texts with a sequence-to-sequence model and its tokenizer.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> translator = pipeline("translation", model=model, tokenizer=tokenizer)  # doctest: +SKIP
    >>> translator("Click the button.", max_new_tokens=32, num_beams=4)  # doctest: +SKIP
    [{'translation_text': 'Klicken Sie auf die Schaltfläche.'}]
    ```
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _pipeline_calls_generate = True

    def _sanitize_parameters(
        self,
        truncation=None,
        max_length=None,
        skip_special_tokens=None,
        clean_up_tokenization_spaces=None,
        return_tensors=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if max_length is not None:
            preprocess_params["max_length"] = max_length
        postprocess_params = {}
        if skip_special_tokens is not None:
            postprocess_params["skip_special_tokens"] = skip_special_tokens
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, texts, **kwargs):
        """Translate one text (returns a list with one dict) or a list of texts (a list of such lists)."""
        if not isinstance(texts, (str, list, tuple)):
            raise TypeError(
                f"translation pipeline: expected a string or a list of strings, got {type(texts).__name__}"
            )
        return super().__call__(texts, **kwargs)

    def preprocess(self, text, truncation=True, max_length=None):
        if not isinstance(text, str):
            raise TypeError(f"translation pipeline: expected a string, got {type(text).__name__}")
        return self.tokenizer(text, return_tensors="pt", truncation=truncation, max_length=max_length)

    def _forward(self, model_inputs, **generate_kwargs):
        if hasattr(self, "_prepare_generate_kwargs"):
            # transformers >= 5.2x: merges the settings given when the pipeline was built and the pipeline defaults
            generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        else:
            # older 5.x (5.19, vLLM's pin): the pipeline's generation config, unless the call passes its own
            generate_kwargs.setdefault("generation_config", self.generation_config)
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        return {"output_ids": output_ids}

    def postprocess(
        self, model_outputs, skip_special_tokens=True, clean_up_tokenization_spaces=None, return_tensors=False
    ):
        results = []
        for ids in model_outputs["output_ids"]:
            if return_tensors:
                results.append({"translation_token_ids": ids})
            else:
                text = self.tokenizer.decode(
                    ids,
                    skip_special_tokens=skip_special_tokens,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
                results.append({"translation_text": text})
        return results


__all__ = ["AgfTranslationPipeline"]
