"""experiments.kit.sampling: the samplers address every minibatch by its step (exact resume), the
pairs of non-i.i.d. minibatches, the shards of the ImageNet-style reader."""

import pytest
import torch

from experiments.kit.sampling import IIDBatches, PairBatches, ShardBatches


def _epochs(sampler, epochs):
    per = sampler.per_epoch
    return [[sampler.indices(e * per + k) for k in range(per)] for e in range(epochs)]


def test_shards_without_shuffling_repeat_the_same_minibatches():
    s = ShardBatches(100, 4, seed=0, shard_size=12, within_shard=False)
    e0, e1 = _epochs(s, 2)
    assert sorted(map(tuple, e0)) == sorted(map(tuple, e1))  # the same groups every epoch ...
    assert [b.tolist() for b in e0] != [b.tolist() for b in e1]  # ... met in a new order
    assert sorted(torch.cat(e0).tolist()) == sorted(torch.cat(e1).tolist())
    assert len(torch.cat(e0).unique()) == 96  # 8 whole shards of 12, each example once


def test_within_shard_shuffling_mixes_the_minibatches():
    s = ShardBatches(100, 4, seed=0, shard_size=12, within_shard=True)
    e0, e1 = _epochs(s, 2)
    groups = [{frozenset(b.tolist()) for b in e} for e in (e0, e1)]
    assert len(groups[0] & groups[1]) < 3  # of 24 minibatches, almost none repeats
    assert sorted(torch.cat(e0).tolist()) == sorted(torch.cat(e1).tolist())  # same shards used
    fresh = ShardBatches(100, 4, seed=0, shard_size=12, within_shard=True)
    assert torch.equal(fresh.indices(37), s.indices(37))  # addressed by step: no state


def test_distributed_ranks_read_disjoint_shards():
    ranks = [ShardBatches(100, 4, 0, 12, True, rank=r, world=3) for r in range(3)]
    seen = [set(torch.cat(_epochs(s, 1)[0]).tolist()) for s in ranks]
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    assert all(len(s) == 24 for s in seen)  # 8 shards dealt 2 each, the remainder unused


def test_each_rank_visits_its_shards_in_an_order_of_its_own():
    """The ranks share the cut into shards, not the order of each epoch: with the same order,
    rank 1's k-th shard would always follow rank 0's k-th."""
    ranks = [ShardBatches(96, 4, 0, 12, False, rank=r, world=2) for r in range(2)]
    orders = [
        [[s.shards.tolist().index(x) for x in torch.cat(e).view(-1, 12).tolist()] for e in _epochs(s, 3)]
        for s in ranks
    ]  # fmt: skip
    assert all(sorted(e) == [0, 1, 2, 3] for o in orders for e in o)  # 4 whole shards an epoch
    assert orders[0] != orders[1]


def test_shard_size_must_hold_whole_minibatches():
    with pytest.raises(ValueError, match="must divide shard_size"):
        ShardBatches(100, 8, 0, shard_size=12, within_shard=False)


def test_pair_batches_have_the_pair_structure():
    labels = torch.randint(0, 10, (500,))
    sampler = PairBatches(labels, 32, seed=0)
    for step in range(50):
        idx = sampler.indices(step)
        first, second = idx[:16], idx[16:]
        assert len(idx) == 32
        assert torch.equal(labels[first], labels[second])  # one of each pair in each half
        assert (first != second).all()  # two different examples of the label


@pytest.mark.slow
def test_pair_batches_draw_labels_with_replacement():
    # 100 labels, 16 draws: with replacement about 70% of minibatches repeat a label, without 0%.
    labels = torch.arange(100).repeat_interleave(5)
    sampler = PairBatches(labels, 32, seed=1)
    repeats = [len(set(labels[sampler.indices(s)[:16]].tolist())) < 16 for s in range(300)]
    assert 0.55 < sum(repeats) / len(repeats) < 0.85
    # Each drawn label's members are picked uniformly.
    tiny = PairBatches(torch.zeros(3, dtype=torch.long), 2, seed=0)
    counts = torch.zeros(3)
    for s in range(3000):
        counts[tiny.indices(s)] += 1
    assert (counts / counts.sum() - 1 / 3).abs().max() < 0.03


def test_pair_batches_groups_of_more_than_two():
    labels = torch.randint(0, 10, (400,))
    idx = PairBatches(labels, 32, seed=0, per_label=8).indices(7).view(8, 4)
    assert (labels[idx] == labels[idx[0]]).all()  # slice j holds the j-th member of every group
    assert len(set(idx.flatten().tolist())) == 32


def test_samplers_are_addressed_by_step():
    labels = torch.randint(0, 10, (300,))
    a, b = PairBatches(labels, 32, seed=4), PairBatches(labels, 32, seed=4)
    assert torch.equal(a.indices(9), b.indices(9))
    assert not torch.equal(a.indices(9), PairBatches(labels, 32, seed=5).indices(9))
    iid = IIDBatches(100, 10, seed=0)
    epoch = torch.cat([iid.indices(s) for s in range(10)])
    assert sorted(epoch.tolist()) == list(range(100))  # an epoch is a permutation
    assert not torch.equal(iid.indices(0), iid.indices(10))  # a fresh one each epoch
    assert torch.equal(iid.indices(13), IIDBatches(100, 10, seed=0).indices(13))


@pytest.mark.parametrize("batch,per_label", [(31, 2), (32, 3), (32, 1)])
def test_pair_batches_reject_sizes_that_do_not_split(batch, per_label):
    with pytest.raises(ValueError, match=f"per_label={per_label}"):
        PairBatches(torch.zeros(10, dtype=torch.long), batch, seed=0, per_label=per_label)


# --- schedule and model wiring ---------------------------------------------------------------
