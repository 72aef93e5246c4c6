"""`python -m benchmarks.serve_load`: a load test of `plldr-hf serve` on loopback. Concurrent completion requests, a
third of them bad across every checked field (`plldr_hf_cli/serve_checks.py`), with and without continuous
batching: every bad request must get a 4xx naming its field, every good one the tokens `generate()` gives, and the
server must still answer at the end. Prints and writes a Markdown table (`--results`).

The model is a tiny collapsed PLDR-LLM with 32 positions (made here, or `--model DIR`), so a long prompt is a few
dozen words. Requests go to 127.0.0.1 only, bounded in number and time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


WORDS = "the a cat dog sat on mat and ran far away over hill bird sang".split()


def bad_requests(model: str, positions: int) -> list[tuple[str, dict | bytes, str]]:
    """(route, body, the field its refusal must name): one or more mistakes per checked field."""
    long_prompt = " ".join(WORDS[i % len(WORDS)] for i in range(positions + 8))
    ok = {"model": model, "prompt": "the cat", "max_tokens": 2}
    cases = [
        ({"max_tokens": -1}, "max_tokens"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 10**9}, "max_tokens"),
        ({"max_tokens": "eight"}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
        ({"temperature": -1}, "temperature"), ({"temperature": "hot"}, "temperature"), ({"temperature": 9}, "temperature"),
        ({"top_p": 5}, "top_p"), ({"top_p": 0}, "top_p"), ({"n": 1000}, "n"), ({"n": 0}, "n"), ({"seed": "abc"}, "seed"),
        ({"seed": 1.5}, "seed"), ({"top_k": -3}, "top_k"), ({"stream": "yes"}, "stream"), ({"stop": 5}, "stop"),
        ({"frequency_penalty": 3}, "frequency_penalty"), ({"presence_penalty": -7}, "presence_penalty"),
        ({"prompt": ""}, "prompt"), ({"prompt": None}, "prompt"), ({"prompt": []}, "prompt"), ({"prompt": 5}, "prompt"),
        ({"prompt": long_prompt}, "prompt"), ({"prompt": "x " * 3_000_000}, "prompt"),
    ]  # fmt: skip
    out = [("/v1/completions", {**ok, **change}, field) for change, field in cases]
    nan = json.dumps({**ok, "temperature": float("nan")}).encode()  # NaN is not JSON, but Python's parser reads it
    out += [
        ("/v1/completions", nan, "temperature"),
        ("/v1/completions", b"{not json", "body"),
        ("/v1/completions", b"[1, 2]", "body"),
        ("/v1/chat/completions", {"model": model, "messages": []}, "messages"),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}], "n": 3}, "n"),
    ]
    return out


def post(port: int, route: str, body, timeout: float = 120) -> tuple[int, dict | None]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{route}", data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw or b"null")
        except json.JSONDecodeError:
            return error.code, {"raw": raw[:200].decode(errors="replace")}


def make_model(folder: Path, positions: int = 32):
    """A tiny collapsed PLDR-LLM with the tests' word tokenizer, and prompts with the greedy continuations
    `generate()` gives them."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.utils import tiny_model, tiny_pldrllm_tokenizer

    tokenizer = tiny_pldrllm_tokenizer()
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    model = tiny_model(
        "sdpa",
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=positions,
        **ids,
    ).eval()
    model.collapse(force=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    expected = {}
    for i in range(12):
        prompt = " ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(2 + i % 4))
        batch = tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            new = model.generate(**batch, max_new_tokens=4, do_sample=False)[0, batch["input_ids"].shape[1] :]
        expected[prompt] = tokenizer.decode(new, skip_special_tokens=True).strip()
    return expected


def run_load(
    model: str, expected: dict, positions: int, *, requests: int, continuous_batching: bool, workers: int = 16
):
    """Start the server, send `requests` requests (a third bad) from `workers` threads, check every answer, then a
    last good request; returns the counts and the problems found."""
    from tests.utils import free_port

    port = free_port()
    script = shutil.which("plldr-hf", path=os.path.dirname(sys.executable)) or shutil.which("plldr-hf")
    argv = [script, "serve", model, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    if continuous_batching:
        # a paged cache of the workload's size: transformers sizes it from the machine's free memory otherwise
        argv += ["--continuous-batching", "--cb-num-blocks", "32", "--cb-max-batch-tokens", "512"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    bad = bad_requests(model, positions)
    good = [(p, t) for p, t in expected.items()]
    plan = []
    for i in range(requests):
        if i % 3 == 2:
            plan.append(("bad",) + bad[(i // 3) % len(bad)])
        else:
            prompt, text = good[i % len(good)]
            body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0}
            plan.append(("good", "/v1/completions", body, text))
    problems, counts = [], {"good": 0, "bad": 0, "good_ok": 0, "bad_ok": 0}
    start = time.perf_counter()
    try:
        deadline = time.time() + 180
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited at start: {server.stderr.read()[-2000:]}")
            if time.time() > deadline:
                raise RuntimeError("the server did not come up within 180 s")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        start = time.perf_counter()

        def one(item):
            kind, route, body, want = item
            return item, post(port, route, body)

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for (kind, _route, body, want), (status, answer) in pool.map(one, plan):
                counts[kind] += 1
                if kind == "bad":
                    param = ((answer or {}).get("error") or {}).get("param") if isinstance(answer, dict) else None
                    if 400 <= status < 500 and param == want:
                        counts["bad_ok"] += 1
                    else:
                        problems.append(f"bad {want}: HTTP {status} {str(answer)[:160]}")
                else:
                    text = (answer or {}).get("choices", [{}])[0].get("text", "").strip() if status == 200 else None
                    if text == want:
                        counts["good_ok"] += 1
                    else:
                        problems.append(f"good {body['prompt']!r}: HTTP {status}, {text!r} != {want!r}")
        elapsed = time.perf_counter() - start
        prompt, text = good[0]
        status, answer = post(
            port, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0}
        )
        alive = status == 200 and answer["choices"][0]["text"].strip() == text and server.poll() is None
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return {**counts, "alive": alive, "seconds": elapsed, "problems": problems}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve_load", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per server [200]")
    parser.add_argument("--workers", type=int, default=16, help="concurrent client threads [16]")
    parser.add_argument("--results", type=Path, default=None, help="write the table to this .md file")
    args = parser.parse_args(argv)
    for name in ("requests", "workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.results is not None and args.results.is_dir():
        parser.error(f"--results {args.results} is a folder; give a .md file")
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "collapsed"
        expected = make_model(folder)
        for cb in (False, True):
            result = run_load(
                str(folder), expected, 32, requests=args.requests, continuous_batching=cb, workers=args.workers
            )
            rows.append((cb, result))
            for problem in result["problems"][:10]:
                print(f"  {'cb' if cb else 'plain'}: {problem}")
    lines = [
        "| continuous batching | requests | bad refused with their field (4xx) | good equal to generate() | alive after | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for cb, r in rows:
        lines.append(
            f"| {'yes' if cb else 'no'} | {r['good'] + r['bad']} | {r['bad_ok']}/{r['bad']} | {r['good_ok']}/{r['good']} "
            f"| {'yes' if r['alive'] else 'NO'} | {r['seconds']:.1f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(f"# plldr-hf serve under load ({os.cpu_count()} cores)\n\n{table}\n")
    ok = all(r["alive"] and r["bad_ok"] == r["bad"] and r["good_ok"] == r["good"] for _, r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
