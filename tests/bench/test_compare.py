"""``bench/retrieval.py --rows`` / ``--compare``: two runs compared question by question, per half, with a paired
bootstrap interval (``bench.lib.locomo.paired_comparison``), the way a change is judged on the held-out half."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.locomo import paired_comparison, row_key  # noqa: E402
from bench.retrieval import main  # noqa: E402


def _rows(recalls: list[tuple[int, int, float]], half: str = "held_out") -> list[dict]:
    """LoCoMo rows of questions (index, category, engram R@10) in conversation conv-50."""
    return [
        {
            "sample_id": "conv-50",
            "conversation": 5,
            "question": i,
            "half": half,
            "category": c,
            "recall": {"engram": {"10": r}, "RRF": {"10": 0.0}},
        }
        for i, c, r in recalls
    ]


def test_a_row_is_known_by_its_sample_and_question_or_by_its_question_id():
    assert row_key({"sample_id": "conv-26", "question": 3}) == ("conv-26", 3)
    assert row_key({"question_id": "gpt4_8279ba03", "sample_id": "x"}) == ("gpt4_8279ba03",)


def test_a_change_that_raises_every_question_has_an_interval_above_zero():
    before = _rows([(i, 1, 0.5) for i in range(20)])
    after = _rows([(i, 1, 0.75) for i in range(20)])
    got = paired_comparison(before, after, k=10)["held_out"]
    assert got["all"]["n"] == 20 and got["1"]["n"] == 20
    assert got["all"]["diff"] == 0.25 and got["all"]["ci95"] == [0.25, 0.25]
    assert (got["all"]["better"], got["all"]["worse"]) == (20, 0)
    assert got["all"]["before"] == 0.5 and got["all"]["after"] == 0.75
    assert got.keys() == {"all", "1"}


def test_a_change_that_moves_questions_both_ways_has_an_interval_holding_zero():
    before = _rows([(i, 3, float(i % 2)) for i in range(40)])
    after = _rows([(i, 3, float((i + 1) % 2)) for i in range(40)])
    got = paired_comparison(before, after, k=10)["held_out"]["3"]
    assert got["diff"] == 0.0 and got["ci95"][0] < 0 < got["ci95"][1]
    assert (got["better"], got["worse"]) == (20, 20)


def test_halves_are_kept_apart_and_questions_of_one_run_only_left_out():
    before = _rows([(0, 1, 0.0), (1, 4, 1.0)], "chosen_on") + _rows([(2, 1, 0.0)])
    after = _rows([(0, 1, 1.0), (1, 4, 1.0)], "chosen_on") + _rows([(2, 1, 0.0), (9, 1, 1.0)])
    got = paired_comparison(before, after, k=10)
    assert got["chosen_on"]["all"]["n"] == 2 and got["chosen_on"]["all"]["diff"] == 0.5
    assert got["held_out"]["all"]["n"] == 1 and got["held_out"]["all"]["diff"] == 0.0


def test_compare_prints_and_writes_the_figures(tmp_path, capsys):
    a, b, out = tmp_path / "before.json", tmp_path / "after.json", tmp_path / "cmp.json"
    a.write_text(json.dumps(_rows([(i, 1, 0.0) for i in range(10)])))
    b.write_text(json.dumps(_rows([(i, 1, 1.0) for i in range(10)])))
    assert main(["--compare", str(a), str(b), "--ks", "10", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "engram R@10" in printed and "multi-hop" in printed and "+1.000" in printed
    assert json.loads(out.read_text())["10"]["held_out"]["all"]["diff"] == 1.0


def test_a_run_of_the_held_out_half_writes_its_rows_and_compares_with_itself(tmp_path, capsys):
    """The real path (ingest, consolidation, search) on a six-conversation LoCoMo-format file: ``--half held_out``
    runs conversation 5 alone, ``--rows`` keeps its questions, and a run compared with itself moved nothing."""
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat called Tom last week."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely, how old is he?"},
        {"speaker": "Ann", "dia_id": "D1:3", "text": "Two years old, and he loves the garden."},
    ]
    conversations = [
        {
            "sample_id": f"conv-{n}",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": turns,
            },
            "qa": [{"question": "What is Ann's cat called?", "evidence": ["D1:1"], "category": 4}],
        }
        for n in range(6)
    ]
    (tmp_path / "conversations").mkdir()
    (tmp_path / "conversations" / "locomo10.json").write_text(json.dumps(conversations))
    rows, out = tmp_path / "rows.json", tmp_path / "out.json"
    assert (
        main(
            [
                "--eval-data",
                str(tmp_path),
                "--half",
                "held_out",
                "--ks",
                "1",
                "2",
                "--rows",
                str(rows),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    written = json.loads(rows.read_text())
    assert [(r["sample_id"], r["question"], r["half"], r["category"]) for r in written] == [
        ("conv-5", 0, "held_out", 4)
    ]
    assert written[0]["recall"]["engram"]["2"] == 1.0
    figures = json.loads(out.read_text())
    assert figures["conversations"] == ["conv-5"] and "rows" not in figures
    assert main(["--compare", str(rows), str(rows), "--ks", "2"]) == 0
    assert "+0.000" in capsys.readouterr().out
