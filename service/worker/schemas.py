"""The requests and responses of LibreTranslate's API, as its clients send and read them."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictStr
from pydantic_core import PydanticCustomError

# --- reading parameters as LibreTranslate does (its app.py) -------------------------------------------------------


def present(value: Any) -> Any:
    """An empty q or target is a missing one ("Invalid request: missing q parameter")."""
    if value is None or value == "" or value == []:
        raise PydanticCustomError("missing", "Field required")
    return value


def lower_case(value: Any) -> Any:
    """Language codes are read in lower case ("EN" is "en")."""
    return value.lower() if isinstance(value, str) else value


def or_default(default: str):
    """An empty or null value is the default: format "" is "text"; source "" is "auto" (our default, see README)."""
    return lambda value: default if value is None or value == "" else value


def or_zero(value: Any) -> Any:
    return 0 if value is None or value == "" else value


Texts = Annotated[StrictStr | list[StrictStr], BeforeValidator(present)]
Target = Annotated[StrictStr, BeforeValidator(present), BeforeValidator(lower_case)]
Source = Annotated[StrictStr, BeforeValidator(or_default("auto")), BeforeValidator(lower_case)]
Format = Annotated[Literal["text", "html"], BeforeValidator(or_default("text"))]
Count = Annotated[int, BeforeValidator(or_zero), AfterValidator(lambda n: max(0, n))]  # -1 is 0, as LibreTranslate


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    q: Texts = Field(description="text, or a list of texts, to translate")
    source: Source = Field("auto", description="source language code, or 'auto'")
    target: Target = Field(description="target language code")
    format: Format = Field("text", description="'html': translate the text, keep the markup")
    alternatives: Count = Field(0, description="how many alternative translations to return")
    api_key: StrictStr | None = Field(None, description="required when the server has API keys")
    beam_size: int | None = Field(None, ge=1, description="extension: beam size (1 is greedy)")
    max_length: int | None = Field(None, ge=1, description="extension: most tokens of one translated sentence")
    glossary_id: StrictStr | None = Field(None, description="extension: a glossary of the DeepL API (/v2/glossaries) "
                                          "whose terms the translation uses; needs a source language")


class DetectRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    q: Texts = Field(description="text, or a list of texts, whose language to detect")
    api_key: StrictStr | None = Field(None, description="required when the server has API keys")


class FileRequest(BaseModel):
    """POST /translate_file's fields besides the file itself."""

    model_config = ConfigDict(extra="ignore")

    source: Source = Field("auto", description="source language code, or 'auto'")
    target: Target = Field(description="target language code")
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


class UsageDay(BaseModel):
    day: date = Field(description="UTC")
    requests: int
    characters: int


class KeyUsage(BaseModel):
    name: str
    created: datetime
    last_used: datetime | None
    req_limit: int | None = Field(description="requests a minute; null: no limit")
    daily_req_limit: int | None = Field(description="requests a day (UTC); null: no limit")
    monthly_char_limit: int | None = Field(description="characters a month (UTC); null: no limit")
    days: list[UsageDay] = Field(description="the days with any use, oldest first")


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


class PullProgress(BaseModel):
    """A TRANSLATOR_MODELS entry being made while the service starts (model.cache.ModelCache.report)."""

    entry: str
    stage: str  # download, convert, export
    done: int  # bytes downloaded of total (0: unknown); convert and export report none
    total: int


class HealthBody(BaseModel):
    status: str
    version: str  # the service's release (pyproject.toml's version)
    pulling: PullProgress | None = None  # while the models load (/ready 503): a named model being fetched or made


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
