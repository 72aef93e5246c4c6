"""Loads published models in a fresh process and records their outputs; run as a script by the Hub tests.

    python -I tests/hub_loader.py SPEC.json OUT.pt

SPEC: `{"mode": "no-package" | "package", "cases": [{"name", "source", "kind": "causal" | "seq2seq",
"trust_remote_code", "prompts": [str, ...], "decoder_input_ids": [[int]] (seq2seq), "max_new_tokens",
"pipeline": bool}]}`; `source` is a Hub repo id (endpoint from HF_ENDPOINT) or a local folder.

In "no-package" mode the process first makes `plldr_hf` unimportable (drops the editable-install finder and any
`sys.path` entry that holds the package, then blocks the name on `sys.meta_path`) and records that `import plldr_hf`
fails; only torch, transformers and the standard library are used. In "package" mode it imports `plldr_hf` first and
loads without remote code (the publishing process calls `load` in this mode itself, after its pushes). The reference
outputs of the original models come from the same `compute_outputs`.

This file must not import `plldr_hf` or anything from `tests` at module level.
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys


# greedy, and a fixed length (EOS suppressed until max_new_tokens) so that every generated token is compared
GENERATION = {"do_sample": False, "num_beams": 1}


def block_package(name: str = "plldr_hf") -> None:
    class _Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == name or fullname.startswith(name + "."):
                raise ModuleNotFoundError(f"{fullname} is blocked in this process", name=fullname)
            return None

    def module_of(finder) -> str:  # setuptools installs its editable finder as a class, not an instance
        return (finder if isinstance(finder, type) else type(finder)).__module__.lower()

    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in module_of(f)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in getattr(h, "__module__", "").lower()]
    sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", name))]
    sys.path_importer_cache.clear()
    sys.meta_path.insert(0, _Blocker())


def compute_outputs(model, tokenizer, case: dict) -> dict:
    """Logits on fixed inputs and a greedy generation, from the prompts tokenised by `tokenizer`."""
    import torch

    model.eval()
    batch = tokenizer(case["prompts"][:1], return_tensors="pt")
    out = {"input_ids": batch["input_ids"]}
    with torch.no_grad():
        if case["kind"] == "causal":
            out["logits"] = model(**batch).logits
        else:
            decoder_input_ids = torch.tensor(case["decoder_input_ids"])
            out["logits"] = model(**batch, decoder_input_ids=decoder_input_ids).logits
        length = case["max_new_tokens"]
        out["generated"] = model.generate(**batch, **GENERATION, max_new_tokens=length, min_new_tokens=length)
    out["generated_text"] = tokenizer.batch_decode(out["generated"], skip_special_tokens=True)
    return out


def run_pipelines(case: dict, mode: str) -> dict:
    from transformers import pipeline

    kwargs = {"trust_remote_code": case["trust_remote_code"], "device": "cpu"}
    generation = {**GENERATION, "max_new_tokens": case["max_new_tokens"], "min_new_tokens": case["max_new_tokens"]}
    extra = {}
    if case["kind"] == "causal":
        pipe = pipeline("text-generation", model=case["source"], **kwargs)
        single = pipe(case["prompts"][0], **generation)
        batch = pipe(case["prompts"], **generation)
    else:
        if mode == "package":
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            from plldr_hf import AgfTranslationPipeline

            # a repo id follows the repo's custom_pipelines entry unless the class is given (no remote code runs)
            kwargs["pipeline_class"] = AgfTranslationPipeline
            # a model object goes through the task registered by `import plldr_hf`
            model = AutoModelForSeq2SeqLM.from_pretrained(case["source"])
            tokenizer = AutoTokenizer.from_pretrained(case["source"])
            registered = pipeline("translation", model=model, tokenizer=tokenizer, device="cpu")
            extra["registered_class"] = f"{type(registered).__module__}.{type(registered).__name__}"
            extra["registered_single"] = registered(case["prompts"][0], **generation)
        pipe = pipeline("translation", model=case["source"], **kwargs)
        single = pipe(case["prompts"][0], **generation)
        batch = pipe(case["prompts"], **generation)
    return {
        "pipeline_class": f"{type(pipe).__module__}.{type(pipe).__name__}",
        "single": single,
        "batch": batch,
        **extra,
    }


def load(spec: dict) -> dict:
    """Load every case of `spec` and record its outputs (see the module docstring)."""
    mode = spec["mode"]
    report = {"mode": mode}
    if mode == "no-package":
        block_package()
        # sys.path alone (no blocker involved) must not find the package either
        report["on_sys_path"] = importlib.machinery.PathFinder.find_spec("plldr_hf", sys.path) is not None
        report["editable_finders"] = [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()]
        try:
            import plldr_hf  # noqa: F401

            report["package_importable"] = True
        except ImportError:
            report["package_importable"] = False
    else:
        import plldr_hf  # noqa: F401

        report["package_importable"] = True

    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    torch.set_num_threads(1)
    for case in spec["cases"]:
        auto = AutoModelForCausalLM if case["kind"] == "causal" else AutoModelForSeq2SeqLM
        trust = case["trust_remote_code"]
        model = auto.from_pretrained(case["source"], trust_remote_code=trust)
        tokenizer = AutoTokenizer.from_pretrained(case["source"], trust_remote_code=trust)
        result = compute_outputs(model, tokenizer, case)
        result["model_class"] = f"{type(model).__module__}.{type(model).__name__}"
        result["collapsed"] = bool(getattr(model.config, "collapsed", False))
        result["state_dict_keys"] = sorted(model.state_dict())
        # the base model through `AutoModel` (what vLLM's Transformers backend loads): same weights as the head's
        base = AutoModel.from_pretrained(case["source"], trust_remote_code=trust)
        head_base = model.base_model
        result["base_model_class"] = f"{type(base).__module__}.{type(base).__name__}"
        result["base_model_same_weights"] = all(
            torch.equal(tensor, head_base.state_dict()[name]) for name, tensor in base.state_dict().items()
        )
        if case.get("pipeline"):
            result["pipelines"] = run_pipelines(case, mode)
        report[case["name"]] = result
    report["plldr_hf_modules"] = sorted(name for name in sys.modules if name.split(".")[0] == "plldr_hf")
    return report


def main(spec_path: str, out_path: str) -> None:
    import torch

    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    torch.save(load(spec), out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
