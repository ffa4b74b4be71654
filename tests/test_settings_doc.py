"""README.md's settings table is the one that service/settings.py generates; its flags are `python -m service`'s."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.settings import FLAGS, SHOWN_DEFAULTS, TABLE_BEGIN, TABLE_END, Settings, flag, with_table

ROOT = Path(__file__).resolve().parent.parent
FIX = "run `python -m service.settings --write README.md`"


def test_readme_table_is_generated_from_settings():
    readme = (ROOT / "README.md").read_text()
    markers = readme.count(TABLE_BEGIN), readme.count(TABLE_END)
    assert markers == (1, 1), f"README.md needs one {TABLE_BEGIN} and one {TABLE_END}"
    assert readme == with_table(readme), f"README.md's settings table differs from service/settings.py: {FIX}"


def test_every_setting_is_described():
    undescribed = [name for name, field in Settings.model_fields.items() if not field.description]
    assert not undescribed, f"settings without a description: {undescribed}"
    assert set(SHOWN_DEFAULTS) <= set(Settings.model_fields)
    assert set(FLAGS) <= set(Settings.model_fields)


def test_python_m_service_takes_each_flag(capsys):
    from service.__main__ import main

    with pytest.raises(SystemExit):
        main(["--help"])
    shown = set(re.findall(r"(--[a-z][\w-]+)", capsys.readouterr().out))
    assert shown == {"--help", "--version", *(flag(name) for name in FLAGS)}
