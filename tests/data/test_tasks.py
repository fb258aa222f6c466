"""Tasks with known answers: registry, determinism, disjoint splits, OOD splits that differ as stated
(measured from the texts), answers recomputed by independent parsers, the byte-token answer mask, and
exact-match scoring against an oracle model and a perturbed one."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest
import torch

from hf_trajpe.content import CONTENT_TYPES
from hf_trajpe.data import CONTENT_TYPE_REGISTRY, byte_tokenizer
from hf_trajpe.data.registry import names
from hf_trajpe.data.tasks import TASK_REGISTRY, build_task, encode_rows, get_task
from hf_trajpe.evaluation.answers import accuracy_intervals, exact_match, paired_difference

TASKS = ("flip_flop", "selective_copy", "counting", "passkey")
SMALL = dict(train=30, validation=5, test=20)


@pytest.fixture(scope="module")
def built():
    return {name: build_task(name, seed=0, **SMALL) for name in TASKS}


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def _answers(row) -> list[str]:
    return [row["text"][s:e] for s, e in row["answer_spans"]]


# -- independent parsers of each task's format ----------------------------------------------------
def _flip_flop(text: str):
    """(ignore share among the free instructions, [(position of each read bit, last written bit)])."""
    ops, reads, register = text[0::2], [], None
    for k, op in enumerate(ops):
        if op == "w":
            register = text[2 * k + 1]
        elif op == "r":
            reads.append((2 * k + 1, register))
    assert set(ops) <= set("wir") and set(text[1::2]) <= set("01") and ops[0] == "w" and ops[-1] == "r"
    return ops[1:-1].count("i") / max(1, len(ops) - 2), reads


def _counting(text: str):
    """(number of statements, value of the printed variable), by executing the program."""
    program, var, value = re.fullmatch(r"(.*) print ([a-z]) (\d+)", text).groups()
    statements = re.findall(r"pass;|[a-z] \+\+;|[a-z] = 0 ;", program)
    assert " ".join(statements) == program
    state: dict[str, int] = {}
    for s in statements:
        if s.endswith("++;"):
            state[s[0]] += 1
        elif s != "pass;":
            state[s[0]] = 0
    return len(statements), str(state[var]), value


def _passkey(text: str) -> str:
    (key,) = re.findall(r"The pass key is (\d{5})\. Remember it\. \1 is the pass key\.", text)
    assert text.endswith(f"What is the pass key? The pass key is {key}")
    return key


# -- datasets ---------------------------------------------------------------------------------------
def test_registry_holds_the_four_tasks_apart_from_the_content_types():
    assert tuple(TASK_REGISTRY) == TASKS
    assert not set(TASK_REGISTRY) & set(CONTENT_TYPE_REGISTRY)
    assert names() == list(CONTENT_TYPES)  # the content study's mix is unchanged
    with pytest.raises(ValueError, match="unknown task"):
        get_task("flipflop")
    with pytest.raises(ValueError, match="unknown option"):
        build_task("counting", test=1, max_stpes=3)


@pytest.mark.parametrize("name", TASKS)
def test_splits_sizes_columns_and_determinism(built, name):
    dd = built[name]
    task = get_task(name)
    assert list(dd) == task.splits and task.splits[0] == "test" and task.ood_splits
    assert {k: dd[k].num_rows for k in dd} == {s: SMALL["test" if s.startswith("test") else s] for s in dd}
    assert dd["train"].column_names == ["text", "answer_spans", "source"]
    again, other = build_task(name, seed=0, **SMALL), build_task(name, seed=1, **SMALL)
    assert all(again[s]["text"] == dd[s]["text"] for s in dd)
    assert other["test"]["text"] != dd["test"]["text"]
    # the test splits depend on the seed and test size only, never on the train size
    bigger = build_task(name, seed=0, train=60, validation=5, test=20)
    assert all(bigger[s]["text"] == dd[s]["text"] for s in task.test_splits)


@pytest.mark.parametrize("name", TASKS)
def test_splits_do_not_overlap(built, name):
    texts = [set(built[name][s]["text"]) for s in built[name]]
    assert sum(map(len, texts)) == sum(built[name][s].num_rows for s in built[name])
    assert len(set().union(*texts)) == sum(map(len, texts))


@pytest.mark.parametrize("name", TASKS)
def test_byte_tokens_are_characters_and_the_mask_is_the_spans(built, tok, name):
    rows = [r for s in built[name] for r in built[name][s]]
    encoded = encode_rows([r["text"] for r in rows], [r["answer_spans"] for r in rows], tok)
    for row, (ids, mask) in zip(rows, encoded, strict=True):
        assert ids == [b + 3 for b in row["text"].encode()]  # 1 character = 1 byte token (ASCII)
        want = [any(s <= i < e for s, e in row["answer_spans"]) for i in range(len(row["text"]))]
        assert mask == want and not mask[0]


def test_flip_flop_answers_and_ignore_density(built):
    density = {}
    for split in ("test", "test_ood_sparse", "test_ood_dense", "train"):
        shares = []
        for row in built["flip_flop"][split]:
            share, reads = _flip_flop(row["text"])
            shares.append(share)
            assert row["answer_spans"] == [[p, p + 1] for p, _ in reads]
            assert _answers(row) == [bit for _, bit in reads]
            assert len(row["text"]) == 128
        density[split] = np.mean(shares)
    assert density["test"] == pytest.approx(0.8, abs=0.04) and density["train"] == pytest.approx(0.8, abs=0.04)
    assert density["test_ood_sparse"] == pytest.approx(0.98, abs=0.015)
    assert density["test_ood_dense"] == pytest.approx(0.1, abs=0.04)


def test_selective_copy_answers_and_blank_counts(built):
    blanks = {"test": 16, "test_ood_sparse": 32, "test_ood_dense": 8, "train": 16}
    for split, n in blanks.items():
        for row in built["selective_copy"][split]:
            context, answer = row["text"].split("|")
            assert context.count(".") == n and len(context) == n + 16
            assert _answers(row) == [context.replace(".", "")] == [answer]


def test_counting_answers_and_program_lengths(built):
    lengths, values = {}, {}
    for split in ("test", "test_ood", "test_ood_value", "train"):
        lengths[split], values[split] = [], []
        for row in built["counting"][split]:
            steps, value, printed = _counting(row["text"])
            assert _answers(row) == [value] == [printed] and 0 <= int(value) <= 10
            lengths[split].append(steps)
            values[split].append(int(value))
    in_distribution = lengths["test"] + lengths["train"] + lengths["test_ood_value"]
    assert max(in_distribution) <= 16 and min(in_distribution) >= 3
    assert 17 <= min(lengths["test_ood"]) and max(lengths["test_ood"]) <= 32  # longer programs, never seen
    # one shift per split: the length split has the in-distribution test's answers, value for value ...
    assert sorted(values["test_ood"]) == sorted(values["test"])
    # ... and the value split the in-distribution lengths with counts of 7 or more only
    assert min(values["test_ood_value"]) >= 7 and sum(v >= 7 for v in values["test"]) < len(values["test"]) / 4


def test_counting_at_the_default_size_keeps_the_answer_mix_out_of_distribution():
    """At the study's size (200 per test split) the length split draws exactly the in-distribution answers,
    where longer programs left alone would have 22% of answers at 7 or more."""
    dd = build_task("counting", train=10, validation=2, test=200, seed=0)
    counts = {s: collections.Counter(int(_counting(t)[1]) for t in dd[s]["text"]) for s in dd}
    assert counts["test_ood"] == counts["test"] and sum(v for k, v in counts["test"].items() if k >= 7) <= 12
    assert set(counts["test_ood_value"]) <= {7, 8, 9, 10} and sum(counts["test_ood_value"].values()) == 200


@pytest.mark.parametrize("name", TASKS)
def test_a_train_seed_draws_new_training_data_and_keeps_the_test_splits(built, name):
    task = get_task(name)
    one, two = (build_task(name, seed=0, train_seed=k, **SMALL) for k in (1, 2))
    for s in task.test_splits:
        assert one[s]["text"] == two[s]["text"] == built[name][s]["text"]
    assert one["train"]["text"] != two["train"]["text"] != built[name]["train"]["text"]
    tests = {t for s in task.test_splits for t in built[name][s]["text"]}
    assert not tests & (set(one["train"]["text"]) | set(one["validation"]["text"]))  # never a test text


def test_passkey_answers_and_filler_lengths(built):
    for split, m in (("test", 1), ("test_2x", 2), ("test_4x", 4), ("train", 1)):
        for row in built["passkey"][split]:
            key = _passkey(row["text"])
            assert _answers(row) == [key] and row["answer_spans"] == [[len(row["text"]) - 5, len(row["text"])]]
            assert m * 256 - 22 <= len(row["text"]) <= m * 256
            filler = row["text"].replace(f"The pass key is {key}. Remember it. {key} is the pass key.", "")
            assert len(filler) > m * 256 - 130  # the longer splits are longer by their filler


# -- exact-match scoring ----------------------------------------------------------------------------
class _Oracle(torch.nn.Module):
    """Logits that put all mass on the true next token (the gold text is the input), except where the
    next token is one of ``wrong`` (byte ids), where the mass goes to the token after it."""

    def __init__(self, wrong=()):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.wrong = torch.tensor(sorted(wrong), dtype=torch.long)

    def forward(self, input_ids, attention_mask=None):
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], 1)
        nxt = torch.where(torch.isin(nxt, self.wrong), nxt + 1, nxt)
        logits = torch.full((*input_ids.shape, 260), -10.0).scatter_(-1, nxt.unsqueeze(-1), 10.0)
        return type("Out", (), {"logits": logits})()


class FakeMaskedLM(_Oracle):
    pass


@pytest.mark.parametrize("name", ["flip_flop", "counting"])
def test_exact_match_is_one_for_an_oracle_and_drops_exactly_where_it_is_perturbed(built, tok, name):
    split = built[name]["test"]
    perfect = exact_match(_Oracle(), split, tok, batch_size=6, n_resamples=200)
    assert perfect.exact.all() and perfect.metrics["exact_match"] == 1.0 and perfect.metrics["token_accuracy"] == 1.0
    assert perfect.metrics["exact_match_ci"] == (1.0, 1.0)
    one = ord("1") + 3  # the perturbed oracle gets every answer character "1" wrong
    hurt = exact_match(_Oracle(wrong=[one]), split, tok, batch_size=6, n_resamples=200)
    answers = ["".join(_answers(r)) for r in split]
    want_exact = np.array(["1" not in a for a in answers])
    assert (hurt.exact == want_exact).all() and 0 < hurt.metrics["exact_match"] < 1
    chars = "".join(answers)
    assert hurt.metrics["token_accuracy"] == pytest.approx(1 - chars.count("1") / len(chars))
    lo, hi = hurt.metrics["exact_match_ci"]
    assert lo <= hurt.metrics["exact_match"] <= hi and hi - lo > 0
    with pytest.raises(ValueError, match="causal language model"):
        exact_match(FakeMaskedLM(), split, tok)


def test_padding_does_not_change_a_real_models_scores(built, tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=256, vocab_size=259)).eval()
    split = built["counting"]["test_ood"]  # programs of different lengths: batches are right-padded
    alone = exact_match(model, split, tok, batch_size=1, n_resamples=10)
    padded = exact_match(model, split, tok, batch_size=8, n_resamples=10)
    assert (alone.correct == padded.correct).all() and (alone.count == padded.count).all()


def test_intervals_over_examples_and_seeds():
    rng = np.random.default_rng(0)
    same = np.tile(rng.random(50) < 0.7, (3, 1)).astype(float)  # three seeds, identical scores
    out = accuracy_intervals(same, n_resamples=300)
    assert out["mean"] == pytest.approx(same[0].mean()) and out["ci_seeds"] == pytest.approx((out["mean"],) * 2)
    assert out["ci_examples"][0] < out["mean"] < out["ci_examples"][1]
    # three seeds that all agree bound nothing: the exact sign-flip bound, the whole range (docs/evaluation.md)
    assert out["method"].startswith("exact sign-flip bound over 3 seeds") and out["ci"] == (0.0, 1.0)
    one = accuracy_intervals(same[:1], n_resamples=300)
    # one seed: no seed spread to estimate; the normal interval of the example bootstrap, said in ``method``
    assert one["ci_seeds"] is None and one["method"].startswith("one seed")
    assert one["ci"] == pytest.approx(one["ci_examples"], abs=0.03)
    differ = accuracy_intervals(np.stack([np.ones(50), np.zeros(50)]), n_resamples=300)
    assert differ["mean"] == 0.5 and differ["ci_seeds"] == (0.0, 1.0)
    assert differ["ci"] == (0.0, 1.0), "two seeds at 0 and 1: t on 1 degree of freedom, cut to [0, 1]"
    assert differ["ci_examples"] == pytest.approx((0.5, 0.5))  # every example: one seed right, one wrong
    d = paired_difference(same, np.ones((2, 50)), n_resamples=300)
    # 3 + 2 seeds, each model's all alike: only the observed one of the C(5, 3) = 10 relabellings is as extreme
    assert d["difference"] == pytest.approx(1 - same.mean()) and d["ci"] == (-1.0, 1.0)
    assert d["zero_spread"] and d["p_value"] == pytest.approx(0.1)
