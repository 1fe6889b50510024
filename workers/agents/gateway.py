"""The OpenAI-compatible gateway of one engine: vLLM's own serving layer on the engine's `AsyncLLM`, with a
session per agent sample and every call recorded token for token.

    POST /s/{session}/v1/chat/completions   vLLM's chat serving: its chat template, tool-call parser, logprobs
    POST /s/{session}/v1/completions        vLLM's completion serving
    GET  /s/{session}/v1/models, /v1/models  the one model served ("policy")
    POST /s/{session}/tokenize, /tokenize    vLLM's tokenization

An agent's client is bound to one session by its base URL (`http://ADDRESS:PORT/s/SESSION/v1`) and that
session's own token, its API key, so a framework on top of the OpenAI client needs nothing else. Each
call of a session is rendered by vLLM, then handed to the engine as token ids that keep the session's
earlier context exactly as sampled (session.py); the run's sampling settings replace the agent's
(sampling.distribution), `max_tokens` is cut to the session's model tokens left, and a field outside the
allowlist (fields.py) is refused.
A request without its session's token, or to a session that closed (its agent returned), is refused
(401) and never recorded. The server listens on loopback unless `agent.host`
says otherwise, and bounds what a client can make it hold before any token is checked: a request's
header (`MAX_HEADER_BYTES`, h11's cap on an unfinished event), its body (`agent.max_request_bytes`, read
in chunks and refused once past it) and the connections open at once (`max_connections`, uvicorn's
`limit_concurrency`: 503 beyond it).

vLLM's serving classes are used here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import itertools
import logging
import socket
from collections.abc import Callable

from fastapi import Request  # at module level: FastAPI reads the endpoints' annotations by name

from orchestrator.contracts.agents import AgentConfig
from orchestrator.contracts.sampling import SamplingConfig
from workers.agents import fields
from workers.agents.session import Session, SessionRefused
from workers.rollout.sampling import cache_salt, distribution, turn_seed

SERVED_MODEL = "policy"
# How long an idle connection stays open. The sessions' HTTP client drops its idle connections sooner
# (runner.py), so it never sends a request on one the server is closing at that moment.
KEEP_ALIVE_S = 120
MAX_HEADER_BYTES = 64 << 10  # a request line and headers; an agent's are a few hundred bytes
logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Open:
    session: Session
    token: str = dataclasses.field(repr=False)
    sampling: SamplingConfig
    group_id: int
    sample_index: int
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)  # one call at a time: each extends the last
    calls: set = dataclasses.field(default_factory=set)  # in flight: cancelled (and so aborted) when the session closes
    closed: bool = False


class GatewayError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


class Gateway:
    def __init__(self, llm, engine_id: int, config: AgentConfig, policy_version: Callable[[], int]):
        self._llm = llm
        self.engine_id = engine_id
        self.config = config
        self._policy_version = policy_version
        tokenizer = llm.get_tokenizer()
        self._encode = functools.partial(tokenizer.encode, add_special_tokens=False)
        self._decode = functools.partial(tokenizer.decode, skip_special_tokens=False)
        self._sessions: dict[str, _Open] = {}
        self._calls = itertools.count()
        self._server = None
        self._serving = None
        self.url = None

    async def start(self, host: str, max_connections: int) -> str:
        """Listen on `host` (a free port), for at most `max_connections` at once, and return the base URL."""
        self._serving = await _VllmServing.build(self._llm, self.config.tool_call_parser)
        self._server, self._task, self.url = await serve(self._app(), host, max_connections)
        return self.url

    def open(self, key: str, token: str, sampling: SamplingConfig, group_id: int, sample_index: int) -> Session:
        session = Session(key, sampling.max_tokens, self.config.max_calls, self.config.on_prefix_mismatch)
        self._sessions[key] = _Open(session, token, sampling, group_id, sample_index)
        return session

    def close(self, key: str) -> None:
        """Forget the session; a call of it still running is cancelled, which aborts it in vLLM."""
        open_ = self._sessions.pop(key, None)
        if open_ is not None:
            open_.closed = True
            for call in open_.calls:
                call.cancel()

    def stop_soon(self) -> None:
        """Ask the server to stop (it finishes on the engine's loop, or goes with the process)."""
        if self._server is not None:
            self._server.should_exit = True

    # --- requests ---

    def _authorized(self, header: str | None, key: str | None) -> _Open | None:
        """The session a request may use (None for the session-free routes); raises 401/404 otherwise."""
        given = (header or "").removeprefix("Bearer ").strip().encode("latin-1", "replace")
        if key is None:
            if any(hmac.compare_digest(given, open_.token.encode()) for open_ in list(self._sessions.values())):
                return None
            raise GatewayError(401, "missing or wrong token: send your session's token as 'Authorization: Bearer ...'", "auth")
        open_ = self._sessions.get(key)
        if open_ is None or not hmac.compare_digest(given, open_.token.encode()):
            # The same answer for an unknown session and a wrong token: neither tells a stranger anything.
            raise GatewayError(401, f"no open session {key!r} for this token", "auth")
        return open_

    def _overrides(self, open_: _Open, body: dict, limit_key: str, logprobs, version: int) -> dict:
        """The body with the run's sampling settings for this call, its token limit under `limit_key`, and
        the prefix-cache salt of the policy `version` it starts on."""
        session, sampling = open_.session, open_.sampling
        left = session.admit()
        run = {
            **distribution(sampling, turn_seed(sampling, open_.group_id, open_.sample_index, len(session.calls))),
            "use_beam_search": False,
            "model": SERVED_MODEL,
            "n": 1,
            "logprobs": logprobs,
            "return_token_ids": True,
            "request_id": f"e{self.engine_id}-{session.key}-c{next(self._calls)}",
            "cache_salt": cache_salt(version),
        }
        try:
            return fields.request(body, run, limit_key, left)
        except fields.FieldRefused as error:
            raise GatewayError(400, str(error)) from None

    async def chat(self, open_: _Open, body: dict) -> dict:
        async with open_.lock:
            return await self._chat(open_, body)

    async def completion(self, open_: _Open, body: dict) -> dict:
        async with open_.lock:
            return await self._completion(open_, body)

    async def _chat(self, open_: _Open, body: dict) -> dict:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        shown = _shown(body)
        if any(isinstance(message, dict) and not _text_only(message.get("content")) for message in body.get("messages") or []):
            raise GatewayError(400, "messages: the gateway takes text content only (a text model's session is its tokens)")
        version = self._policy_version()  # the call's tokens are stamped with the policy it starts on
        request = _validated(ChatCompletionRequest, self._overrides(open_, body, "max_completion_tokens", True, version))
        rendered = await self._answer(self._serving.chat.render_chat_request(request), open_)
        ids, new_segment = open_.session.prompt_ids(rendered[1][0]["prompt_token_ids"], self._encode, self._decode)
        request.kv_transfer_params = {"prompt_token_ids": ids}  # vLLM's own way to send a prompt's ids as they are
        response = await self._answer(self._serving.chat.create_chat_completion(request, None), open_)
        choice = response.choices[0]
        reply = choice.message.model_dump(mode="json", exclude_none=True)
        self._record(
            open_,
            ids,
            choice.token_ids,
            [entry.logprob for entry in choice.logprobs.content],
            choice,
            new_segment,
            [*body["messages"], reply],
            version,
        )
        if not shown["logprobs"]:
            choice.logprobs = None
        return _without_ids(response, shown)

    async def _completion(self, open_: _Open, body: dict) -> dict:
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest

        shown = _shown(body)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise GatewayError(400, "prompt: the gateway takes one text prompt per call (one session, one conversation)")
        version = self._policy_version()
        request = _validated(CompletionRequest, self._overrides(open_, body, "max_tokens", 0, version))
        tokenizer = self._llm.get_tokenizer()  # in a thread: a long prompt would hold up the engine's loop
        rendered = (await asyncio.to_thread(tokenizer, prompt, add_special_tokens=request.add_special_tokens))["input_ids"]
        ids, new_segment = open_.session.prompt_ids(rendered, self._encode, self._decode)
        request.prompt = ids
        response = await self._answer(self._serving.completion.create_completion(request, None), open_)
        choice = response.choices[0]
        self._record(open_, ids, choice.token_ids, choice.logprobs.token_logprobs, choice, new_segment, None, version)
        if not shown["logprobs"]:
            choice.logprobs = None
        return _without_ids(response, shown)

    async def _answer(self, work, open_: _Open):
        """vLLM's response to a call, within the call's deadline; its errors (returned or raised: a prompt
        over the context, a dead engine) as GatewayErrors with vLLM's status and message. Past the deadline,
        or once the session closes, the call is cancelled, which aborts its request in the engine."""
        from vllm.entrypoints.serve import create_error_response

        if open_.closed:  # a call that waited for its session's lock, or arrived as the session ended
            work.close()
            raise GatewayError(410, f"session {open_.session.key} is closed", "session_closed")
        call = asyncio.ensure_future(work)
        open_.calls.add(call)
        try:
            done, _ = await asyncio.wait({call}, timeout=self.config.call_timeout_s)
            if not done:  # vLLM answers a cancelled call as a disconnected client: the deadline is said here
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
                deadline = f"agent.call_timeout_s={self.config.call_timeout_s:g}s"
                raise GatewayError(504, f"session {open_.session.key}: the call did not finish within {deadline}", "timeout")
            response = call.result()
        except GatewayError:
            raise
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # this handler is being cancelled, not just the call
                raise
            raise GatewayError(410, f"session {open_.session.key} closed during the call", "session_closed") from None
        except Exception as error:
            response = create_error_response(error)
        finally:
            if not call.done():  # the handler itself was cancelled: the call must not run on alone
                call.cancel()
            open_.calls.discard(call)
        _raise_if_error(response)
        return response

    def _record(self, open_: _Open, ids, completion_ids, logprobs, choice, new_segment: bool, messages, version: int) -> None:
        open_.session.record(
            ids,
            new_segment,
            messages,
            self._decode,
            completion_ids=list(completion_ids),
            logprobs=[float(value) for value in logprobs],
            finish_reason=str(choice.finish_reason),
            policy_version=version,
        )

    def _app(self):
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

        def route(handler):
            async def endpoint(request: Request, session: str | None = None):
                try:
                    open_ = self._authorized(request.headers.get("authorization"), session)
                    body = await json_body(request, self.config.max_request_bytes) if request.method == "POST" else {}
                    if not isinstance(body, dict):
                        raise GatewayError(400, "the request body must be a JSON object")
                    return JSONResponse(await handler(open_, body))
                except GatewayError as error:
                    return JSONResponse(_error_body(error), status_code=error.status)
                except SessionRefused as error:
                    return JSONResponse(_error_body(GatewayError(429, str(error), "session_limit")), status_code=429)
                except Exception as error:  # a body that is not JSON, a value vLLM's own checks refuse
                    return _vllm_error(error)

            return endpoint

        for prefix in ("/s/{session}", ""):
            app.post(prefix + "/v1/chat/completions")(route(self._session_call(self.chat)))
            app.post(prefix + "/v1/completions")(route(self._session_call(self.completion)))
            app.get(prefix + "/v1/models")(route(self._models))
            app.post(prefix + "/tokenize")(route(self._tokenize))
        return app

    def _session_call(self, handler):
        async def call(open_: _Open | None, body: dict) -> dict:
            if open_ is None:
                raise GatewayError(404, "model calls go to a session's URL: the client's base_url ends in /s/SESSION/v1")
            if body.get("stream"):
                raise GatewayError(400, "stream: the gateway answers whole responses; call with stream=False")
            if body.get("n", 1) != 1:
                raise GatewayError(400, f"n={body['n']}: a session is one conversation; call with n=1")
            return await handler(open_, body)

        return call

    async def _models(self, open_, body) -> dict:
        return (await self._serving.models.show_available_models()).model_dump(mode="json")

    async def _tokenize(self, open_, body) -> dict:
        from pydantic import TypeAdapter
        from vllm.entrypoints.serve.tokenize.protocol import TokenizeRequest

        request = _validated(TypeAdapter(TokenizeRequest).validate_python, body)
        response = await self._serving.tokenization.create_tokenize(request, None)
        _raise_if_error(response)
        return response.model_dump(mode="json")


async def serve(app, host: str, max_connections: int):
    """Serve the ASGI `app` on `host` (a free port) in this event loop, within the limits the module
    docstring gives; returns (server, its task, base URL) once it listens."""
    import uvicorn

    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    # Accepted connections inherit it: without it, a response's header and body writes wait out the
    # client's delayed ACK (40 ms per call on Linux, most of a short call's time).
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.bind((host, 0))
    listener.listen(socket.SOMAXCONN)  # every session of a step connects at once: 256 by default
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        http="h11",  # the parser whose unfinished-event buffer has a cap
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        limit_concurrency=max_connections,
    )
    server = _Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[listener]))
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
        await asyncio.sleep(0.01)
    address = f"[{host}]" if ":" in host else host
    return server, task, f"http://{address}:{listener.getsockname()[1]}"


async def json_body(request: Request, limit: int):
    """The request's JSON body, read in chunks and refused (413) as soon as it passes `limit` bytes, before
    any more of it is held; a Content-Length over the limit is refused unread."""
    import json

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise GatewayError(413, f"the request body ({declared} bytes) is over agent.max_request_bytes={limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise GatewayError(413, f"the request body is over agent.max_request_bytes={limit}")
        chunks.append(chunk)
    return json.loads(b"".join(chunks))


class _Server:
    """uvicorn's server inside the engine's own event loop, leaving the process's signals to Ray."""

    def __new__(cls, config):
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):
                yield

        return Server(config)


@dataclasses.dataclass
class _VllmServing:
    models: object
    chat: object
    completion: object
    tokenization: object

    @classmethod
    async def build(cls, llm, tool_parser: str | None) -> _VllmServing:
        from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
        from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
        from vllm.entrypoints.openai.models.protocol import BaseModelPath
        from vllm.entrypoints.openai.models.serving import OpenAIServingModels
        from vllm.entrypoints.serve.tokenize.serving import ServingTokenization
        from vllm.renderers.online_renderer import OnlineRenderer

        models = OpenAIServingModels(llm, [BaseModelPath(name=SERVED_MODEL, model_path=llm.model_config.model)])
        await models.init_static_loras()
        templating = {"request_logger": None, "chat_template": None, "chat_template_content_format": "auto"}
        tools = {"enable_auto_tools": tool_parser is not None, "tool_parser": tool_parser}
        renderer = OnlineRenderer(llm.model_config, llm.renderer, **templating, **tools)
        return cls(
            models=models,
            chat=OpenAIServingChat(llm, models, "assistant", online_renderer=renderer, **templating, **tools),
            completion=OpenAIServingCompletion(llm, models, online_renderer=renderer, request_logger=None),
            tokenization=ServingTokenization(models, renderer, **templating),
        )


def _validated(model, body: dict):
    from pydantic import ValidationError

    validate = getattr(model, "model_validate", model)
    try:
        return validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise GatewayError(400, f"{where}: {first['msg']}") from None


def _raise_if_error(response) -> None:
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse

    if isinstance(response, ErrorResponse):
        raise GatewayError(response.error.code, response.error.message, response.error.type)


def _text_only(content) -> bool:
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(isinstance(part, dict) and part.get("type") == "text" for part in content)


def _shown(body: dict) -> dict:
    """What the agent asked to see of what the gateway always records."""
    return {"logprobs": bool(body.get("logprobs")), "ids": bool(body.get("return_token_ids"))}


def _without_ids(response, shown: dict) -> dict:
    if not shown["ids"]:
        if hasattr(response, "prompt_token_ids"):
            response.prompt_token_ids = None
        for choice in response.choices:
            choice.token_ids = None
            if hasattr(choice, "prompt_token_ids"):
                choice.prompt_token_ids = None
    return response.model_dump(mode="json", exclude_none=True)


def _vllm_error(error: Exception):
    from fastapi.responses import JSONResponse
    from vllm.entrypoints.serve import create_error_response

    response = create_error_response(error)
    if response.error.code >= 500:  # not the request's fault: the engine's log says what happened
        logger.exception("agent gateway: %s", error)
    return JSONResponse(
        _error_body(GatewayError(response.error.code, response.error.message, response.error.type)),
        status_code=response.error.code,
    )


def _error_body(error: GatewayError) -> dict:
    return {"error": {"message": str(error), "type": error.kind, "code": error.status}}
