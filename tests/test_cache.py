import pytest
import torch

from hf_trajpe import DisplacementCache, TrajectoryMonitor, embedding_version, trajectory_positions


def _batch(emb_table, ids, mask=None):
    return emb_table[ids], mask


def test_cache_never_changes_results_and_counts_hits():
    table = torch.randn(50, 8)
    ids = torch.randint(0, 50, (4, 12))
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[2, :4] = 0
    cache = DisplacementCache(max_entries=100)
    monitor = TrajectoryMonitor()
    with torch.no_grad():
        direct = trajectory_positions(table[ids], mask, strength=0.3)
        first = cache.positions(ids, table[ids], mask, strength=0.3, monitor=monitor)
        second = cache.positions(ids, table[ids], mask, strength=0.3, monitor=monitor)
    assert torch.equal(first, direct) and torch.equal(second, direct)
    assert cache.hits == 4 and cache.lookups == 8 and cache.hit_rate == 0.5
    assert monitor.as_dict()["cache_hit_rate"] == 0.5


def test_padding_does_not_split_entries():
    table = torch.randn(20, 4)
    ids = torch.tensor([[3, 4, 5, 6]])
    cache = DisplacementCache()
    with torch.no_grad():
        alone = cache.positions(ids, table[ids])
        padded_ids = torch.tensor([[0, 0, 3, 4, 5, 6]])
        padded = cache.positions(padded_ids, table[padded_ids], torch.tensor([[0, 0, 1, 1, 1, 1]]))
    assert cache.hits == 1
    assert torch.equal(padded[0, 2:], alone[0]) and torch.equal(padded[0, :2], torch.zeros(2))


def test_key_includes_strength_and_weight_version():
    weight = torch.nn.Parameter(torch.randn(20, 4))
    ids = torch.tensor([[1, 2, 3]])
    cache = DisplacementCache()
    with torch.no_grad():
        a = cache.positions(ids, weight[ids], strength=0.2, version=embedding_version(weight))
        b = cache.positions(ids, weight[ids], strength=0.5, version=embedding_version(weight))
        assert cache.hits == 0 and not torch.equal(a, b)
        weight.mul_(3.0)  # an optimizer step changes the version
        c = cache.positions(ids, weight[ids], strength=0.2, version=embedding_version(weight))
    assert cache.hits == 0
    assert torch.equal(c, trajectory_positions(weight[ids].detach(), strength=0.2))


def test_bounded_lru():
    table = torch.randn(100, 4)
    cache = DisplacementCache(max_entries=3)
    with torch.no_grad():
        for i in range(5):
            ids = torch.tensor([[i, i + 1, i + 2]])
            cache.positions(ids, table[ids])
    assert len(cache) == 3


def test_lru_evicts_the_least_recently_used_entry_after_a_hit_refreshed_another():
    table = torch.randn(100, 4)
    cache = DisplacementCache(max_entries=3)
    seqs = {name: torch.tensor([[10 * i + 1, 10 * i + 2, 10 * i + 3]]) for i, name in enumerate("ABCD")}

    def hit(name: str) -> bool:
        before = cache.hits
        with torch.no_grad():
            cache.positions(seqs[name], table[seqs[name]])
        return cache.hits == before + 1

    assert not any(hit(n) for n in "ABC")  # A, B, C stored; A is the oldest
    assert hit("A")  # the hit makes A the most recently used: B is now the least
    assert not hit("D") and len(cache) == 3  # D evicts B (not A, the oldest stored)
    assert [hit(n) for n in "ACD"] == [True, True, True]  # these refresh A, then C, then D
    assert not hit("B"), "B, the least recently used entry, must be the one evicted"
    assert not hit("A"), "storing B again evicted A, now the least recently used"
    assert len(cache) == 3


def test_bypassed_when_gradients_must_flow():
    table = torch.randn(10, 4, requires_grad=True)
    ids = torch.tensor([[1, 2, 3]])
    cache = DisplacementCache()
    out = cache.positions(ids, table[ids])
    out.sum().backward()
    assert table.grad is not None and cache.lookups == 0


def test_bad_size():
    with pytest.raises(ValueError, match="max_entries"):
        DisplacementCache(0)
