"""Every request to `plldr-hf serve` checked before any work: a client mistake is an HTTP 4xx that names the field,
and no request reaches the model that could fail inside it (a prompt past the model's positions would stop the
continuous-batching worker, and every later request with it).

`transformers serve` itself ignores some fields (`n`), passes others through unchecked (`max_tokens` of -1 or
"eight", a NaN temperature, `top_p` 5) and answers a prompt longer than the model's positions with a 500. The
checks here are the OpenAI API's ranges (https://platform.openai.com/docs/api-reference/completions) with the
model's limits, for every model the server holds (Llama included), as an ASGI middleware in front of the app.

| field | accepted |
|---|---|
| `prompt` (completions) | non-empty text, or a non-empty list of texts or of token ids |
| `messages` (chat) | a non-empty list of objects with a `role` |
| `max_tokens`, `max_completion_tokens`, `max_output_tokens` | an integer ≥ 1, within the positions the prompt leaves; absent: those positions (as vLLM does), where the model has a hard limit |
| `temperature` | a finite number in [0, 2] |
| `top_p` | a finite number in (0, 1] |
| `frequency_penalty`, `presence_penalty` | a finite number in [-2, 2] |
| `seed`, `top_k` | an integer (`top_k` ≥ 0) |
| `n` | 1 (the server returns one choice) |
| `stream` | true or false |
| `stop` | text or a list of texts |
| the body | a JSON object of at most `MAX_BODY_BYTES` |
"""

from __future__ import annotations

import json
import math
from pathlib import Path


MAX_BODY_BYTES = 1 << 20
ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class ModelLimits:
    """What a request may ask of one model: its hard position limit (None: none that generation would hit) and its
    tokenizer (to count a prompt's tokens), read once per model folder."""

    def __init__(self, default_model: str | None):
        self.default_model = default_model
        self._cache: dict[str, tuple[int | None, object]] = {}

    def of(self, model: str | None) -> tuple[int | None, object]:
        name = model if isinstance(model, str) and Path(model).is_dir() else self.default_model
        if name is None or not Path(name).is_dir():
            return None, None
        if name not in self._cache:
            from plldr_hf.loading import read_config

            config = read_config(name)
            positions = None
            # the reference RoPE table of PLDR-LLM ends at `max_position_embeddings`; other models (Llama) compute
            # their positions and have no hard limit a request could hit
            if config.get("model_type") == "pldrllm" and config.get("reference_rope", True):
                positions = config.get("max_position_embeddings")
            tokenizer = None
            try:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(name)
            except (OSError, ValueError, TypeError, RecursionError):
                pass  # the server's own load names it
            self._cache[name] = (positions, tokenizer)
        return self._cache[name]


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _prompt_tokens(body: dict, tokenizer) -> int | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(_integer(t) for t in prompt):
        return len(prompt)
    if tokenizer is None:
        return None
    if isinstance(prompt, str):
        return len(tokenizer(prompt)["input_ids"])
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return max(len(ids) for ids in tokenizer(prompt)["input_ids"])
    messages = body.get("messages")
    if isinstance(messages, list) and getattr(tokenizer, "chat_template", None):
        try:
            return len(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True))
        except Exception:  # the server answers a message it cannot format itself
            return None
    return None


def check_request(path: str, body: bytes, limits: ModelLimits) -> tuple[int, str, str] | dict:
    """(status, field, message) for a request to refuse, else the request's JSON object (with `max_tokens` filled in
    where the model has a hard limit and the request gave none)."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return 400, "body", "the request body is not a JSON object"
    if not isinstance(request, dict):
        return 400, "body", "the request body must be a JSON object"
    if path == "/v1/completions":
        prompt = request.get("prompt")
        good = (isinstance(prompt, str) and prompt) or (
            isinstance(prompt, list)
            and prompt
            and (all(isinstance(p, str) and p for p in prompt) or all(map(_integer, prompt)))
        )
        if not good:
            return 400, "prompt", "prompt must be non-empty text, or a non-empty list of texts or of token ids"
    if path == "/v1/chat/completions":
        messages = request.get("messages")
        if not (
            isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m for m in messages)
        ):
            return 400, "messages", "messages must be a non-empty list of objects with a role and content"
    for name, ok, rule in (
        ("temperature", lambda v: _number(v) and 0 <= v <= 2, "a finite number in [0, 2]"),
        ("top_p", lambda v: _number(v) and 0 < v <= 1, "a finite number in (0, 1]"),
        ("frequency_penalty", lambda v: _number(v) and -2 <= v <= 2, "a finite number in [-2, 2]"),
        ("presence_penalty", lambda v: _number(v) and -2 <= v <= 2, "a finite number in [-2, 2]"),
        ("seed", _integer, "an integer"),
        ("top_k", lambda v: _integer(v) and v >= 0, "a non-negative integer"),
        ("n", lambda v: v == 1 and _integer(v), "1: this server returns one choice per request; send n requests"),
        ("stream", lambda v: isinstance(v, bool), "true or false"),
        ("stop", lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)),
         "text or a list of texts"),
    ):  # fmt: skip
        value = request.get(name)
        if value is not None and not ok(value):
            return 400, name, f"{name} must be {rule}, got {json.dumps(value)[:40]}"
    given = [name for name in TOKEN_FIELDS if request.get(name) is not None]
    for name in given:
        if not (_integer(request[name]) and request[name] >= 1):
            return 400, name, f"{name} must be an integer of at least 1, got {json.dumps(request[name])[:40]}"
    positions, tokenizer = limits.of(request.get("model"))
    if positions is None:
        return request
    used = _prompt_tokens(request, tokenizer)
    if used is None:
        return request
    left = positions - used
    field = "prompt" if path == "/v1/completions" else "messages" if path == "/v1/chat/completions" else "input"
    if left < 1:
        return (
            400,
            field,
            (
                f"the prompt has {used:,} tokens and the model has {positions:,} positions, which leaves none to "
                "generate; shorten the prompt"
            ),
        )
    for name in given:
        if request[name] > left:
            return (
                400,
                name,
                (
                    f"{name}={request[name]:,} is more than the {left:,} positions the {used:,}-token prompt leaves of "
                    f"the model's {positions:,}; ask for at most {left:,}"
                ),
            )
    if not given:
        request["max_completion_tokens" if path == "/v1/chat/completions" else "max_tokens"] = left
    return request


class RequestChecks:
    """ASGI middleware: requests to the generation routes are read whole, checked (`check_request`) and refused
    with a 4xx naming the field, or passed on (with the body as checked)."""

    def __init__(self, app, limits: ModelLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in ROUTES:
            return await self.app(scope, receive, send)
        body, size, more = b"", 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            # past the limit the rest is read and dropped: a reply before the client has sent its body would reach
            # it as a reset connection, not as the 413
            body = body + chunk if size <= MAX_BODY_BYTES else b""
            more = message.get("more_body", False)
        if size > MAX_BODY_BYTES:
            return await _refuse(
                send, 413, "prompt", f"the request is {size:,} bytes, over {MAX_BODY_BYTES:,}; send a shorter prompt"
            )
        import asyncio

        checked = await asyncio.get_running_loop().run_in_executor(
            None, check_request, scope["path"], body, self.limits
        )
        if isinstance(checked, tuple):
            return await _refuse(send, *checked)
        body = json.dumps(checked).encode()
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        return await self.app({**scope, "headers": headers}, replay, send)


async def _refuse(send, status: int, field: str, message: str) -> None:
    payload = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": field, "code": None}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
