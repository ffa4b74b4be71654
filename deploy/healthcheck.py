"""Container health check: exit 0 when the translator answers 200 on /ready, 1 otherwise.

    python healthcheck.py [URL]

URL defaults to http://127.0.0.1:$TRANSLATOR_PORT/ready (port 8000 when unset). Standard library only, so the
image needs no curl; /ready answers 503 until the model is loaded and warm, which urllib raises as an error.
"""

from __future__ import annotations

import os
import sys
import urllib.request


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else f"http://127.0.0.1:{os.environ.get('TRANSLATOR_PORT', '8000')}/ready"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except Exception as error:  # refused, timed out, 503...: all mean "not ready"
        print(f"{url}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
