"""Runs vLLM's offline engine on a model folder and writes the greedy continuations as JSON to OUT_JSON (vLLM logs to
stdout itself), and each step's 5 most likely tokens with their log-probabilities to OUT_JSON + ".logprobs".

A script, not a test module: vLLM starts its engine with spawn, which needs the `__main__` guard, and the tests run it
as a subprocess inside the vLLM environment (`tools/make_vllm_env.sh`).

    python tests/serving/vllm_generate.py MODEL_DIR PROMPTS_JSON MAX_NEW_TOKENS OUT_JSON [LLM_KWARGS_JSON]
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
        **(json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}),
    )
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, logprobs=5)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    out = Path(sys.argv[4])
    out.write_text(json.dumps([list(o.outputs[0].token_ids) for o in outputs]))
    steps = [[{t: lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs] for o in outputs]
    out.with_name(out.name + ".logprobs").write_text(json.dumps(steps))


if __name__ == "__main__":
    main()
