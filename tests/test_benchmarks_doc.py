"""BENCHMARKS.md and README.md's table of headline figures are what `python -m bench.report` makes of
bench/results, and every result file has a question."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from bench import report


def test_benchmarks_md_is_generated_from_the_results():
    assert report.OUTPUT.read_text() == report.render(), "BENCHMARKS.md is stale: run python -m bench.report"


def test_readme_benchmarks_table_is_generated_from_the_results():
    readme = report.README.read_text()
    assert readme.count(report.README_BEGIN) == readme.count(report.README_END) == 1
    assert readme == report.with_readme_table(readme), "README.md's table is stale: run python -m bench.report"


def test_every_result_file_records_its_provenance():
    for question in report.QUESTIONS:
        for name in question.files:
            provenance = json.loads((report.RESULTS / name).read_text())["provenance"]
            assert set(provenance) >= {"commit", "date", "machine", "command"}, name


def test_a_result_file_no_question_names_fails_the_report(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(report.RESULTS, results, ignore=shutil.ignore_patterns("tmp"))
    (results / "superseded-run.json").write_text("{}")
    with pytest.raises(SystemExit, match="superseded-run.json"):
        report.render(results)


def test_a_changed_figure_changes_the_report(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(report.RESULTS, results, ignore=shutil.ignore_patterns("tmp"))
    load = json.loads((results / "load.json").read_text())
    load["throughput_ratio"] = 2.5
    (results / "load.json").write_text(json.dumps(load))
    assert "| 2.50× | goal ≥ 3×: not met |" in report.render(results)


def test_each_summary_cell_holds_one_figure_and_its_ratio():
    """"today" is one figure (a count "N of M" counts as one); "ratio" one ratio and its anchor, no other figure."""
    summary = report.render().split("## Summary")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in summary.splitlines() if line.startswith("| [")]
    assert rows
    measured = re.compile(r"\d[\d,.]*\s?(MiB|GiB|sentences/s|requests/s|%|ms|µs|s\b)")
    for _, _, today, ratio, _, _ in rows:
        assert len(re.findall(r"\d[\d,.]*", re.sub(r"\d[\d,]* of \d[\d,]*", "N", today))) <= 1, today
        assert ratio.count("×") <= 1 and not measured.search(ratio.split("goal")[0]), ratio
