"""The requests and responses of LibreTranslate's API, as its clients send and read them."""

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


# --- the responses, with LibreTranslate's field names ----------------------------------------------------------


class ErrorBody(BaseModel):
    error: str = Field(description="what is wrong")


class DetectedLanguage(BaseModel):
    confidence: float = Field(description="in percent")
    language: str


class TranslateResponse(BaseModel):
    translatedText: str | list[str] = Field(description="shaped like q")
    alternatives: list[str] | list[list[str]] | None = Field(None, description="when asked, shaped like q")
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = Field(
        None, description="when source is 'auto', shaped like q"
    )


class FileTranslated(BaseModel):
    translatedFileUrl: str = Field(description="where GET /download_file serves the translation")


class Language(BaseModel):
    code: str
    name: str
    targets: list[str] = Field(description="the languages it translates into")


class ServedModel(BaseModel):
    model: str = Field(description="the pair, e.g. en-de")
    provider: str = Field(description="ONNX Runtime's execution provider that runs it")
    precision: str


class ReadyBody(BaseModel):
    status: str
    models: list[ServedModel]


class HealthBody(BaseModel):
    status: str


class LanguageRef(BaseModel):
    code: str
    name: str


class FrontendLanguages(BaseModel):
    source: LanguageRef
    target: LanguageRef


class FrontendSettings(BaseModel):
    """What LibreTranslate's front end asks a server for."""

    charLimit: int
    frontendTimeout: int
    apiKeys: bool
    keyRequired: bool
    suggestions: bool
    filesTranslation: bool
    supportedFilesFormat: list[str]
    language: FrontendLanguages
