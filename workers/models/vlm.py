"""Captions of screenshots and keyframes by a vision-language model behind a remote API (off by default).

Two providers, each SDK imported only when chosen (as mem0 does): ``openai`` speaks the OpenAI chat
completions API (OpenAI itself, or a local vLLM / Ollama / llama.cpp server through ``base_url``), ``gemini``
uses ``google-genai``. Timeouts and retries with exponential backoff are the SDKs' own (``openai``:
``timeout``/``max_retries``; ``google-genai``: ``HttpOptions(timeout, retry_options)``).

When the endpoint cannot be reached, times out or answers with an error after the retries, ``caption``
raises ``CaptionUnavailable`` with a one-line reason; ``workers.media.vision.caption`` then either logs a warning
and leaves the observation without a caption (the default), or, with ``models.vlm_required``, lets the
error fail the perceive stage (it is a ConnectionError: the task retries with backoff, then the event is
marked failed with that reason).
"""

from __future__ import annotations

import base64
import importlib

from engram.schemas.errors import ModelError
from engram.workers.codecs import jpeg_bytes
from engram.workers.models.base import Model, ModelTask, ModelType


class CaptionUnavailable(ModelError, ConnectionError):
    """The VLM endpoint did not give a caption (unreachable, timed out, or an error status after retries)."""


class VlmCaptioner(Model[str]):
    """Base of the captioners, identity ``("vlm", "caption")``; ``predict(image, prompt)`` is ``caption``.
    Options: ``base_url``, ``api_key``, ``timeout`` (seconds per request), ``max_retries``, ``max_tokens``,
    ``max_side`` (images are downscaled so that their longer side is at most this many pixels and sent as JPEG)."""

    model_type = ModelType.VLM
    model_task = ModelTask.CAPTION
    task = "caption"

    def caption(self, image, prompt: str) -> str:
        """A caption of ``image`` (PIL RGB) asked for with ``prompt``, stripped (``predict``, timed as one image).
        Raises CaptionUnavailable (with the endpoint and reason), ModelUnavailable when the provider's SDK is
        not installed."""
        return self.predict(image, prompt)

    def _predict(self, image, prompt: str) -> str:
        img = image.copy()
        side = self.options.get("max_side", 1024)
        img.thumbnail((side, side))
        try:
            return self._ask(jpeg_bytes(img, quality=85), prompt).strip()
        except CaptionUnavailable:
            raise
        except self._sdk_errors() + _http_errors() as exc:  # after the SDK's own retries
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            where = self.options.get("base_url") or "the provider's default endpoint"
            raise CaptionUnavailable(f"captioning with {self.name!r} at {where} failed: {reason}") from exc

    def _ask(self, jpeg: bytes, prompt: str) -> str:
        raise NotImplementedError

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        """The SDK's own error classes (status errors, and transport errors it wraps)."""
        raise NotImplementedError


def _http_errors() -> tuple[type[BaseException], ...]:
    """Transport errors the SDKs may let through: OS-level ones and those of their HTTP client (httpx; some
    builds ship it as ``httpx2``)."""
    found: list[type[BaseException]] = [OSError]
    for name in ("httpx", "httpx2"):
        try:
            found.append(importlib.import_module(name).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


class OpenAiCaptioner(VlmCaptioner):
    """OpenAI chat completions with the image as a base64 data URL (OpenAI, vLLM, Ollama's /v1)."""

    def _load(self):
        from openai import OpenAI

        o = self.options
        return OpenAI(
            base_url=o.get("base_url"),
            api_key=o.get("api_key") or "not-needed",
            timeout=o.get("timeout", 60.0),
            max_retries=o.get("max_retries", 2),
        )

    def _ask(self, jpeg: bytes, prompt: str) -> str:
        url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
        resp = self.session.chat.completions.create(
            model=self.name,
            max_tokens=self.options.get("max_tokens", 200),
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}],
                }
            ],
        )
        if not resp.choices or not resp.choices[0].message.content:
            raise CaptionUnavailable(f"captioning with {self.name!r}: the endpoint answered with no text")
        return resp.choices[0].message.content

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        import openai

        return (openai.OpenAIError,)


class GeminiCaptioner(VlmCaptioner):
    """Gemini ``generate_content`` with the image as inline JPEG bytes (``google-genai``)."""

    def _load(self):
        from google import genai
        from google.genai import types

        o = self.options
        retries = types.HttpRetryOptions(attempts=1 + o.get("max_retries", 2), initial_delay=0.5, max_delay=8.0)
        http = types.HttpOptions(
            base_url=o.get("base_url"), timeout=int(o.get("timeout", 60.0) * 1000), retry_options=retries
        )
        return genai.Client(api_key=o.get("api_key") or "not-needed", http_options=http)

    def _ask(self, jpeg: bytes, prompt: str) -> str:
        from google.genai import types

        resp = self.session.models.generate_content(
            model=self.name,
            contents=[types.Part.from_bytes(data=jpeg, mime_type="image/jpeg"), prompt],
            config=types.GenerateContentConfig(max_output_tokens=self.options.get("max_tokens", 200)),
        )
        if not resp.text:
            raise CaptionUnavailable(f"captioning with {self.name!r}: the endpoint answered with no text")
        return resp.text

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        from google.genai import errors

        return (errors.APIError,)
