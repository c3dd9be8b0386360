"""``bn``: Batch Normalization and Batch Renormalization, paper-faithful and drop-in for ``torch.nn``.

Every experiment in this repo imports its normalization layers from here. The algorithms as
functions (Batch Renorm's Algorithm 1 as a reference, the autograd functions behind the layers)
are in :mod:`bn.functional`.
"""

__version__ = "0.2.0"

from . import functional
from ._base import BatchNormBase
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from .batchrenorm import (
    BatchRenorm1d,
    BatchRenorm2d,
    BatchRenorm3d,
    BatchRenormBase,
    is_batch_renorm,
)
from .convert import (
    ConversionReport,
    bn_affine,
    convert_norm,
    convert_sync_batchnorm,
    fuse_bn_eval,
    fuse_linear_bn,
    revert_sync_batchnorm,
    to_torch,
)
from .factory import get_norm_layer
from .lp_batchnorm import (
    L1BatchNorm1d,
    L1BatchNorm2d,
    LinfBatchNorm1d,
    LinfBatchNorm2d,
    MeanOnlyBatchNorm1d,
    MeanOnlyBatchNorm2d,
)
from .norm_act import BatchNormAct2d, BatchRenormAct2d
from .population import set_population_statistics
from .schedules import LinearRamp, paper_d_max, paper_r_max, scaled_paper_schedules
from .weight_norm import WeightNormConv2d, WeightNormLinear, data_dependent_init_, is_weight_normed

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "BatchNormAct2d",
    "BatchNormBase",
    "BatchRenorm1d",
    "BatchRenorm2d",
    "BatchRenorm3d",
    "BatchRenormAct2d",
    "BatchRenormBase",
    "ConversionReport",
    "L1BatchNorm1d",
    "L1BatchNorm2d",
    "LinearRamp",
    "LinfBatchNorm1d",
    "LinfBatchNorm2d",
    "MeanOnlyBatchNorm1d",
    "MeanOnlyBatchNorm2d",
    "WeightNormConv2d",
    "WeightNormLinear",
    "bn_affine",
    "convert_norm",
    "convert_sync_batchnorm",
    "data_dependent_init_",
    "functional",
    "fuse_bn_eval",
    "fuse_linear_bn",
    "get_norm_layer",
    "is_batch_renorm",
    "is_weight_normed",
    "paper_d_max",
    "paper_r_max",
    "revert_sync_batchnorm",
    "scaled_paper_schedules",
    "set_population_statistics",
    "to_torch",
]
