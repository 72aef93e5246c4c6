"""Runs vLLM's offline engine on a model folder and writes the greedy continuations as JSON to OUT_JSON (vLLM logs to
stdout itself).

A script, not a test module: vLLM starts its engine with spawn, which needs the `__main__` guard, and the tests run it
as a subprocess inside the vLLM environment (`tools/make_vllm_env.sh`).

    python tests/serving/vllm_generate.py MODEL_DIR PROMPTS_JSON MAX_NEW_TOKENS OUT_JSON
"""

import json
import sys
from pathlib import Path


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    folder, prompts, new_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    llm = LLM(
        model=folder,
        dtype="float32",
        max_model_len=64,
        max_num_seqs=len(prompts),
        # on the CPU backend this fraction of the machine's memory is reserved for the KV cache
        gpu_memory_utilization=0.1,
        enforce_eager=True,
    )
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    Path(sys.argv[4]).write_text(json.dumps([list(o.outputs[0].token_ids) for o in outputs]))


if __name__ == "__main__":
    main()
