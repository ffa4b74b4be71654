"""The requests of LibreTranslate's API, as its clients send them (query string, JSON or form data), and its errors."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    q: StrictStr | list[StrictStr] = Field(description="text, or a list of texts, to translate")
    source: StrictStr = Field("auto", description="source language code, or 'auto'")
    target: StrictStr = Field(description="target language code")
    format: Literal["text", "html"] = Field("text", description="'html': translate the text, keep the markup")
    alternatives: int = Field(0, ge=0, description="how many alternative translations to return")
    api_key: StrictStr | None = Field(None, description="required when the server has API keys")
    beam_size: int | None = Field(None, ge=1, description="extension: beam size (1 is greedy)")
    max_length: int | None = Field(None, ge=1, description="extension: most tokens of one translated sentence")


class DetectRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    q: StrictStr = Field(description="text whose language to detect")
    api_key: StrictStr | None = Field(None, description="required when the server has API keys")


class FileRequest(BaseModel):
    """POST /translate_file's fields besides the file itself."""

    model_config = ConfigDict(extra="ignore")

    source: StrictStr = Field("auto", description="source language code, or 'auto'")
    target: StrictStr = Field(description="target language code")
    api_key: StrictStr | None = Field(None, description="required when the server has API keys")


class ApiError(Exception):
    """An error answered as LibreTranslate does: {"error": message} with an HTTP status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
