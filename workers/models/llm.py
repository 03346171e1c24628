"""A text LLM behind a remote API, answering in JSON (off by default): used by ``ask`` and LLM extraction.

Two providers, each SDK imported only when chosen: ``openai`` speaks the OpenAI chat completions API (OpenAI,
or a local vLLM / Ollama / llama.cpp server through ``base_url``) with ``response_format`` JSON mode;
``gemini`` uses ``google-genai`` with ``response_mime_type="application/json"``. The SDK clients, their
timeouts and their retries with exponential backoff are the same as the captioners' (``workers.models.vlm``).

``complete_json`` returns the reply's text; validating it against a schema is the caller's job (a pydantic
model). When the endpoint cannot be reached, times out, or answers with an error after the retries, it
raises ``LlmUnavailable`` with a one-line reason naming the model and the endpoint.
"""

from __future__ import annotations

from engram.schemas.errors import ModelError
from engram.workers.models.base import Model, ModelTask, ModelType
from engram.workers.models.vlm import GeminiCaptioner, OpenAiCaptioner


class LlmUnavailable(ModelError, ConnectionError):
    """The LLM endpoint gave no reply (unreachable, timed out, an error status after retries, or empty)."""


class ChatLlm(Model[str]):
    """Base of the text LLMs, identity ``("llm", "chat")``; ``predict(system, messages)`` is ``complete_json``.
    Options: ``base_url``, ``api_key``, ``timeout`` (seconds per request), ``max_retries``, ``max_tokens``.
    Owned by the worker process; the SDK clients are thread safe."""

    model_type = ModelType.LLM
    model_task = ModelTask.CHAT
    task = "llm"

    def complete_json(self, system: str, messages: list[tuple[str, str]]) -> str:
        """The reply to a conversation of (role, text) turns, role ``user`` or ``assistant``, after the
        ``system`` instruction; the model is asked for one JSON object (``predict``, timed as one conversation).
        Raises LlmUnavailable (also when the provider's SDK is not installed: ``load``)."""
        return self.predict(system, messages)

    def load(self):
        """The SDK client, made on first use; a client that cannot be made (SDK not installed, bad options) is
        an LlmUnavailable, as an endpoint that does not answer: callers fall back the same way."""
        try:
            return super().load()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            raise LlmUnavailable(f"LLM {self.name!r} at {self.where} failed: {reason}") from exc

    def _predict(self, system: str, messages: list[tuple[str, str]]) -> str:
        try:
            text = self._complete(system, messages)
        except LlmUnavailable:
            raise
        except Exception as exc:  # the SDK's errors after its own retries; reported with the endpoint
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            raise LlmUnavailable(f"LLM {self.name!r} at {self.where} failed: {reason}") from exc
        if not text or not text.strip():
            raise LlmUnavailable(f"LLM {self.name!r} at {self.where} answered with no text")
        return text

    @property
    def where(self) -> str:
        """The endpoint, for messages."""
        return self.options.get("base_url") or "the provider's default endpoint"

    def _complete(self, system: str, messages: list[tuple[str, str]]) -> str | None:
        raise NotImplementedError


class OpenAiChat(ChatLlm):
    """OpenAI chat completions in JSON mode (OpenAI, vLLM, Ollama's /v1)."""

    _load = OpenAiCaptioner._load  # the same SDK client (timeout, retries, base URL, key)

    def _complete(self, system: str, messages: list[tuple[str, str]]) -> str | None:
        resp = self.session.chat.completions.create(
            model=self.name,
            max_tokens=self.options.get("max_tokens", 800),
            temperature=0,
            response_format={"type": "json_object"},
            messages=[{"role": "system", "content": system}, *({"role": r, "content": t} for r, t in messages)],
        )
        return resp.choices[0].message.content if resp.choices else None


class GeminiChat(ChatLlm):
    """Gemini ``generate_content`` with a JSON response type (``google-genai``)."""

    _load = GeminiCaptioner._load  # the same SDK client (timeout, retries, base URL, key)

    def _complete(self, system: str, messages: list[tuple[str, str]]) -> str | None:
        from google.genai import types

        contents = [
            types.Content(role="model" if r == "assistant" else "user", parts=[types.Part(text=t)]) for r, t in messages
        ]
        resp = self.session.models.generate_content(
            model=self.name,
            contents=contents,
            config=types.GenerateContentConfig(
                system_instruction=system,
                temperature=0,
                response_mime_type="application/json",
                max_output_tokens=self.options.get("max_tokens", 800),
            ),
        )
        return resp.text
