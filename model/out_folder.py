"""The model folder that model.convert and model.pull write: made beside it and renamed into place once complete,
and never in place of another model unless told (--force)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(out: Path, force: bool) -> Iterator[Path]:
    """A fresh folder beside `out` (.NAME.partial) to write the model in; it takes the place of `out` when the block
    ends without an error and is removed when it raises, so that no half-written folder is left to pass for a model.
    A folder `out` that holds files already (another model) is refused (ValueError) unless `force`."""
    if out.is_dir() and any(out.iterdir()) and not force:
        names = sorted(p.name for p in out.iterdir())
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise ValueError(f"{out} holds another model ({shown}): give another --out, or --force to replace it")
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def export(out: Path, variants: list[str]) -> None:
    """The graphs of out/model.pt, as `python -m export out/model.pt --out out --variants ...` writes them."""
    from export.__main__ import export_model

    export_model(out / "model.pt", out, None, variants)
