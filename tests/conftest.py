"""Fixtures shared by several test files."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from bench.common.postgres import running_postgres

# Written for these tests: short English-German pairs with umlauts, ß, punctuation and a question.
PAIRS = (
    ("The cat sleeps on the sofa.", "Die Katze schläft auf dem Sofa."),
    ("A dog runs through the park.", "Ein Hund läuft durch den Park."),
    ("I like green apples.", "Ich mag grüne Äpfel."),
    ("We are reading a book.", "Wir lesen ein Buch."),
    ("The children play outside.", "Die Kinder spielen draußen."),
    ("She drinks hot cocoa.", "Sie trinkt heißen Kakao."),
    ("My brother is very tall.", "Mein Bruder ist sehr groß."),
    ("Where is the station?", "Wo ist der Bahnhof?"),
)


# English and German sentences for the tokenizers and random models of the converter tests (tests/test_ct2.py,
# tests/test_argos.py).
MIXED_SENTENCES = [
    "A man in an orange hat is looking at something.",
    "Two dogs are running on the green grass.",
    "A girl in a karate uniform breaks a board with a kick.",
    "Five people wearing winter jackets stand in the snow.",
    "People are fixing the roof of a house.",
    "A woman with a large purse is walking by a gate.",
    "Ein Mann mit einem orangefarbenen Hut starrt auf etwas.",
    "Zwei Hunde rennen auf dem grünen Gras.",
    "Ein Mädchen in einem Karateanzug bricht ein Brett.",
    "Fünf Leute in Winterjacken stehen im Schnee.",
]


@pytest.fixture(scope="session")
def sentence_pairs() -> tuple[tuple[str, str], ...]:
    """A handful of (English, German) sentence pairs."""
    return PAIRS


# --- a tiny ONNX model folder for tests that need a model, not a good one (tests/test_service.py) ------


# The tiny model's SentencePiece training text (its own, so that edits elsewhere do not change the model).
TINY_MODEL_TEXTS = (
    "A man is riding a bicycle.",
    "Two dogs are running on the green grass.",
    "A girl in a red dress is dancing.",
    "People are fixing the roof of a house.",
    "An old man reads a newspaper on a bench.",
    "Where is the station? It is over there!",
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde rennen auf dem grünen Gras.",
    "Ein Mädchen in einem roten Kleid tanzt.",
    "Leute reparieren das Dach eines Hauses.",
    "Ein alter Mann liest eine Zeitung auf einer Bank.",
    "Wo ist der Bahnhof? Er ist dort drüben!",
)


def export_tiny_model(out: Path, spm: Path, source: str, target: str, seed: int, rounded: bool = False) -> Path:
    """A random-weight model folder translating source -> target (its SentencePiece model serves both sides).

    Its weights are drawn at a scale (pre-LN, std 0.3) that makes the output depend on the source, so a test can
    tell one sentence's translation from another's. `rounded`: the weights rounded to fp16, as model.package rounds
    the shipped ones, so that the export stores them as fp16 with a Cast.
    """
    import torch

    from export.__main__ import export_model
    from model.config import preset
    from model.transformer import Transformer

    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=90, pre_norm=True, src_lang=source, tgt_lang=target)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            drawn = torch.randn_like(p) * 0.3
            p.copy_(drawn.half().float() if rounded else drawn)
    out.mkdir(parents=True)
    torch.save({"config": cfg.to_dict(), "model": model.state_dict()}, out / "model.pt")
    export_model(out / "model.pt", out, spm, ["fp32"])
    return out


@pytest.fixture(scope="session")
def tiny_spm(tmp_path_factory) -> Path:
    from model.tokenizer import train_sentencepiece

    return train_sentencepiece(TINY_MODEL_TEXTS * 10, tmp_path_factory.mktemp("tiny-spm") / "spm", vocab_size=90)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_spm: Path) -> Path:
    """An exported en-de model folder with random weights: tiny and fast, it translates into garbage that depends
    on the source. Exporting takes some 10 seconds."""
    return export_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model", tiny_spm, "en", "de", seed=0)


@pytest.fixture(scope="session")
def tiny_rounded_dir(tmp_path_factory, tiny_spm: Path) -> Path:
    """The tiny en-de model folder with its weights rounded to fp16, exported as the shipped folders are."""
    return export_tiny_model(tmp_path_factory.mktemp("tiny-rounded") / "model", tiny_spm, "en", "de", 0, rounded=True)


@pytest.fixture(scope="session")
def tiny_fp16_dir(tiny_model_dir: Path, tmp_path_factory) -> Path:
    """The tiny model folder with its fp16 graphs too (exported as `python -m export --variants fp32 fp16` does)."""
    from bench.common.gpu import with_fp16

    return with_fp16(tiny_model_dir, tmp_path_factory.mktemp("tiny-fp16"))


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory, tiny_spm: Path) -> Path:
    """A folder of two tiny model folders, en-de and de-en, as the service loads several pairs."""
    models = tmp_path_factory.mktemp("tiny-models")
    for source, target, seed in (("en", "de", 0), ("de", "en", 1)):
        export_tiny_model(models / f"{source}-{target}", tiny_spm, source, target, seed)
    return models


@pytest.fixture(scope="session")
def postgres():
    """Debian's PostgreSQL on loopback for this test session (bench/common/postgres.py)."""
    with running_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:
    """An empty store of each kind: SQLite in a fresh folder, a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'translator.db'}"
    return request.getfixturevalue("postgres").database(f"test_{uuid4().hex}")
