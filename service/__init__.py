"""The translation service."""

from importlib import metadata

try:
    __version__ = metadata.version("mt-service")  # pyproject.toml's, as installed (`pip install -e .` or `.`)
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "unknown"
