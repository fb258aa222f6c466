"""``hf-trajpe eval --patch``: each reading's patch given once."""

from __future__ import annotations

from hf_trajpe.cli import main


def test_a_patch_name_given_twice_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """The second ``--patch yarn=...`` would silently replace the first: refused before anything is loaded."""
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--model", "yarn=.", "--long-context", "64",
            "--patch", 'yarn={"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2}}',
            "--patch", 'yarn={"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 4}}']
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--patch yarn given more than once" in err and "one JSON object" in err
    assert list(tmp_path.iterdir()) == []
