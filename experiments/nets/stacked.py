"""Several networks side by side in one: seeds trained in lockstep as grouped convolutions.

:func:`stack_copies` turns ``K`` networks of the same architecture (modules of convolutions,
linear layers, norms and parameter-free layers, such as
:class:`~experiments.nets.convnet.SmallConvNet` or
:class:`~experiments.nets.bn_inception.BNInception`) into one of that architecture that computes
all ``K`` at once:

- a convolution becomes a grouped one (``groups = K·groups``) over ``K·C`` channels: copy ``k``
  reads and writes channels ``k·C .. (k+1)·C − 1``;
- a linear layer becomes a :class:`GroupedLinear` (``K`` independent maps, one batched product);
  a weight-normalized one (:class:`bn.WeightNormConv2d`, :class:`bn.WeightNormLinear`) keeps its
  ``g`` and ``v`` per output unit, so each copy's weights are normalized on their own;
- a norm layer keeps its class and every option (microbatches, Batch Renorm's bounds and
  ablations, momentum, ε) over ``K·C`` channels; a norm statistic is per channel (and per
  microbatch), so each copy's channels are normalized over its own examples. A group or layer
  norm gets ``K`` times the groups, so no group spans two copies; a local response norm
  (:class:`~experiments.nets.lrn.LocalResponseNorm`) gets ``copies=K``, so no window does;
- dropout draws one mask over all ``K·C`` features, so each copy's mask is its own draw;
- a module that concatenates channels in its own ``forward`` (BN-Inception's modules) declares
  a ``copies`` attribute, set to ``K`` in the stack, and concatenates with :func:`cat_per_copy`,
  so each copy's channels stay one block.

The input is ``(N, K·C_in, H, W)``: example ``n`` of copy ``k`` in channels ``k·C_in ..``, so each
copy reads its own batch; the output is ``(N, K·classes)``. Nothing is shared between copies:
training the stack on the sum of the copies' losses gives each copy the gradient of its own
loss, and an element-wise optimizer (SGD with momentum and weight decay, RMSprop) then takes each
copy's own step. ``tests/experiments/nets/test_stacked.py`` holds ``K`` stacked copies equal to
``K`` separate networks in float64, for every norm the conv-net studies train, and
``tests/experiments/nets/test_stacked_inception.py`` for BN-Inception's variants. Stacking shares
the per-operation cost of these small layers between the copies (``python -m
scripts.bench_studies``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import bn
from bn.weight_norm import WeightNormed
from experiments.nets.lrn import LocalResponseNorm

# Layers without state that act on each channel (or each value) alone: the same in the stack.
# Dropout is one: its mask is drawn value by value.
_CHANNELWISE = (nn.ReLU, nn.Sigmoid, nn.AdaptiveAvgPool2d, nn.AvgPool2d, nn.MaxPool2d, nn.Flatten, nn.Identity, nn.Dropout)  # fmt: skip


class GroupedLinear(nn.Module):
    """``copies`` independent linear maps ``x_k W_kᵀ + b_k`` on ``(N, copies·in_features)``.

    ``weight`` is ``(copies, out_features, in_features)``, ``bias`` ``(copies, out_features)``;
    the output is ``(N, copies·out_features)``, copy ``k``'s features in block ``k``.
    """

    def __init__(self, copies: int, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.copies, self.in_features, self.out_features = copies, in_features, out_features
        self.weight = nn.Parameter(torch.empty(copies, out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(copies, out_features)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[0]
        u = x.reshape(n, self.copies, self.in_features).transpose(0, 1)  # (K, N, in)
        y = torch.bmm(u, self.weight.transpose(1, 2))  # (K, N, out)
        if self.bias is not None:
            y = y + self.bias[:, None]
        return y.transpose(0, 1).reshape(n, self.copies * self.out_features)

    def extra_repr(self) -> str:
        return (
            f"copies={self.copies}, in_features={self.in_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )


class WeightNormGroupedLinear(WeightNormed, GroupedLinear):
    """A :class:`GroupedLinear` of ``copies`` weight-normalized linear maps
    (:class:`bn.WeightNormLinear`): ``weight_v`` is ``(copies, out_features, in_features)``,
    ``weight_g`` ``(copies, out_features, 1)``, each row of each copy normalized on its own
    (and initialized from data on its own by :func:`bn.data_dependent_init_`)."""

    def __init__(self, copies: int, in_features: int, out_features: int, bias: bool = True):
        super().__init__(copies, in_features, out_features, bias)
        self._reparametrize(dims=[2])

    @property
    def weight(self) -> Tensor:
        return self.weight_v * (self.weight_g / self.weight_v.norm(dim=2, keepdim=True))

    def forward(self, x: Tensor) -> Tensor:
        if not self._init_pending:
            return super().forward(x)
        n = x.shape[0]
        u = x.reshape(n, self.copies, self.in_features).transpose(0, 1)
        direction = self.weight_v / self.weight_v.norm(dim=2, keepdim=True)  # g = 1, no bias
        y = torch.bmm(u, direction.transpose(1, 2)).transpose(0, 1).reshape(n, -1)
        return self._initialized(y)


def stack_copies(nets: Sequence[nn.Module]) -> nn.Module:
    """One network computing every network of ``nets`` side by side (see the module); copy ``k``
    starts with ``nets[k]``'s parameters and buffers. The stack is a copy of ``nets[0]`` (its
    class, so its ``forward``) with every layer replaced by the copies' layers stacked. ``nets``
    must share their architecture and options; a layer the stack cannot split by copy raises
    ``ValueError``."""
    if not nets:
        raise ValueError("stack_copies: no networks to stack")
    names = [_layer_names(net) for net in nets]
    if any(n != names[0] for n in names):
        raise ValueError("stack_copies: the networks have different layers")
    stack = copy.deepcopy(nets[0])
    for name in names[0]:
        parent, _, attr = name.rpartition(".")
        layer = _stack_layer([net.get_submodule(name) for net in nets])
        setattr(stack.get_submodule(parent), attr, layer)
    for module in stack.modules():
        if hasattr(module, "copies"):  # its own layers' and its forward's number of copies
            module.copies = len(nets)
    return stack


def copy_views(stack: nn.Module, nets: Sequence[nn.Module]) -> list[nn.Module]:
    """``nets`` (the networks :func:`stack_copies` was given, or any of their architecture) with
    each parameter and buffer replaced by a view of copy ``k``'s block of ``stack``'s; returns
    ``nets``. Network ``k`` then computes copy ``k`` of the stack as a plain network: for
    evaluation, where the stack's grouped layers cost more than ``K`` plain passes over the same
    images. The views follow the stack while its tensors change in place (optimizer steps,
    ``load_state_dict``); they carry no gradient."""
    copies = len(nets)
    for k, net in enumerate(nets):
        pairs = zip(net.named_modules(), stack.named_modules(), strict=True)
        for (name, layer), (stacked_name, stacked) in pairs:
            if name != stacked_name:
                raise ValueError(f"copy_views: {name} of a network is not the stack's {stacked_name}")  # fmt: skip
            for key, tensor in stacked.named_parameters(recurse=False):
                view = _block(stacked, tensor.detach(), k, copies)
                layer._parameters[key] = nn.Parameter(view, requires_grad=False)
            for key, tensor in stacked.named_buffers(recurse=False):
                layer._buffers[key] = _block(stacked, tensor, k, copies)
    return list(nets)


def cat_per_copy(xs: Sequence[Tensor], copies: int) -> Tensor:
    """``torch.cat(xs, 1)`` of ``copies`` networks stacked side by side: each ``(N, copies·C_i,
    H, W)`` (copy ``k`` in block ``k`` of its ``C_i`` channels) → ``(N, copies·ΣC_i, H, W)``, copy
    ``k``'s channels of every ``x`` together in block ``k``, in the order of ``xs``. Channels-last
    inputs give a channels-last output without a copy of the layout."""
    if copies == 1:
        return torch.cat(list(xs), 1)
    n, _, h, w = xs[0].shape
    if all(x.stride(1) == 1 for x in xs):  # channels last: (N, H, W, K, C_i) views
        parts = [x.permute(0, 2, 3, 1).reshape(n, h, w, copies, -1) for x in xs]
        return torch.cat(parts, 4).reshape(n, h, w, -1).permute(0, 3, 1, 2)
    return torch.cat([x.reshape(n, copies, -1, h, w) for x in xs], 2).reshape(n, -1, h, w)


def split_per_copy(x: Tensor, sizes: Sequence[int], copies: int) -> list[Tensor]:
    """The inverse of :func:`cat_per_copy`: ``(N, copies·Σsizes, H, W)``, copy ``k``'s channels
    in block ``k`` → one ``(N, copies·sizes[i], H, W)`` per size, copy ``k`` in block ``k`` of
    each. One copy: views of ``x``; several: channels-last ``x`` gives channels-last parts."""
    if copies == 1:
        return list(x.split(list(sizes), 1))
    n, _, h, w = x.shape
    if x.stride(1) == 1:  # channels last: (N, H, W, K, Σsizes)
        parts = x.permute(0, 2, 3, 1).reshape(n, h, w, copies, -1).split(list(sizes), 4)
        last = torch.channels_last
        return [p.reshape(n, h, w, -1).permute(0, 3, 1, 2).contiguous(memory_format=last) for p in parts]  # fmt: skip
    parts = x.reshape(n, copies, -1, h, w).split(list(sizes), 2)
    return [p.reshape(n, -1, h, w).contiguous() for p in parts]


def _layer_names(net: nn.Module) -> list[str]:
    """The names of ``net``'s layers: its modules without modules of their own."""
    return [name for name, m in net.named_modules() if not any(True for _ in m.children())]


def _block(layer: nn.Module, tensor: Tensor, k: int, copies: int) -> Tensor:
    """Copy ``k``'s block of one of a stacked layer's tensors (a view)."""
    if isinstance(layer, GroupedLinear):
        return tensor[k]
    if tensor.dim() == 0:  # a step counter: the copies share it
        return tensor
    return tensor.chunk(copies)[k]


def split_copies(logits: Tensor, copies: int) -> Tensor:
    """``(N, copies·classes)`` → ``(N, copies, classes)``."""
    return logits.view(logits.shape[0], copies, -1)


def copy_losses(logits: Tensor, y: Tensor) -> Tensor:
    """Each copy's mean cross-entropy, ``(copies,)``, from ``(N, copies·classes)`` logits and
    ``(N, copies)`` labels."""
    per_example = F.cross_entropy(split_copies(logits, y.shape[1]).transpose(1, 2), y, reduction="none")  # fmt: skip
    return per_example.mean(0)


def _stack_layer(layers: list[nn.Module]) -> nn.Module:
    first, k = layers[0], len(layers)
    if any(type(m) is not type(first) for m in layers):
        raise ValueError(f"stack_copies: layers of different types: {[type(m).__name__ for m in layers]}")  # fmt: skip
    if isinstance(first, bn.WeightNormConv2d):
        return _stack_conv(layers, ("weight_v", "weight_g", "bias"))
    if isinstance(first, bn.WeightNormLinear):
        out = WeightNormGroupedLinear(k, first.in_features, first.out_features, first.bias is not None)  # fmt: skip
        with torch.no_grad():
            for name in ("weight_v", "weight_g", "bias"):
                if getattr(out, name) is not None:
                    getattr(out, name).copy_(torch.stack([getattr(m, name) for m in layers]))
        return out.to(first.weight_v.dtype)
    if isinstance(first, nn.Conv2d):
        return _stack_conv(layers)
    if isinstance(first, nn.Linear):
        out = GroupedLinear(k, first.in_features, first.out_features, first.bias is not None)
        with torch.no_grad():
            out.weight.copy_(torch.stack([m.weight for m in layers]))
            if out.bias is not None:
                out.bias.copy_(torch.stack([m.bias for m in layers]))
        return out.to(first.weight.dtype)
    if isinstance(first, (nn.modules.batchnorm._NormBase, nn.GroupNorm)):
        return concat_norms(layers)
    if isinstance(first, nn.LocalResponseNorm):
        if any(getattr(m, "copies", 1) != 1 for m in layers):
            raise ValueError("stack_copies: a LocalResponseNorm already of several copies")
        return LocalResponseNorm(first.size, first.alpha, first.beta, first.k, copies=k)
    if isinstance(first, _CHANNELWISE):
        return copy.deepcopy(first)
    raise ValueError(f"stack_copies: cannot split {type(first).__name__} by copy")


def _stack_conv(layers: list[nn.Conv2d], names: tuple[str, ...] = ("weight", "bias")) -> nn.Conv2d:
    """The copies' convolutions as one grouped convolution of their class (a weight-normalized
    one's ``g`` and ``v``: ``names``, each per output channel, so the copies' concatenated)."""
    first, k = layers[0], len(layers)
    if first.padding_mode != "zeros":
        raise ValueError("stack_copies: a convolution with padding_mode other than zeros")
    return _conv_of(layers, k * first.in_channels, k * first.groups, names)


def concat_convs(convs: Sequence[nn.Conv2d]) -> nn.Conv2d:
    """One convolution computing ``convs`` side by side on their common input: their output
    channels concatenated in order, each computed from the same weights (and bias) as before.
    They must share their class, input channels, kernel, stride, padding and dilation, have
    ``groups=1`` and zero padding, and all have a bias or none; else ``ValueError``."""
    first = convs[0]
    keys = ("in_channels", "kernel_size", "stride", "padding", "dilation", "groups", "padding_mode")
    if any(
        type(c) is not type(first)
        or any(getattr(c, key) != getattr(first, key) for key in keys)
        or (c.bias is None) != (first.bias is None)
        for c in convs
    ):
        raise ValueError("concat_convs: the convolutions differ in more than their output channels")
    if first.groups != 1 or first.padding_mode != "zeros" or isinstance(first, bn.WeightNormConv2d):
        raise ValueError("concat_convs: only plain convolutions with groups=1 and zero padding")
    return _conv_of(convs, first.in_channels, first.groups, ("weight", "bias"))


def _conv_of(layers, in_channels: int, groups: int, names: tuple[str, ...]) -> nn.Conv2d:
    """A convolution of ``layers[0]``'s class and geometry on ``in_channels`` in ``groups``
    groups, with the layers' output channels: each tensor in ``names`` the layers' concatenated."""
    first = layers[0]
    out = type(first)(
        in_channels, sum(m.out_channels for m in layers), first.kernel_size, first.stride,
        first.padding, first.dilation, groups, first.bias is not None,
        dtype=getattr(first, names[0]).dtype,
    )  # fmt: skip
    with torch.no_grad():
        for name in names:
            if getattr(out, name) is not None:
                getattr(out, name).copy_(torch.cat([getattr(m, name) for m in layers]))
                getattr(out, name).requires_grad_(getattr(first, name).requires_grad)
    return out


def concat_norms(layers: Sequence[nn.Module]) -> nn.Module:
    """One norm layer over the channels of ``layers`` side by side: ``layers[0]``'s class and
    options, every per-channel tensor (``γ``, ``β``, running statistics) the layers'
    concatenated. It normalizes each channel as its own layer did: the copies of a stack
    (:func:`stack_copies`), or parallel branches reading one input
    (:meth:`~experiments.nets.bn_inception.InceptionModule.fuse_reductions`). Every batch norm
    (of :mod:`bn` or torch) keeps its statistics per channel (and per microbatch); a group norm
    gets the layers' groups, so all must be of one size (no group then spans two layers).
    Another norm raises ``ValueError``."""
    first = layers[0]
    if any(type(m) is not type(first) for m in layers):
        raise ValueError(f"concat_norms: layers of different types: {[type(m).__name__ for m in layers]}")  # fmt: skip
    if isinstance(first, nn.Identity):
        return nn.Identity()
    out = copy.deepcopy(first)
    if isinstance(first, nn.GroupNorm):
        if len({m.num_channels // m.num_groups for m in layers}) > 1:
            raise ValueError("concat_norms: group norms whose groups differ in size")
        out.num_groups = sum(m.num_groups for m in layers)
        out.num_channels = sum(m.num_channels for m in layers)
    elif isinstance(first, nn.modules.batchnorm._NormBase):
        out.num_features = sum(m.num_features for m in layers)
    else:
        raise ValueError(f"concat_norms: cannot join {type(first).__name__} layers channel-wise")
    with torch.no_grad():
        for name, tensor in list(first.named_parameters(recurse=False)):
            joined = torch.cat([getattr(m, name) for m in layers])
            setattr(out, name, nn.Parameter(joined, requires_grad=tensor.requires_grad))
        for name, tensor in list(first.named_buffers(recurse=False)):
            if tensor is None:
                continue
            values = [getattr(m, name) for m in layers]
            if tensor.dim() == 0:  # a step counter: the layers are in lockstep
                if any(not torch.equal(v, tensor) for v in values):
                    raise ValueError(f"concat_norms: the layers' {name} differ")
                continue
            out.register_buffer(name, torch.cat(values))
    return out
