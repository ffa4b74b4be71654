"""What the server offers, as LibreTranslate's clients and front end ask for it: /languages, /frontend/settings,
and /suggest (suggestions are not collected)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.worker.dependencies import ServingPipeline, state
from service.worker.documents import FORMATS
from service.worker.errors import Forbidden
from service.worker.pairs import Pairs, language_name
from service.worker.schemas import ErrorBody, FrontendLanguages, FrontendSettings, Language, LanguageRef

FRONTEND_TIMEOUT_MS = 500  # how long LibreTranslate's front end waits after typing before it translates
AUTO_NAME = "Auto Detect"  # LibreTranslate's name of the source "auto"

router = APIRouter()


def language(code: str) -> LanguageRef:
    return LanguageRef(code=code, name=AUTO_NAME if code == "auto" else language_name(code))


@router.get("/languages", response_model=list[Language])
async def languages(p: ServingPipeline) -> list[Language]:
    """Every language served, with the languages it translates into (LibreTranslate's shape)."""
    return [Language(code=code, name=language(code).name, targets=p.pairs.targets_of(code))
            for code in p.pairs.languages]


@router.get("/frontend/settings", response_model=FrontendSettings)
async def frontend_settings(request: Request, p: ServingPipeline) -> FrontendSettings:
    """What LibreTranslate's front end asks a server for."""
    s = state(request).settings
    return FrontendSettings(
        charLimit=s.max_chars,
        frontendTimeout=FRONTEND_TIMEOUT_MS,
        apiKeys=s.keys_required,
        keyRequired=s.keys_required,
        suggestions=False,
        filesTranslation=True,
        supportedFilesFormat=list(FORMATS),
        language=FrontendLanguages(source=language("auto"), target=language(first_target(p.pairs))),
    )


def first_target(pairs: Pairs) -> str:
    """Where the page starts, from "auto": into what English translates, where a pair from English is served (the
    text typed in is most often English), else the first pair's target."""
    english = [target for source, target in pairs.pairs if source == "en"]
    return english[0] if english else next(iter(pairs.pairs))[1]


@router.post("/suggest", responses={403: {"model": ErrorBody}})
async def suggest() -> None:
    """Suggestions of better translations are not collected by this server (LibreTranslate's answer)."""
    raise Forbidden("Suggestions are disabled on this server.")
