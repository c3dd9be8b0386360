"""experiments/nets/lrn.py: torch's local response normalization to the last bit, forward and
backward, and one normalization per block of channels."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from experiments.nets.lrn import LocalResponseNorm


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])  # fmt: skip
@pytest.mark.parametrize("size", [5, 4, 1])
def test_equals_torchs_layer_bit_for_bit(memory_format, size):
    torch.manual_seed(0)
    x = (3 * torch.randn(4, 11, 5, 5)).contiguous(memory_format=memory_format).requires_grad_()
    g = torch.randn(4, 11, 5, 5)
    ref, ours = nn.LocalResponseNorm(size, 1e-2, 0.75, 1.0), LocalResponseNorm(size, 1e-2, 0.75, 1.0)  # fmt: skip
    want, got = ref(x), ours(x)
    assert torch.equal(got, want)
    assert torch.equal(*(torch.autograd.grad(out, x, g)[0] for out in (got, want)))


def test_copies_normalize_each_block_alone():
    x = torch.randn(2, 12, 3, 3, dtype=torch.float64)
    got = LocalResponseNorm(5, alpha=1.0, copies=3)(x)
    want = torch.cat([F.local_response_norm(b, 5, alpha=1.0) for b in x.chunk(3, 1)], 1)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert "copies=3" in repr(LocalResponseNorm(5, copies=3))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="copies=2 does not divide 5 channels"):
        LocalResponseNorm(3, copies=2)(torch.randn(1, 5, 2, 2))
    with pytest.raises(ValueError, match=r"expected \(N, C, H, W\)"):
        LocalResponseNorm(3)(torch.randn(1, 5, 2))
    with pytest.raises(ValueError, match="copies=0"):
        LocalResponseNorm(3, copies=0)
