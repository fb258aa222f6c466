import subprocess
import sys

import pytest

from hf_trajpe.cli import build_parser, main


def test_help_lists_commands():
    text = build_parser().format_help()
    assert "demo" in text


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2


def test_import_stays_light():
    code = "import sys, hf_trajpe; print('transformers' in sys.modules, 'datasets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_demo_writes_plot_and_table(tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["demo", "--out", str(tmp_path), "--sentence", "one two three, four five six."]) == 0
    png = (tmp_path / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    table = (tmp_path / "demo.md").read_text()
    assert "| # | token | step | displacement | position |" in table
    assert "tiny GPT-2" in table
