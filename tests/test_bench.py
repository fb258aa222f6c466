"""Smoke test of ``hf-trajpe bench`` (the whole suite at the tiny size, structure only, no timing) and the
interval and verdict logic on synthetic paired timings."""

import contextlib
import json

import numpy as np
import pytest
import torch

from hf_trajpe.benchmarks.intervals import MIN_ROUNDS, paired_interval, relative_half_width, verdict
from hf_trajpe.benchmarks.machine import BFLOAT16_FLAGS
from hf_trajpe.benchmarks.suite import BENCHMARKS, TARGETS, check_targets
from hf_trajpe.benchmarks.targets import COUNTED
from hf_trajpe.benchmarks.timing import side_by_side
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
    units = meta["cpu_bfloat16"]  # (Linux: read from the CPU's flags)
    assert units is None or units["units"] == any(units[flag] for flag in BFLOAT16_FLAGS)


def test_bfloat16_units_are_read_from_the_cpu_flags(monkeypatch, tmp_path):
    import builtins

    from hf_trajpe.benchmarks import machine

    cpuinfo = tmp_path / "cpuinfo"
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        return real_open(cpuinfo if path == "/proc/cpuinfo" else path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu sse avx2 avx512f amx_tile amx_bf16\n")
    assert machine.cpu_bfloat16_units() == {"units": True, "avx512_bf16": False, "amx_bf16": True}
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu sse avx2\n")
    assert machine.cpu_bfloat16_units() == {"units": False, "avx512_bf16": False, "amx_bf16": False}
    cpuinfo.write_text("model name\t: Some CPU\n")
    assert machine.cpu_bfloat16_units() is None


def _check_side_by_side(res, variants, keys):
    assert set(res["variants"]) == set(variants)
    for key in keys:
        assert res["stock"][key] > 0
        for figs in res["variants"].values():
            assert set(figs[key]) == {"median", "ratio_of_medians", "paired_ratio", "interval", "rounds", "half_width"}
            low, high = figs[key]["interval"]
            assert 0 < low <= figs[key]["paired_ratio"] <= high
            assert figs[key]["rounds"] == res["rounds"] == 1  # tiny: one round, no adaptive rounds
    assert res["stopped"] == "fixed"


def test_model_decode_memory_alibi_structure(bench_all):
    result, _ = bench_all
    gpt2 = ["native", "sinusoidal", "rope", "alibi", "none", "cope", "trajectory/learned", "trajectory/sinusoidal",
            "trajectory/rope", "trajectory/alibi"]
    gpt2 += ["rope+yarn x2", "rope+ntk x2"]  # context extensions; dynamic needs a rotary module (Llama only)
    llama = [v for v in gpt2 if v != "trajectory/learned"] + ["rope+dynamic x2"]
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


def test_remap_structure(bench_all):
    """Prefill and per-token decoding time and peak prefill memory of every remap against stock, past the trained
    length, each with its verdict against the remap limits."""
    result, md = bench_all
    remap = result["remap"]
    names = {"self_extend", "rerope", "dca", "string"}
    assert remap["tokens"] > remap["trained_length"] and remap["new_tokens"] >= 2
    _check_side_by_side(remap["read"], list(names), ["prefill_s", "per_token_s"])
    rows = remap["memory"]["prefill"]
    assert rows["stock"]["step_peak_bytes"] > 0 and set(rows["variants"]) == names
    assert set(remap["verdicts"]) == names
    for verdicts in remap["verdicts"].values():
        assert set(verdicts) == set(remap["limits"]) == {"prefill_s", "per_token_s", "memory"}
        assert verdicts["prefill_s"] == verdicts["per_token_s"] == "unresolved"  # one round decides nothing
        assert verdicts["memory"] in ("met", "missed")
    assert "decode ms/token" in md


def test_encoding_and_targets(bench_all):
    result, _ = bench_all
    runs = result["encoding"]["runs"]
    assert [r["shape"]["seq"] for r in runs] == [16, 64]
    assert all(r["ratio_vs_lookup"]["table lookup (baseline)"] == 1.0 for r in runs)
    assert result["encoding"]["sinusoid_accuracy"]["max_abs_error"] < 1e-4
    targets = result["targets"]
    assert {t["target"] for t in targets} == set(TARGETS)
    for t in targets:
        if t["limit"] is None:  # reported with what it measured, bound by nothing
            assert t["target"].startswith("remap_") and t["verdict"] == "no limit"
        elif t["target"] in COUNTED:  # counted, deterministic: no interval
            assert t["interval"] is None and t["verdict"] == ("met" if t["measured"] <= t["limit"] else "missed")
        else:  # one round cannot resolve anything
            assert t["rounds"] == 1 and t["verdict"] == "unresolved"
    # the long-context rows: both ALiBi variants and every remap, time and memory
    alibi, remaps = {"alibi", "trajectory/alibi"}, {"self_extend", "rerope", "dca", "string"}
    for target, variants in (("alibi_time", alibi), ("alibi_memory", alibi), ("remap_time", remaps),
                             ("remap_memory", remaps)):
        assert {t["variant"] for t in targets if t["target"] == target} == variants
    # every trajectory variant of every model has a row for each model-level target
    # and every static context extension (yarn, ntk: 2 per model)
    assert sum(t["target"] == "train_step" for t in targets) == 4 + 3 + 2 + 2
    row = next(t for t in targets if t["target"] == "decode_per_token" and t["variant"] == "rope+ntk x2")
    assert row["base_encoding"] == "rope"
    row = next(t for t in targets if t["target"] == "memory" and t["variant"] == "trajectory/alibi")
    assert row["base_encoding"] == "alibi" and row["base_measured"] > 0


def test_markdown_has_every_section(bench_all):
    _, md = bench_all
    for heading in ("## Machine", "## Targets", "## Encoding only", "## Forward and training step",
                    "## Greedy decoding", "## Peak memory", "## ALiBi", "## Remapped relative positions"):
        assert heading in md
    assert ("| target | model / shape | encoding | paired ratio | 95% interval | rounds | limit | verdict "
            "| base encoding alone |") in md
    assert "ratio of medians (unpaired)" in md
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
    assert main(["bench", "models", "--size", "tiny", "--repeats", "8", "--max-repeats", "4"]) == 2
    assert "--max-repeats 4 is below --repeats 8" in capsys.readouterr().err
    assert main(["bench", "models", "--size", "tiny", "--budget", "0"]) == 2
    assert "budget" in capsys.readouterr().err
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


# -- intervals and verdicts on synthetic paired timings (no clock involved) ------------------------------
def _ratios(center, spread, n, seed=0):
    return list(center * np.exp(np.random.default_rng(seed).normal(0, spread, n)))


def test_interval_is_a_bootstrap_of_the_median_and_reproducible():
    r = _ratios(1.01, 0.01, 20)
    iv = paired_interval(r)
    assert iv["point"] == pytest.approx(float(np.median(r)))
    assert iv["low"] < iv["point"] < iv["high"] and iv["rounds"] == 20
    assert min(r) <= iv["low"] and iv["high"] <= max(r)
    assert paired_interval(r) == iv  # fixed seed: same timings, same interval
    assert relative_half_width(paired_interval(_ratios(1.0, 0.002, 40))) < relative_half_width(
        paired_interval(_ratios(1.0, 0.05, 40)))
    with pytest.raises(ValueError, match="non-empty"):
        paired_interval([])
    with pytest.raises(ValueError, match="positive"):
        paired_interval([1.0, float("nan")])


@pytest.mark.parametrize("center,spread,n,expected", [
    (1.00, 0.005, 20, "met"),         # interval well below 1.03
    (1.08, 0.005, 20, "missed"),      # interval well above
    (1.03, 0.03, 20, "unresolved"),   # straddles the limit
    (1.00, 0.005, MIN_ROUNDS - 2, "unresolved"),  # too few rounds for a verdict, however tight
])
def test_verdict_met_missed_unresolved(center, spread, n, expected):
    iv = paired_interval(_ratios(center, spread, n))
    assert verdict(iv, 1.03) == expected


def test_verdict_uses_the_interval_ends_not_the_point():
    assert verdict({"point": 1.02, "low": 1.01, "high": 1.029, "rounds": 10}, 1.03) == "met"
    assert verdict({"point": 1.02, "low": 1.01, "high": 1.031, "rounds": 10}, 1.03) == "unresolved"
    assert verdict({"point": 1.04, "low": 1.029, "high": 1.05, "rounds": 10}, 1.03) == "unresolved"
    assert verdict({"point": 1.04, "low": 1.031, "high": 1.05, "rounds": 10}, 1.03) == "missed"


class _FakeTimer:
    """``measure``/``context`` for :func:`side_by_side` returning made-up seconds: stock 1.0, a variant its
    factor, times multiplicative noise; records the order of the runs."""

    def __init__(self, factors, spread, seed=0):
        self.factors, self.spread = factors, spread
        self.rng = np.random.default_rng(seed)
        self.current, self.log = None, []

    def context(self, name):
        @contextlib.contextmanager
        def ctx():
            self.current = name
            self.log.append(name)
            yield
        return ctx()

    def measure(self):
        base = 1.0 if self.current is None else self.factors[self.current]
        return {"seconds": base * float(np.exp(self.rng.normal(0, self.spread)))}


def _orders(log, name):
    """(stock first, variant first) counts of the pairs with ``name`` after the warm-up."""
    first = {"stock": 0, "variant": 0}
    for a, b in zip(log[::2], log[1::2], strict=True):
        if name in (a, b):
            first["stock" if a is None else "variant"] += 1
    return first


def test_adaptive_rounds_stop_when_the_intervals_are_narrow():
    t = _FakeTimer({"a": 1.0, "b": 1.1}, spread=0.01)
    res = side_by_side(t.measure, ["a", "b"], t.context, repeats=6, warmup=0, max_rounds=40)
    assert res["stopped"] == "converged" and res["rounds"] < 40
    for name in ("a", "b"):
        fig = res["variants"][name]["seconds"]
        assert fig["half_width"] <= 0.02 and fig["rounds"] % 2 == 0
        assert _orders(t.log, name)["stock"] == _orders(t.log, name)["variant"]  # both orders equally often
    assert verdict({"point": res["variants"]["b"]["seconds"]["paired_ratio"],
                    "low": res["variants"]["b"]["seconds"]["interval"][0],
                    "high": res["variants"]["b"]["seconds"]["interval"][1],
                    "rounds": res["variants"]["b"]["seconds"]["rounds"]}, 1.03) == "missed"


def test_adaptive_rounds_add_pairs_only_for_wide_intervals_and_respect_the_caps():
    t = _FakeTimer({"tight": 1.0, "noisy": 1.0}, spread=0.0)
    noisy = _FakeTimer({}, spread=0.2, seed=1)

    def measure():
        out = t.measure()
        if t.current == "noisy":
            out["seconds"] *= noisy.measure()["seconds"]
        return out

    res = side_by_side(measure, ["tight", "noisy"], t.context, repeats=6, warmup=0, max_rounds=12)
    assert res["stopped"] == "max_rounds" and res["rounds"] == 12
    assert res["variants"]["tight"]["seconds"]["rounds"] == 6  # converged at once: no more rounds
    assert res["variants"]["noisy"]["seconds"]["rounds"] == 12
    t2 = _FakeTimer({"a": 1.0}, spread=0.2)
    res = side_by_side(t2.measure, ["a"], t2.context, repeats=6, warmup=0, max_rounds=100, budget_s=0)
    assert res["stopped"] == "budget" and res["rounds"] == 6
    t3 = _FakeTimer({"a": 1.0}, spread=0.2)
    res = side_by_side(t3.measure, ["a"], t3.context, repeats=3, warmup=0)
    assert res["stopped"] == "fixed" and res["rounds"] == 3


def test_targets_carry_interval_rounds_and_verdict():
    def fig(point, low, high, rounds=10):
        return {"seconds": {"paired_ratio": point, "interval": [low, high], "rounds": rounds, "half_width": 0.01,
                            "ratio_of_medians": point, "median": 1.0}}

    train = {"variants": {"sinusoidal": fig(1.0, 0.99, 1.01), "trajectory/sinusoidal": fig(1.01, 1.0, 1.02),
                          "rope": fig(1.0, 0.99, 1.01), "trajectory/rope": fig(1.05, 1.04, 1.06),
                          "trajectory/alibi": fig(1.03, 1.01, 1.05)}}
    rows = check_targets({"models": {"models": {"gpt2": {"train_step": train}}}})
    by = {r["variant"]: r for r in rows}
    assert by["trajectory/sinusoidal"]["verdict"] == "met"
    assert by["trajectory/rope"]["verdict"] == "missed"
    assert by["trajectory/alibi"]["verdict"] == "unresolved"
    assert by["trajectory/sinusoidal"]["interval"] == [1.0, 1.02] and by["trajectory/sinusoidal"]["rounds"] == 10
    assert by["trajectory/sinusoidal"]["base_measured"] == 1.0 and by["trajectory/alibi"]["base_measured"] is None


class _FakeClock:
    """A clock that advances by the seconds the fake measurements report, so budgets are tested without timing."""

    def __init__(self, timer: _FakeTimer):
        self.now, self.timer = 0.0, timer

    def measure(self):
        out = self.timer.measure()
        self.now += out["seconds"]
        return out

    def __call__(self) -> float:
        return self.now


def _ratio_figure(res, name):
    f = res["variants"][name]["seconds"]
    return {"point": f["paired_ratio"], "low": f["interval"][0], "high": f["interval"][1], "rounds": f["rounds"]}


def test_unresolved_targets_get_rounds_until_their_interval_decides():
    """Six rounds too scattered to decide a ratio of about 1.08 against 1.03: the deciding rounds add pairs
    for that variant only (not for one without a target, nor for one already decided) until it reads missed."""
    t = _FakeTimer({"slow": 1.0, "fast": 0.90, "free": 1.08}, spread=0.0)
    clock = _FakeClock(t)
    scripted = iter([1.3, 0.9] * 3 + [1.07, 1.09] * 200)  # the first six: median 1.1, interval [0.9, 1.3]

    def measure():
        out = clock.measure()
        return {"seconds": next(scripted)} if t.current == "slow" else out

    res = side_by_side(measure, ["slow", "fast", "free"], t.context, repeats=6, warmup=0, max_rounds=6,
                       limits={"slow": 1.03, "fast": 1.03}, decide_max_rounds=400, clock=clock)
    decide = res["decide"]
    assert decide["stopped"] == "decided"
    assert decide["rounds_added"]["slow"] > 0 and decide["rounds_added"]["slow"] % 2 == 0
    assert decide["rounds_added"]["fast"] == 0
    assert "free" not in decide["rounds_added"] and res["variants"]["free"]["seconds"]["rounds"] == 6
    assert verdict(_ratio_figure(res, "slow"), 1.03) == "missed"
    assert verdict(_ratio_figure(res, "fast"), 1.03) == "met"
    assert res["variants"]["slow"]["seconds"]["rounds"] == 6 + decide["rounds_added"]["slow"]
    assert _orders(t.log, "slow")["stock"] == _orders(t.log, "slow")["variant"]  # both orders equally often


def test_a_target_within_two_percent_of_its_limit_may_stay_unresolved():
    """A point 1% under the limit is not chased: no deciding rounds, the verdict stays unresolved."""
    t = _FakeTimer({"near": 1.0}, spread=0.0)
    ratios = iter([1.05, 0.97] * 3)  # paired ratios with median 1.01 and an interval [0.97, 1.05]

    def measure():
        out = t.measure()
        return {"seconds": next(ratios)} if t.current == "near" else out

    res = side_by_side(measure, ["near"], t.context, repeats=6, warmup=0, limits={"near": 1.02},
                       decide_max_rounds=100, clock=lambda: 0.0)
    assert res["decide"]["stopped"] == "decided" and res["decide"]["rounds_added"] == {"near": 0}
    assert verdict(_ratio_figure(res, "near"), 1.02) == "unresolved"


def test_the_deciding_rounds_stop_at_their_budget_and_round_cap():
    """A variant right above its limit with wide noise cannot be decided: the rounds stop at the budget
    (fake clock, 1 s per run) or at the cap of rounds, whichever comes first; none without either."""
    cases = ((10.0, None, "budget", 6), (None, 12, "max_rounds", 6), (None, None, "none", 0))
    for budget, cap, stopped, added in cases:
        t = _FakeTimer({"a": 1.06}, spread=0.3, seed=1)
        clock = _FakeClock(_FakeTimer({}, spread=0.0))

        def measure(t=t, clock=clock):
            clock.now += 1.0
            return t.measure()

        res = side_by_side(measure, ["a"], t.context, repeats=6, warmup=0, limits={"a": 1.03},
                           decide_budget_s=budget, decide_max_rounds=cap, clock=clock)
        assert res["decide"]["stopped"] == stopped, (budget, cap, res["decide"])
        assert res["decide"]["rounds_added"]["a"] == added
        assert res["variants"]["a"]["seconds"]["rounds"] == 6 + added


def test_the_cpu_clock(tmp_path, capsys):
    """``--clock cpu`` times with the process's CPU time (recorded in the result) and is refused on a GPU."""
    from hf_trajpe.benchmarks.timing import check_clock

    assert main(["bench", "encoding", "--size", "tiny", "--clock", "cpu", "--repeats", "1", "--seq", "8",
                 "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "bench.json").read_text())["meta"]["clock"] == "cpu"
    assert main(["bench", "models", "--size", "tiny", "--clock", "cpu", "--device", "cuda"]) == 2
    assert "--clock cpu" in capsys.readouterr().err
    with pytest.raises(ValueError, match="use --clock wall"):
        check_clock("cpu", "cuda")
    with pytest.raises(ValueError, match="unknown clock"):
        check_clock("sundial")


@pytest.mark.slow  # (compiles flex_attention on the CPU: 16 s on a cold compile cache)
def test_alibi_flex_variant_runs_flex_and_restores_sdpa(monkeypatch):
    """A ``(flex)`` variant (added on CUDA) patches the model under flex_attention and leaves it on sdpa; its
    forward gives the sdpa variant's logits (checked here with flex's CPU forward, no backward)."""
    from hf_trajpe.benchmarks.alibi import FLEX, with_flex
    from hf_trajpe.benchmarks.setup import SIZES, build_model, patched, random_ids

    model = build_model("llama", SIZES["tiny"], max_positions=64)
    ids = random_ids(model.config.vocab_size, 48)
    context = with_flex(model, patched(model))
    seen, logits = [], {}
    for label in ("alibi", "alibi" + FLEX):
        with context(label), torch.no_grad():
            seen.append(model.config._attn_implementation)
            logits[label] = model(input_ids=ids, use_cache=False).logits
        assert model.config._attn_implementation == "sdpa"
    assert seen == ["hf_trajpe_sdpa", "hf_trajpe_flex"]  # the patch wraps the implementation it found
    torch.testing.assert_close(logits["alibi" + FLEX], logits["alibi"], rtol=1e-4, atol=1e-4)
