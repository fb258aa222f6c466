"""A launch that cannot run as ``accelerate launch`` set it up is said by the recipe in one line, exit status 2
(every process of the launch finds the same, so a traceback per process would only repeat it)."""

from __future__ import annotations

import importlib.util

from .runs import FAST, RECIPE, TINY


def _recipe_main():
    spec = importlib.util.spec_from_file_location("finetune_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_context_parallelism_on_cpu_is_one_line_and_status_2(tmp_path, monkeypatch, capsys):
    """What ``accelerate launch --config_file configs/accelerate/fsdp2_cp.yaml`` sets, on a machine without GPUs."""
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "2")
    out = tmp_path / "run"
    rc = _recipe_main()(["--config", str(TINY), f"output_dir={out}", "train.device=cpu", *FAST])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: context parallelism (cp_size=2) was asked for on CPU")
    assert "configs/accelerate/cpu.yaml" in lines[0]
    written = sorted(p.name for p in out.rglob("*")) if out.exists() else []
    assert written in ([], [".hf_trajpe.lock"])  # refused before anything is written (the lock, released)
