"""Write deploy/nginx/nginx.conf from nginx.conf.template and the service's settings, so that nginx in front of the
replicas refuses nothing that one replica takes and waits as long as one may work:

    python deploy/nginx/render.py            # the settings of this environment (TRANSLATOR_* variables)

tests/test_deploy.py checks that the nginx.conf in the repository is the one the defaults give.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from string import Template

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.settings import Settings  # noqa: E402
from service.worker.pipeline import DOCUMENT_REQUESTS  # noqa: E402

HERE = Path(__file__).resolve().parent


def limits(settings: Settings) -> dict[str, int]:
    """The nginx values that follow from the settings."""
    document_requests = math.ceil(settings.max_file_chars / settings.max_chars / DOCUMENT_REQUESTS)
    return {
        "max_body_bytes": max(settings.max_body_bytes, settings.max_file_bytes),
        "body_timeout_s": math.ceil(settings.body_timeout_s),
        "header_timeout_s": math.ceil(settings.header_timeout_s),
        "max_header_bytes": settings.max_header_bytes,
        "keep_alive_ms": math.ceil(settings.keep_alive_s * 1000),
        "upstream_keep_alive_ms": max(1, math.floor(settings.keep_alive_s * 1000 / 2)),
        "read_timeout_s": math.ceil(settings.engine_timeout_s * max(document_requests, 1)),
    }


def render(settings: Settings) -> str:
    """nginx.conf for these settings (nginx's own $variables are left as they are)."""
    return Template((HERE / "nginx.conf.template").read_text()).safe_substitute(limits(settings))


if __name__ == "__main__":
    (HERE / "nginx.conf").write_text(render(Settings()))
