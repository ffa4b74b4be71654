"""The page at / to try the service, and the API docs at /docs, with every asset served by us.

The page is service/worker/static/: one HTML file, one script and one style sheet, no build step. /docs is FastAPI's
Swagger UI with its script and style sheet taken from the fastapi-offline package (swagger-ui-dist's files),
so that neither needs a CDN.
"""

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parents[1] / "static"
DOCS_ASSETS = "/docs/assets"  # fastapi-offline's static folder: swagger-ui-bundle.js, swagger-ui.css, favicon.png


router = APIRouter(include_in_schema=False)
router.mount("/static", StaticFiles(directory=STATIC), name="static")
router.mount(DOCS_ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-assets")


@router.get("/")
async def page() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@router.get("/spec")
async def spec(request: Request) -> JSONResponse:
    """The OpenAPI document, where LibreTranslate serves its own (the same as /openapi.json)."""
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")  # as FastAPI's own /docs does behind a proxy
    return get_swagger_ui_html(
        openapi_url=root + request.app.openapi_url,
        title=f"{request.app.title} - API docs",
        swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
    )
