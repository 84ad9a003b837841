"""A server's sampling request (``sampling/createMessage``) answered by an OpenAI-compatible chat endpoint or by the
env's own function: the request as OpenAI chat messages, and the model's reply as the MCP result.
"""

from __future__ import annotations

from typing import Any

from aworld_gym.mcp.capabilities import SamplingEndpoint

_STOP_REASONS = {"stop": "endTurn", "length": "maxTokens", "tool_calls": "toolUse"}


class Unsupported(Exception):
    """A sampling request this client cannot send on (audio, tool use); the message says what."""


def openai_messages(params: Any) -> list[dict[str, Any]]:
    """The request's system prompt and messages in OpenAI chat format (images as data-URI image parts).

    Raises:
        Unsupported: the request carries audio or tool use (not declared by this client).
    """
    if getattr(params, "tools", None) or getattr(params, "tool_choice", None):
        raise Unsupported("sampling with tools is not supported by this client")
    out: list[dict[str, Any]] = []
    if params.system_prompt:
        out.append({"role": "system", "content": params.system_prompt})
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        parts: list[dict[str, Any]] = []
        for block in blocks:
            kind = getattr(block, "type", None)
            if kind == "text":
                parts.append({"type": "text", "text": block.text})
            elif kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"}})
            else:
                raise Unsupported(
                    f"sampling messages with {kind or 'unknown'} content are not supported by this client"
                )
        text_only = all(p["type"] == "text" for p in parts)
        content: Any = "\n".join(p["text"] for p in parts) if text_only else parts
        out.append({"role": message.role, "content": content})
    return out


def options(params: Any, cap: int | None = None) -> dict[str, Any]:
    """The request's generation options (``max_tokens`` at most ``cap``), as OpenAI names them."""
    out: dict[str, Any] = {"max_tokens": min(params.max_tokens, cap) if cap else params.max_tokens}
    if params.temperature is not None:
        out["temperature"] = params.temperature
    if params.stop_sequences:
        out["stop"] = list(params.stop_sequences)
    return out


async def complete(
    endpoint: SamplingEndpoint, messages: list[dict[str, Any]], opts: dict[str, Any]
) -> tuple[str, str, str]:
    """Ask ``endpoint``; returns (text, model, OpenAI finish reason). Raises on an HTTP error or a malformed reply."""
    import httpx2

    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    body = {"model": endpoint.model, "messages": messages, **opts}
    async with httpx2.AsyncClient(timeout=endpoint.timeout_s) as client:
        response = await client.post(f"{endpoint.base_url}/chat/completions", json=body, headers=headers)
    if response.status_code >= 400:
        raise RuntimeError(f"the sampling endpoint answered HTTP {response.status_code}: {response.text[:200]}")
    data = response.json()
    choice = data["choices"][0]
    text = choice["message"].get("content")
    if not isinstance(text, str):
        raise RuntimeError("the sampling endpoint's reply has no text content")
    return text, str(data.get("model") or endpoint.model), str(choice.get("finish_reason") or "stop")


def result(text: str, model: str, finish: str = "stop") -> Any:
    """The MCP ``CreateMessageResult`` of a completion."""
    from mcp_types import CreateMessageResult, TextContent

    return CreateMessageResult(
        role="assistant",
        content=TextContent(type="text", text=text),
        model=model,
        stop_reason=_STOP_REASONS.get(finish, finish),
    )
