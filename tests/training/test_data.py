"""The data order is a function of (seed, micro-batch index, rank, world size): resumable exactly."""

from __future__ import annotations

import itertools

import torch

from hf_trajpe.training.data import batch_indices, iterate_batches, mask_tokens


def take(it, n):
    return list(itertools.islice(it, n))


def test_resumed_iteration_equals_the_uninterrupted_one_across_epochs():
    train = torch.arange(50 * 3).view(50, 3)
    full = take(iterate_batches(train, 4, 0, 1, seed=5), 30)  # 12 batches per epoch: crosses two epochs
    for start in (0, 7, 12, 25):
        resumed = take(iterate_batches(train, 4, 0, 1, seed=5, start=start), 30 - start)
        assert [k for k, _ in resumed] == list(range(start, 30))
        assert all(torch.equal(a[1], b[1]) for a, b in zip(full[start:], resumed, strict=True))
    assert not torch.equal(full[0][1], take(iterate_batches(train, 4, 0, 1, seed=6), 1)[0][1])


def expected_blocks(k: int, n: int, b: int, rank: int, world: int, seed: int) -> list[int]:
    """The documented order, written out here: epoch e is torch.randperm(n) drawn from a generator seeded
    with seed + e; micro-batch j of process r holds perm[(j*W + r)*B : (j*W + r + 1)*B]."""
    per = n // (b * world)
    epoch, j = divmod(k, per)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    return perm[(j * world + rank) * b:(j * world + rank + 1) * b]


def test_ranks_get_disjoint_blocks_within_an_epoch_in_the_documented_order():
    n, b, world, seed = 40, 3, 2, 7
    per = n // (b * world)  # 6 micro-batches per epoch; 2 blocks per epoch are left out
    train = torch.arange(n)[:, None] * 10  # block i is the row [10 * i]
    for rank in range(world):
        got = take(iterate_batches(train, b, rank, world, seed), 2 * per + 1)  # into a third epoch
        for k, blocks in got:
            want = expected_blocks(k, n, b, rank, world, seed)
            assert batch_indices(k, n, b, rank, world, seed).tolist() == want, f"rank {rank}, micro-batch {k}"
            assert (blocks[:, 0] // 10).tolist() == want, f"rank {rank}, micro-batch {k}"
    seen = [[i for k in range(per) for i in expected_blocks(k, n, b, r, world, seed)] for r in range(world)]
    assert not set(seen[0]) & set(seen[1]) and len(set(seen[0] + seen[1])) == per * b * world
    # every epoch is a new permutation, and the seed changes it
    first = [batch_indices(k, n, b, 0, world, seed).tolist() for k in range(per)]
    second = [batch_indices(per + k, n, b, 0, world, seed).tolist() for k in range(per)]
    assert first != second
    assert first != [batch_indices(k, n, b, 0, world, seed + 1).tolist() for k in range(per)]


def test_mlm_masking_is_deterministic_and_skips_special_tokens():
    class Tok:
        all_special_ids = [0, 1, 2]
        mask_token_id = 3

        def __len__(self):
            return 100

    ids = torch.randint(4, 100, (4, 32))
    ids[:, 0], ids[:, -1] = 1, 2
    a, la = mask_tokens(ids, Tok(), 0.3, seed=11)
    b, lb = mask_tokens(ids, Tok(), 0.3, seed=11)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert not torch.equal(la, mask_tokens(ids, Tok(), 0.3, seed=12)[1])
    chosen = la != -100
    assert chosen.any() and not chosen[:, 0].any() and not chosen[:, -1].any()
    assert torch.equal(la[chosen], ids[chosen]) and torch.equal(a[~chosen], ids[~chosen])
    assert (a[chosen] == 3).float().mean() > 0.5


def test_random_order_is_the_study_sampler_and_resumes_exactly():
    train = torch.arange(40 * 3).view(40, 3)
    gen = torch.Generator().manual_seed(4)  # the study's sampler before it trained through hf_trajpe.training
    before = [train[torch.randint(0, 40, (5,), generator=gen)] for _ in range(12)]
    full = take(iterate_batches(train, 5, 0, 1, seed=4, order="random"), 12)
    assert [k for k, _ in full] == list(range(12))
    assert all(torch.equal(a, b) for a, (_, b) in zip(before, full, strict=True))
    resumed = take(iterate_batches(train, 5, 0, 1, seed=4, start=7, order="random"), 5)
    assert all(torch.equal(a[1], b[1]) for a, b in zip(full[7:], resumed, strict=True))
    ranks = [take(iterate_batches(train, 5, r, 2, seed=4, order="random"), 3) for r in (0, 1)]
    for (_, a), (_, b) in zip(*ranks, strict=True):  # one draw of 10 per micro-batch, split between ranks
        assert a.shape == b.shape == (5, 3) and not torch.equal(a, b)


def test_balance_takes_the_same_number_of_blocks_from_every_type():
    from hf_trajpe.data import load_tokenizer
    from hf_trajpe.training import DataConfig, build_run_data

    types = ["code_hierarchy", "random_content"]
    cfg = DataConfig(content_types=types, train=4, validation=0, test=0, block_size=32)
    tok = load_tokenizer("byte")
    full = build_run_data(cfg, tok, "clm").train
    balanced = build_run_data(DataConfig(**{**vars(cfg), "balance": True}), tok, "clm").train
    assert len(balanced) < len(full) and len(balanced) % 2 == 0
    half = len(balanced) // 2
    assert torch.equal(balanced[:half], full[:half])  # the first type's first blocks, then the second's


def test_rows_with_a_loss_mask_train_on_the_masked_tokens_only():
    """The trainer takes the labels from the rows' loss mask (-100 elsewhere); the batches are those of the ids."""
    import pytest

    from hf_trajpe.training import RunData, iterate_batches, iterate_rows

    ids = torch.arange(40).view(10, 4)
    mask = ids % 3 == 0
    data = RunData(ids, {}, ["t"], mask)
    plain = iterate_batches(ids, 2, 0, 1, seed=5, order="random")
    for (k, rows, m), (k2, want) in zip(iterate_rows(data, 2, 0, 1, seed=5, order="random"), plain, strict=False):
        assert k == k2 and torch.equal(rows, want) and torch.equal(m, want % 3 == 0)
        if k == 5:
            break
    with pytest.raises(ValueError, match="loss_mask must be a bool tensor"):
        RunData(ids, {}, ["t"], mask.long())
