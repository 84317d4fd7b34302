"""The engine's request (``CompletionRequest``), whichever API it came through: what every
API's request is checked with (the alias, the tool choice, the stream), and its resolution
against the catalog: svc-auto routed, an output limit above the alias's lowered to it, the
prompt's estimate and bound for the reservation worked out.

Each API's dialect (``app.apis``) reads its own body into the OpenAI wire format
(``app.upstream.wire``), which is forwarded upstream, and hands it to ``resolve_params``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET

from app.completion.catalog import AUTO, AUTO_ROUTES, FAST, Alias, route_auto
from app.completion.output import StreamOutput
from app.core.errors import ApiError, ErrorKind, invalid_value, model_not_allowed, stream_required
from app.core.settings import REFUSE_NON_STREAMING
from app.core.tokens import (
    IMAGE_TOKENS_ESTIMATE,
    audio_token_bound,
    estimate_prompt_tokens,
    prompt_token_bound,
)
from app.upstream.base import NativeRequest
from app.upstream.wire import (
    AudioPart,
    ChatRequest,
    FilePart,
    ImagePart,
    Message,
    NamedToolChoice,
    message_text,
)

if TYPE_CHECKING:
    from app.core.settings import Settings

DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 1.0
DEFAULT_IMAGE_TOKEN_BOUND = 4_096
CLAMPED_HEADER = "svc-max-tokens-clamped"
"""The response header saying a request's output limit was above its alias's and was
lowered to it: its value is the limit the request was served with."""

Identify = Callable[[str | None], str]
"""The ``safety_identifier`` sent upstream for the requesting account, given the client's
own identifier of its end user, or None (``app.upstream.safety.SafetyIdentifiers.of``
bound to the account)."""


OpenOutput = Callable[["CompletionRequest", int], StreamOutput]
"""How an API writes a request's stream: its ``StreamOutput`` for the request, given the
completion's ``created`` (each API's dialect, ``app.apis``)."""


class CompletionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A validated request, resolved against the alias catalog."""

    requested: str
    alias: Alias
    request: ChatRequest
    """What is forwarded upstream (the contract's sampling defaults filled in, the fields
    the alias does not allow left out: ``app.completion.catalog.GATED_FIELDS``, svc's
    ``safety_identifier`` in place of the client's)."""
    max_tokens: int | None
    """The client's output limit (at most the alias's), or None when it set none."""
    prompt_texts: list[str]
    """The prompt's text, kept for ``prompt_tokens``."""
    media_estimate: int
    """Prompt tokens its images, audio and files are billed as when no usage is reported."""
    prompt_token_bound: int
    """Reserved for, and the most of an upstream's prompt_tokens that is billed."""
    api: str
    """The API the request came through (``app.kv.fields.APIS``), recorded with its usage."""
    models: str
    """The aliases the key must allow (space-separated): the one asked for, or every one
    svc-auto may route to."""
    native: NativeRequest | None = None
    """The request in its own API as the client sent it (Responses or Messages), for
    providers that serve that API."""
    output: OpenOutput
    """How its stream is written: the API's ``StreamOutput``, made when the relay starts
    (given the request and the completion's ``created``)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers the stream's response carries about how its request was read (the Responses
    API's ``svc-omitted-tools``, every API's ``CLAMPED_HEADER``)."""

    @property
    def prompt_tokens(self) -> int:
        """Billed when the upstream reports no usage (an estimate). Worked out only then:
        the estimate reads every character of the prompt, and most upstreams report."""
        return estimate_prompt_tokens(self.prompt_texts) + self.media_estimate


class _Prompt(msgspec.Struct):
    """What a request's messages carry, counted as the estimates need it."""

    texts: list[str]
    media_chars: int = 0  # characters of image URLs, audio and file data in the body
    media_bound: int = 0  # prompt tokens those may count, at the most
    media_estimate: int = 0  # and as estimated when an upstream reports none


def _count_prompt(messages: list[Message], image_token_bound: int) -> _Prompt:
    prompt = _Prompt(texts=[message_text(m) for m in messages])
    for message in messages:
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            if isinstance(part, ImagePart):
                prompt.media_chars += len(part.image_url.url)
                prompt.media_bound += image_token_bound
                prompt.media_estimate += IMAGE_TOKENS_ESTIMATE
            elif isinstance(part, AudioPart):
                chars = len(part.input_audio.data)
                prompt.media_chars += chars
                prompt.media_bound += audio_token_bound(chars)
                prompt.media_estimate += audio_token_bound(chars) // 4
            elif isinstance(part, FilePart) and isinstance(part.file.file_data, str):
                # a file's text counts as its bytes at the most (a bound, as for text)
                prompt.media_estimate += len(part.file.file_data) // 4
    return prompt


def check_message_count(
    count: int, most: int, param: str, items: str = "messages", note: str = ""
) -> None:
    """The request limit on a conversation's length (``SVC_MAX_MESSAGES``), on every API:
    the 400 naming ``param``, the API's list of ``items``, past ``most``."""
    if count > most:
        raise invalid_value(param, f"'{param}' may hold at most {most} {items}{note}.")


def check_message_chars(message: Message, most: int, param: str, what: str = "A message") -> None:
    """The request limit on a message's text (``SVC_MAX_MESSAGE_CHARS``), on every API:
    the 400 naming ``param`` past ``most`` characters."""
    if len(message_text(message)) > most:
        raise invalid_value(param, f"{what} may hold at most {most} characters.")


def check_tool_choice(req: ChatRequest) -> None:
    """A named tool choice names a tool of the request; "auto" or "required" needs tools."""
    if isinstance(req.tool_choice, NamedToolChoice):
        names = {tool.function.name for tool in req.tools or ()}
        if req.tool_choice.function.name not in names:
            raise invalid_value(
                "tool_choice", f"No tool named '{req.tool_choice.function.name[:64]}' in 'tools'."
            )
    elif req.tool_choice in ("auto", "required") and not req.tools:
        raise invalid_value("tool_choice", "'tool_choice' needs 'tools'.")


def client_identifier(user: object, safety_identifier: object) -> str | None:
    """The client's own identifier of its end user: its ``safety_identifier``, else its
    ``user`` (deprecated by OpenAI for it), else None."""
    for value in (safety_identifier, user):
        if isinstance(value, str) and value:
            return value
    return None


def enabled_alias(aliases: dict[str, Alias], model: str) -> Alias:
    """The enabled alias named ``model``, or the 404 ``model_not_found`` naming the enabled
    ones (chat completions and ``GET /v1/models/{model}``)."""
    alias = aliases.get(model)
    if alias is None or not alias.enabled:
        raise ApiError(
            ErrorKind.MODEL_NOT_FOUND,
            f"The model '{model[:100]}' does not exist. "
            f"Use one of: {', '.join(a for a, v in aliases.items() if v.enabled)}.",
            param="model",
        )
    return alias


def _auto_target(aliases: dict[str, Alias], chosen: str) -> Alias:
    """The alias svc-auto serves with: the heuristic's choice, or svc-fast when an operator
    disabled it (or, failing that, any enabled alias but svc-auto itself)."""
    for alias_id in (chosen, FAST, *aliases):
        alias = aliases.get(alias_id)
        if alias is not None and alias.enabled and alias_id != AUTO:
            return alias
    raise ApiError(ErrorKind.MODEL_NOT_FOUND, "No model is available for svc-auto.", param="model")


def auto_models(aliases: dict[str, Alias]) -> str:
    """Every alias svc-auto may route to, space-separated (what a key must allow for it)."""
    return " ".join(sorted({_auto_target(aliases, chosen).id for chosen in AUTO_ROUTES}))


def key_may_use(alias_id: str, allowed: frozenset[str] | None, aliases: dict[str, Alias]) -> bool:
    """Whether a key that allows ``allowed`` (None: all) may use ``alias_id``: the rule the
    reserve script applies, for the model list."""
    if allowed is None:
        return True
    needed = auto_models(aliases).split() if alias_id == AUTO else [alias_id]
    return allowed.issuperset(needed)


def usable_aliases(aliases: dict[str, Alias], allowed: frozenset[str] | None) -> list[Alias]:
    """The enabled aliases a key that allows ``allowed`` (None: all) may use, in the
    catalogue's order: what ``GET /v1/models`` lists and ``GET /v1/pricing`` prices."""
    return [a for a in aliases.values() if a.enabled and key_may_use(a.id, allowed, aliases)]


def usable_alias(aliases: dict[str, Alias], model: str, allowed: frozenset[str] | None) -> Alias:
    """The enabled alias ``model`` (else ``enabled_alias``'s 404) when a key that allows
    ``allowed`` may use it; else the 403 ``model_not_allowed``."""
    alias = enabled_alias(aliases, model)
    if not key_may_use(alias.id, allowed, aliases):
        raise model_not_allowed(alias.id, routed=alias.id == AUTO)
    return alias


def request_limits(settings: Settings) -> dict[str, int]:
    """The configured limits every request is read with (a dialect's ``limits``)."""
    return {
        "max_messages": settings.max_messages,
        "max_message_chars": settings.max_message_chars,
        "image_token_bound": settings.image_token_bound,
    }


def stream_limits(settings: Settings) -> dict[str, Any]:
    """``request_limits``, and ``streamed_only``: whether a request must ask for a stream
    (``SVC_NON_STREAMING=refuse``; ``check_streamed`` refuses the others)."""
    refuse = settings.non_streaming == REFUSE_NON_STREAMING
    return {**request_limits(settings), "streamed_only": refuse}


def check_streamed(stream: object, streamed_only: bool) -> None:
    """The 400 ``stream_required`` for a request whose ``stream`` is not ``true`` when the
    operator refuses those (``SVC_NON_STREAMING=refuse``), on every API."""
    if streamed_only and stream is not True:
        raise stream_required()


def resolve_params(
    req: ChatRequest,
    aliases: dict[str, Alias],
    alias: Alias,
    *,
    body_size: int,
    output_limit: int | None,
    image_token_bound: int,
    api: str,
    output: OpenOutput,
    identify: Identify | None = None,
) -> CompletionRequest:
    """A well-formed chat request (``alias`` its enabled model; a Responses request after
    translation), its prompt estimated and bounded (``body_size``: the bytes of the body it
    came in), svc-auto resolved, its ``output_limit`` lowered to the alias's, the sampling
    defaults filled in, the fields the alias does not allow left out, and the account's
    ``safety_identifier`` (``identify``'s, of the client's own) in place of the client's."""
    prompt = _count_prompt(req.messages, image_token_bound)
    models = alias.id
    most_output = alias.max_output_tokens
    if alias.id == AUTO:
        models = auto_models(aliases)
        alias = _auto_target(aliases, route_auto("\n".join(prompt.texts), len(prompt.texts)))
        most_output = min(most_output, alias.max_output_tokens)
    # An output limit above the alias's is lowered to it, as a balance or a ceiling lowers
    # a default one: coding agents ask models they do not know for 32,000 tokens, and a
    # refusal stops them on their first request. The reservation then holds the lower one.
    headers: tuple[tuple[str, str], ...] = ()
    if output_limit is not None and output_limit > most_output:
        output_limit = most_output
        headers = ((CLAMPED_HEADER, str(most_output)),)
    temperature = DEFAULT_TEMPERATURE if req.temperature in (UNSET, None) else req.temperature
    top_p = DEFAULT_TOP_P if req.top_p in (UNSET, None) else req.top_p
    # what costs the operator more or has the provider keep data, unless the alias that
    # serves the request (svc-auto's choice) allows it
    withheld = alias.withheld_fields()
    safety_identifier = req.safety_identifier
    if identify is not None:
        # ``user`` is forwarded as it came; the client's safety_identifier never is
        safety_identifier = identify(client_identifier(req.user, req.safety_identifier))
    return CompletionRequest(
        requested=req.model,
        alias=alias,
        request=msgspec.structs.replace(
            req,
            temperature=temperature,
            top_p=top_p,
            safety_identifier=safety_identifier,
            **withheld,
        ),
        max_tokens=output_limit,
        headers=headers,
        prompt_texts=prompt.texts,
        media_estimate=prompt.media_estimate,
        prompt_token_bound=prompt_token_bound(
            body_size - prompt.media_chars, len(req.messages), prompt.media_bound
        ),
        api=api,
        output=output,
        models=models,
    )
