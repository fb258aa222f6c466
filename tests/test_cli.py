"""The ``hf-trajpe`` command line and the package entry: help texts, early argument errors, and that
neither ``import hf_trajpe`` nor parsing imports a heavy library. No wall-clock assertions here (the
machine is shared): ``python scripts/cli_help_time.py`` measures the ``--help`` times."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hf_trajpe
from hf_trajpe.cli import build_parser, main

HEAVY = ("torch", "transformers", "datasets", "matplotlib", "lm_eval", "trl")
PLUGIN_API = ["patch", "unpatch", "get_handle", "from_pretrained", "load_patch", "save_patch", "PatchConfig",
              "PatchHandle", "SUPPORTED", "register_attention"]
#: every name ``hf_trajpe`` exported before it became lazy (README and tests use them)
EXPORTED_BEFORE = [
    "AUTO_STRENGTHS", "CONTENT_TYPES", "INTERPOLATION_MODES", "AutoStrength", "DisplacementCache", "FixedStrength",
    "LearnableStrength", "PatchConfig", "PatchHandle", "SUPPORTED", "SinusoidalTable", "TrajectoryMonitor",
    "TrajectoryPast", "alibi_bias", "alibi_slopes", "apply_rotary", "detect_content_type", "embedding_version",
    "from_pretrained", "global_monitor", "interpolate_rows", "load_patch", "make_strength", "patch", "rotary_cos_sin",
    "rotary_inv_freq", "rotate_every_two", "rotate_half", "save_patch", "sinusoidal_encoding",
    "sinusoidal_frequencies", "trajectory_positions", "unpatch",
]


def _run_python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, **kwargs)


# -- the package entry -----------------------------------------------------------------------------


def test_import_hf_trajpe_imports_nothing_heavy():
    code = f"import hf_trajpe, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    out = _run_python(code, check=True)
    assert out.stdout.strip() == "[]"


def test_all_lists_the_plugin_api_first():
    assert hf_trajpe.__all__[:len(PLUGIN_API)] == PLUGIN_API
    assert len(set(hf_trajpe.__all__)) == len(hf_trajpe.__all__)
    assert set(EXPORTED_BEFORE) <= set(hf_trajpe.__all__)
    assert set(hf_trajpe.__all__) == set(hf_trajpe._SOURCES)  # every public name says where it lives
    assert "plugin api first" in hf_trajpe.__doc__.lower() and "hf_trajpe.encodings" in hf_trajpe.__doc__


def test_dir_lists_every_public_name():
    assert set(hf_trajpe.__all__) <= set(dir(hf_trajpe))


@pytest.mark.parametrize("name", hf_trajpe.__all__)
def test_every_public_name_imports_from_its_submodule(name):
    # `pytest tests/test_cli.py -k register_attention` checks the one added to hf_trajpe.patching last
    namespace: dict = {}
    exec(f"from hf_trajpe import {name}", namespace)
    assert namespace[name] is getattr(importlib.import_module(hf_trajpe._SOURCES[name]), name)


def test_building_blocks_come_from_encodings():
    for name in ("sinusoidal_encoding", "SinusoidalTable", "rotary_cos_sin", "apply_rotary", "alibi_slopes",
                 "alibi_bias", "trajectory_positions", "interpolate_rows"):
        assert hf_trajpe._SOURCES[name] == "hf_trajpe.encodings"


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        hf_trajpe.not_a_name  # noqa: B018
    assert not hasattr(hf_trajpe, "not_a_name")


def test_version_is_a_plain_string():
    assert isinstance(hf_trajpe.__version__, str) and hf_trajpe.__version__.count(".") == 2


# -- help --------------------------------------------------------------------------------------------

#: argv -> texts that only that command's help prints
HELPS = {
    (): ["usage: hf-trajpe [-h] COMMAND", "bench", "data", "demo", "eval", "extend", "lm-eval", "study"],
    ("study",): ["usage: hf-trajpe study", "--config", "--quick", "key=value", "hf-trajpe study --config"],
    ("bench",): ["usage: hf-trajpe bench", "{encoding,models,decode,memory,alibi,remap,all}", "--repeats", "--dim"],
    ("bench", "encoding"): ["usage: hf-trajpe bench", "encoding only (override the size)"],
    ("bench", "alibi"): ["usage: hf-trajpe bench", "--threads"],
    ("eval",): ["usage: hf-trajpe eval", "--model NAME=PATH", "--baseline", "--bootstrap"],
    ("data",): ["usage: hf-trajpe data [-h] ACTION", "save_to_disk each content type", "hf-trajpe data show"],
    ("data", "build"): ["usage: hf-trajpe data build", "--out OUT", "--min-chars", "(default: 2000)"],
    ("data", "show"): ["usage: hf-trajpe data show", "type", "-n N"],
    ("demo",): ["usage: hf-trajpe demo", "--strength", "alpha in [0, 1]", "--sentence"],
    ("extend",): ["usage: hf-trajpe extend", "--to N", "--validation FILE_OR_DIR", "--ruler-prompts K", "--quick",
                  "hf-trajpe extend --model"],
    ("lm-eval",): ["usage: hf-trajpe lm-eval", "--encoding", "--option KEY=VALUE", "--write-data DIR",
                   "hf-trajpe lm-eval --write-data"],
}


@pytest.mark.parametrize("argv", list(HELPS), ids=lambda argv: " ".join(argv) or "top")
def test_help_exits_0_with_the_command_usage(argv, capsys):
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    for text in HELPS[argv]:
        assert text in out, f"{text!r} missing from `hf-trajpe {' '.join(argv)} --help`"


def test_every_command_has_a_help_test():
    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert set(sub.choices) == {argv[0] for argv in HELPS if argv}


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: hf-trajpe" in capsys.readouterr().out


def test_help_and_argument_errors_import_nothing_heavy(tmp_path):
    """Every --help, and argument errors, run in one fresh interpreter: no heavy module, no folder."""
    calls = [[*argv, "--help"] for argv in HELPS] + [list(argv) for argv, _ in BAD_ARGS]
    code = (f"import sys, json\nfrom hf_trajpe.cli import main\ncodes = [main(a) for a in {calls!r}]\n"
            f"print(json.dumps([codes, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})]))")
    out = _run_python(code, cwd=tmp_path, check=True)
    codes, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert heavy == []
    assert codes == [0] * len(HELPS) + [2] * len(BAD_ARGS)
    assert [p.name for p in tmp_path.iterdir()] == []  # no output folder made (--out defaults are relative)


# -- argument errors: exit 2 before anything is loaded or created ------------------------------------

#: (argv, texts of the error message); run from an empty folder, so relative paths do not exist
BAD_ARGS = [
    (("demo", "--strength", "7"), ["argument --strength", "strength 7.0 is outside [0, 1]", "use e.g. 0.2"]),
    (("demo", "--strength", "nan"), ["argument --strength", "outside [0, 1]"]),
    (("demo", "--beta", "0"), ["argument --beta", "finite number > 0"]),
    (("demo", "--sentence", " "), ["argument --sentence", "empty"]),
    (("demo", "--model", "no_such_model"), ["argument --model", "no folder at 'no_such_model'"]),
    (("bench", "nope"), ["argument what", "invalid choice"]),
    (("bench", "models", "--repeats", "0"), ["argument --repeats", "at least 1"]),
    (("bench", "models", "--threads", "0"), ["argument --threads", "at least 1"]),
    (("bench", "models", "--device", "gpu0"), ["argument --device", "use cpu, cuda or cuda:N"]),
    (("bench", "encoding", "--dim", "15"), ["argument --dim", "odd", "even width"]),
    (("bench", "encoding", "--seq", "8", "0"), ["argument --seq", "at least 1"]),
    (("bench", "models", "--seq", "8"), ["--seq sets the shapes of `bench encoding`", "hf-trajpe bench encoding"]),
    (("data", "build", "--out", "d", "--train", "-1"), ["argument --train", "at least 0"]),
    (("data", "build", "--out", "d", "--min-chars", "0"), ["argument --min-chars", "at least 1"]),
    (("data", "build", "--out", "d", "--types", "prose"), ["unknown content type 'prose'", "code_hierarchy"]),
    (("data", "show", "prose"), ["unknown content type 'prose'", "choose from"]),
    (("data", "show", "dialogue_structure", "-n", "0"), ["argument -n", "at least 1"]),
    (("eval", "--model", "nonsense"), ["argument --model", "not NAME=PATH"]),
    (("eval", "--model", "a=no_such_run"), ["argument --model", "no model folder at 'no_such_run'"]),
    (("eval", "--model", "a=.", "--baseline", "b"), ["--baseline 'b' is not among the --model names ['a']"]),
    (("eval", "--model", "a=.", "--data", "."), ["--data .: no saved dataset", "hf-trajpe data build"]),
    (("eval", "--model", "a=.", "--tokenizer", "gpt9"), ["argument --tokenizer", "neither byte, minilm"]),
    (("eval", "--model", "a=.", "--lengths", "1", "0"), ["argument --lengths", "at least 1"]),
    (("eval", "--model", "a=.", "--bootstrap", "0"), ["argument --bootstrap", "at least 1"]),
    (("eval", "--model", "a=.", "--equivalence-margin", "0"), ["argument --equivalence-margin", "between 0 and 100"]),
    (("eval", "--model", "a=.", "--types", "real_txt"), ["unknown content type 'real_txt'", "real_text"]),
    (("study",), ["argument --config", "no file at 'configs/study/default.yaml'"]),
    (("lm-eval",), ["give --model PATH to evaluate, or --write-data DIR"]),
    (("lm-eval", "--model", "no_such_model"), ["no model folder at 'no_such_model'"]),
    (("lm-eval", "--write-data", "d", "--option", "strength=0.2"), ["--option needs --encoding"]),
    (("lm-eval", "--write-data", "d", "--encoding", "rope", "--option", "strength"), ["argument --option",
                                                                                       "not KEY=VALUE"]),
    (("lm-eval", "--write-data", "d", "--encoding", "rotary"), ["argument --encoding", "invalid choice"]),
    (("study", "--config", "missing.yaml"), ["argument --config", "no file at 'missing.yaml'"]),
    (("extend", "--model", "no_such_model"), ["argument --model", "not a hub name"]),
    (("extend", "--model", "org/model"), ["give the length to read: --to N"]),
    (("extend", "--model", "org/model", "--to", "1x"), ["argument --to", "multiple of the trained length above 1"]),
    (("extend", "--model", "org/model", "--to", "2x", "--methods", "yarn", "longrope"),
     ["argument --methods", "unknown method 'longrope'", "dca_yarn"]),
    (("extend", "--model", "org/model", "--quick", "--kinds", "poems"), ["--kinds: unknown poems", "stdlib"]),
    (("extend", "--model", "org/model", "--quick", "--tolerance", "-1"), ["argument --tolerance", "from 0 to 100"]),
    (("extend", "--model", "org/model", "--quick", "--validation", "mine.txt"), ["argument --validation",
                                                                                 "no file or folder at 'mine.txt'"]),
]


@pytest.mark.parametrize("argv,texts", BAD_ARGS, ids=[" ".join(argv) for argv, _ in BAD_ARGS])
def test_bad_argument_exits_2_with_what_to_do(argv, texts, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert f"usage: hf-trajpe {argv[0]}" in err
    for text in texts:
        assert text in err
    assert list(tmp_path.iterdir()) == []


def test_demo_bad_strength_creates_no_output_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--strength", "7"]) == 2
    assert "hf-trajpe demo: error: argument --strength: strength 7.0 is outside [0, 1]" in capsys.readouterr().err
    assert not out.exists()


def test_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["demo", "--out", str(tmp_path / "f")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["bench", "encoding", "--out", str(tmp_path / "f" / "sub")]) == 2
    assert "cannot be created" in capsys.readouterr().err


def test_study_overrides_must_be_key_value(tmp_path, capsys):
    config = tmp_path / "study.yaml"
    config.write_text("{}\n")
    for bad, text in (("train.steps", "is not key=value"), ("=3", "is not key=value"), ("a..b=1", "empty part")):
        assert main(["study", "--config", str(config), bad]) == 2
        assert text in capsys.readouterr().err


# -- a real run --------------------------------------------------------------------------------------


def test_demo_writes_plot_and_table(tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["demo", "--out", str(tmp_path), "--sentence", "one two three, four five six."]) == 0
    png = (tmp_path / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    table = (tmp_path / "demo.md").read_text()
    assert "| # | token | step | displacement | position |" in table
    assert "tiny GPT-2" in table


def test_study_runs_several_configs_in_order_and_ends_with_every_summary(tmp_path, capsys):
    import yaml

    root = Path(__file__).resolve().parents[1]
    tiny = {"workers": 1, "seeds": [0], "model": {"n_layer": 1, "n_embd": 16, "n_head": 2, "n_positions": 64},
            "train": {"steps": 2, "warmup_steps": 1, "log_every": 1},
            "data": {"train": 8, "validation": 2, "test": 4}, "eval": {"n_resamples": 20, "batch_size": 4},
            "per_task": {}, "comparisons": [["rope", "learned"]],
            "encodings": {"learned": {"encoding": "native"}, "rope": {"encoding": "rope"}}}
    configs = []
    for name, tasks in (("a", {"selective_copy": {"tokens": 3, "blanks": 3, "blanks_sparse": 6, "blanks_dense": 1}}),
                        ("b", {"counting": {"min_steps": 3, "max_steps": 4, "ood_min_steps": 5, "ood_max_steps": 6}})):
        data = yaml.safe_load((root / "configs" / "study" / "tasks.yaml").read_text())
        for key, value in tiny.items():
            data[key] = {**data[key], **value} if isinstance(value, dict) and key in ("model", "train", "data",
                                                                                      "eval") else value
        data.update(tasks=tasks, name=name, output_dir=str(tmp_path / name / "runs"),
                    report_dir=str(tmp_path / name / "report"))
        configs += ["--config", str(tmp_path / f"{name}.yaml")]
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    assert main(["study", *configs, "eval.n_resamples=10"]) == 2
    assert "overrides apply to one study" in capsys.readouterr().err
    assert main(["study", "--no-progress", *configs]) == 0
    out = capsys.readouterr()
    assert (tmp_path / "a" / "report" / "tasks.md").is_file() and (tmp_path / "b" / "report" / "tasks.md").is_file()
    tail = out.out[out.out.rindex("# Task study `a`"):]  # both summaries, in order, last, on stdout
    assert "**selective_copy**" in tail and tail.index("# Task study `b`") > tail.index("**selective_copy**")
    assert "**counting**" in tail and out.out.count("# Task study `a`") == 1
    assert "# Task study" not in out.err, "progress and diagnostics go to stderr, the results to stdout"


@pytest.mark.parametrize("command", [["eval", "--model", "a=."], ["bench", "encoding", "--repeats", "1"]])
def test_an_output_folder_that_cannot_be_created_is_refused_before_any_work(command, tmp_path, capsys, monkeypatch):
    """A path that passes the argument check (a dangling link on the way) but cannot be created: status 2
    naming --out, before a model is loaded or anything measured."""
    import hf_trajpe.benchmarks.suite
    import hf_trajpe.evaluation

    def work_started(*args, **kwargs):
        raise AssertionError("the work started before the output folder was checked")

    monkeypatch.setattr(hf_trajpe.evaluation, "evaluate_models", work_started)
    monkeypatch.setattr(hf_trajpe.benchmarks.suite, "run_benchmarks", work_started)
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    out = tmp_path / "link" / "out"
    assert main([*command, "--out", str(out)]) == 2
    assert f"--out '{out}' cannot be created or written" in capsys.readouterr().err
