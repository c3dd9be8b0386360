"""One seed per random stream. A study's streams (its training batches, population batches,
fixed evaluation batches, augmentations, ...) each get ``derive_seed(seed, stream, *ids)``, so two
streams never coincide by arithmetic (``seed + 1`` would be the next seed's training stream)."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, stream: str, *ids: int) -> int:
    """A 32-bit seed for the random stream named ``stream`` of the run seeded ``seed`` (and of
    ``ids``: a rank, an epoch, a step), from SHA-256: the same arguments give the same seed, other
    arguments a seed that no arithmetic on small seeds reaches.

    Example::

        >>> derive_seed(0, "population") == derive_seed(0, "population")
        True
        >>> derive_seed(0, "population") != derive_seed(1, "population") != derive_seed(0, "train")
        True
    """
    key = "/".join(map(str, (seed, stream, *ids))).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "little")
