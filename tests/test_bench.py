"""Smoke test of ``hf-trajpe bench``: the whole suite at the tiny size, structure only, no timing."""

import json

import pytest
import torch

from hf_trajpe.benchmarks.suite import BENCHMARKS, TARGETS
from hf_trajpe.cli import main


@pytest.fixture(scope="module")
def bench_all(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    assert main(["bench", "all", "--size", "tiny", "--threads", "1", "--out", str(out)]) == 0
    assert torch.get_num_threads() == threads  # restored for the rest of the test session
    return json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def test_all_writes_every_benchmark_and_the_machine(bench_all):
    result, _ = bench_all
    assert set(BENCHMARKS) <= set(result)
    meta = result["meta"]
    for key in ("torch", "transformers", "torch_threads", "dtype", "device", "cpu", "size", "wall_s"):
        assert key in meta
    assert meta["size"] == "tiny" and meta["torch_threads"] == 1 and meta["dtype"] == "float32"


def _check_side_by_side(res, variants, keys):
    assert set(res["variants"]) == set(variants)
    for key in keys:
        assert res["stock"][key] > 0
        for figs in res["variants"].values():
            assert set(figs[key]) == {"median", "ratio_of_medians", "paired_ratio"}
            assert figs[key]["paired_ratio"] > 0


def test_model_decode_memory_alibi_structure(bench_all):
    result, _ = bench_all
    gpt2 = ["native", "sinusoidal", "rope", "alibi", "none", "trajectory/learned", "trajectory/sinusoidal",
            "trajectory/rope", "trajectory/alibi"]
    llama = [v for v in gpt2 if v != "trajectory/learned"]
    for family, variants in (("gpt2", gpt2), ("llama", llama)):
        m = result["models"]["models"][family]
        assert m["config"]["model_type"] == family and m["config"]["parameters"] > 0
        _check_side_by_side(m["forward"], variants, ["seconds"])
        _check_side_by_side(m["train_step"], variants, ["seconds"])
        _check_side_by_side(result["decode"]["models"][family], variants, ["generate_s", "per_token_s"])
        mem = result["memory"]["models"][family]
        assert mem["stock"]["step_peak_bytes"] > 0
        assert set(mem["variants"]) == set(variants)
        for row in mem["variants"].values():
            assert row["total_peak_bytes"] == row["state_bytes"] + row["step_peak_bytes"]
            assert row["step_ratio"] > 0 and row["total_ratio"] > 0
    alibi = result["alibi"]
    _check_side_by_side(alibi["forward"], ["alibi", "trajectory/alibi"], ["seconds"])
    assert set(alibi["memory"]) == {"forward", "train_step"}
    assert alibi["memory"]["train_step"]["variants"]["alibi"]["step_ratio"] > 0
    assert alibi["memory"]["forward"]["stock"]["step_peak_bytes"] > 0


def test_encoding_and_targets(bench_all):
    result, _ = bench_all
    runs = result["encoding"]["runs"]
    assert [r["shape"]["seq"] for r in runs] == [16, 64]
    assert all(r["ratio_vs_lookup"]["table lookup (baseline)"] == 1.0 for r in runs)
    targets = result["targets"]
    assert {t["target"] for t in targets} == set(TARGETS)
    for t in targets:
        assert t["met"] == (t["measured"] <= t["limit"])
    # every trajectory variant of every model has a row for each model-level target
    assert sum(t["target"] == "train_step" for t in targets) == 4 + 3
    row = next(t for t in targets if t["target"] == "memory" and t["variant"] == "trajectory/alibi")
    assert row["base_encoding"] == "alibi" and row["base_measured"] > 0


def test_markdown_has_every_section(bench_all):
    _, md = bench_all
    for heading in ("## Machine", "## Targets", "## Encoding only", "## Forward and training step",
                    "## Greedy decoding", "## Peak memory", "## ALiBi"):
        assert heading in md
    assert "| target | model / shape | encoding | measured | limit | verdict | base encoding alone |" in md
    assert "torch_threads" in md


def test_single_benchmark_and_encoding_overrides(tmp_path, capsys):
    assert main(["bench", "encoding", "--size", "tiny", "--batch", "1", "--seq", "8", "--dim", "16",
                 "--repeats", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert set(result) == {"meta", "encoding", "targets"}
    assert result["encoding"]["runs"][0]["shape"] == {"batch": 1, "seq": 8, "dim": 16, "dtype": "float32",
                                                      "device": "cpu"}
    assert "ratio vs lookup" in capsys.readouterr().out


def test_bad_arguments_say_what_to_do(capsys):
    assert main(["bench", "models", "--size", "tiny", "--repeats", "0"]) == 2
    assert "--repeats must be at least 1" in capsys.readouterr().err
    assert main(["bench", "models", "--size", "tiny", "--device", "gpu0"]) == 2
    assert "not a torch device" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["bench", "models", "--size", "tiny", "--device", "cuda"]) == 2
        assert "use --device cpu" in capsys.readouterr().err


def test_peak_memory_counts_what_a_step_holds_at_once():
    from hf_trajpe.benchmarks.memory import PeakMemory

    with PeakMemory("cpu") as pm:
        old = torch.ones(1 << 18)  # 1 MiB allocated before the window, freed inside it
        with pm.measure("step"):
            a = torch.ones(1 << 20)  # 4 MiB
            b = torch.ones(1 << 21)  # 8 MiB, both alive: the peak
            del a, b, old
            c = torch.ones(1 << 20)  # 4 MiB after the frees
            del c
        with pm.measure("nothing"):
            pass
    assert pm.peaks["step"] == 12 * 2**20
    assert pm.peaks["nothing"] == 0
