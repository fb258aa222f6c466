"""scripts/bench_compare.py: two benchmark files side by side, row by row, and its refusal of other files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_compare", ROOT / "scripts" / "bench_compare.py")
bench_compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_compare)

META = {"date_utc": "2026-01-01 00:00:00", "transformers": "5.0.0", "wall_s": 10.0, "cpu": "a CPU"}


def _row(variant: str, measured: float, verdict: str, interval=(0.9, 1.1)) -> dict:
    return {"what": "decode", "where": "llama", "variant": variant, "measured": measured, "interval": interval,
            "limit": 1.03, "verdict": verdict}


def test_rows_are_matched_by_target_and_a_row_of_one_run_only_is_marked(tmp_path, capsys):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"meta": META, "targets": [_row("trajectory/rope", 1.08, "missed"),
                                                             _row("trajectory/alibi", 1.0, "met", None)]}))
    after.write_text(json.dumps({"meta": META, "targets": [_row("trajectory/rope", 1.01, "met", (1.0, 1.02)),
                                                            _row("self_extend", 1.5, "missed")]}))
    assert bench_compare.main([str(before), str(after), "--out", str(tmp_path / "c.md")]) == 0
    text = capsys.readouterr().out
    assert ("| decode | llama | trajectory/rope | 1.03 | 1.080 [0.900, 1.100] missed | 1.010 [1.000, 1.020] met |"
            in text)
    assert "| trajectory/alibi | 1.03 | 1.000 met | not measured |" in text
    assert "| self_extend | 1.03 | not measured | 1.500 [0.900, 1.100] missed |" in text
    assert (tmp_path / "c.md").read_text() == text
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(SystemExit, match="has no targets"):
        bench_compare.main([str(tmp_path / "other.json"), str(after)])
