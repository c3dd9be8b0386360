"""One seed per random stream. A run's seed seeds its initialization; every other seeded stream
of the run (its training batches, population batches, fixed evaluation batches, augmentations,
...) gets ``derive_seed(seed, stream, *ids)``, and a stream that is the same in every run (a
control sample, a fixed subset of the data) gets ``fixed_seed(stream, *ids)``. So two streams do
not coincide by arithmetic (``seed + 1`` would be the next seed's training stream,
``seed * 1_000_003 + epoch`` seed 0's initialization at epoch 0). Two 32-bit seeds coincide by
chance once in about 4e9 pairs. torch's CPU generator keeps only the low 32 bits of its seed (a
GPU's keeps all 64), so a stream of very many seeds on the CPU (one per image, or per step of a
long run) repeats about n²/2³³ of its n seeds by chance: those images or steps draw the same
numbers. ``bits=63`` widens a seed for the generators that use it.
A training that draws from torch's global generator (a noisy layer, dropout) reseeds it once the
network is built, with ``derive_seed(seed, "noise")`` or ``derive_seed(seed, "dropout", rank)``:
seeded with the run's seed it would draw the numbers that initialized the network, or continue
that stream."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, stream: str, *ids: int, bits: int = 32) -> int:
    """A ``bits``-bit seed (at most 64) for the random stream named ``stream`` of the run seeded
    ``seed`` (and of ``ids``: a rank, an epoch, a step), from SHA-256: the same arguments give the
    same seed, other arguments a seed that no arithmetic on small seeds reaches.

    Example::

        >>> derive_seed(0, "population") == derive_seed(0, "population")
        True
        >>> derive_seed(0, "population") != derive_seed(1, "population") != derive_seed(0, "train")
        True
    """
    if "/" in stream:
        raise ValueError(f"stream {stream!r} must not contain '/' (it joins the key's parts)")
    if not 1 <= bits <= 64:
        raise ValueError(f"bits={bits} must be between 1 and 64")
    key = "/".join(map(str, (seed, stream, *ids))).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & ((1 << bits) - 1)


def fixed_seed(stream: str, *ids: int) -> int:
    """A 32-bit seed for the stream named ``stream`` (and ``ids``) that is the same in every run
    whatever its seed: :func:`derive_seed` of seed -1, which no run has (seeds are >= 0)."""
    return derive_seed(-1, stream, *ids)
