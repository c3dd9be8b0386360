"""experiments.kit.seeds: a seed per random stream, distinct by construction."""

import itertools

import pytest
import torch

from experiments.kit.sampling import IIDBatches
from experiments.kit.seeds import derive_seed, fixed_seed
from experiments.mnist import population_sampler

STREAMS = ("train", "population", "fixed-batch", "test-pairs", "augment")


def test_every_stream_of_every_seed_has_its_own_seed():
    seeds = [derive_seed(s, stream, *ids) for s in range(100) for stream in STREAMS
             for ids in ((), (0,), (1,))]  # fmt: skip
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**32 for s in seeds)
    assert derive_seed(3, "population", 7) == derive_seed(3, "population", 7)  # deterministic
    assert derive_seed(1, "x", 23) != derive_seed(12, "x", 3)  # no ambiguity in the joining


def test_the_population_batches_are_no_seeds_training_batches():
    """Algorithm 2's batches for seed s were ``seed + 1``'s training batches before: the next
    seed's stream in a sweep over seeds."""
    n, batch, steps = 600, 60, 100
    for s, t in itertools.product(range(5), range(10)):
        population = population_sampler(n, batch, s)
        training = IIDBatches(n, batch, seed=t)
        assert not any(
            torch.equal(population.indices(k), training.indices(k)) for k in range(steps)
        ), (s, t)


def test_a_fixed_stream_is_no_runs_stream():
    assert fixed_seed("control") == fixed_seed("control") != fixed_seed("control", 1)
    assert fixed_seed("control") not in {derive_seed(s, "control") for s in range(1000)}


def test_wider_seeds_for_streams_of_very_many_seeds():
    """The 32-bit seed is the low half of the 64-bit one, so widening a stream keeps the others."""
    wide = derive_seed(5, "item", 3, 9, bits=63)
    assert wide >= 2**32 and wide < 2**63  # this one uses its upper bits
    assert wide % 2**32 == derive_seed(5, "item", 3, 9)


@pytest.mark.parametrize(
    "stream, bits, message",
    [("a/b", 32, "must not contain '/'"), ("item", 0, "bits=0 must be"), ("item", 65, "bits=65")],
)
def test_ambiguous_names_and_widths_are_refused(stream, bits, message):
    with pytest.raises(ValueError, match=message):
        derive_seed(0, stream, bits=bits)


def test_the_cpu_generator_keeps_only_the_low_32_bits_of_a_seed():
    """What seeds.py says of wide seeds on the CPU: the upper bits draw nothing of their own."""
    wide = derive_seed(5, "item", 3, 9, bits=63)
    a = torch.rand(8, generator=torch.Generator().manual_seed(wide))
    b = torch.rand(8, generator=torch.Generator().manual_seed(wide % 2**32))
    assert torch.equal(a, b)
