"""``bn``: Batch Normalization and Batch Renormalization, paper-faithful and drop-in for ``torch.nn``.

Every experiment in this repo imports its normalization layers from here.
"""

from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from .batchrenorm import BatchRenorm1d, BatchRenorm2d, BatchRenorm3d
from .convert import bn_affine, convert_norm, convert_sync_batchnorm, fuse_bn_eval, fuse_linear_bn
from .factory import get_norm_layer
from .functional import BatchNormFunction, batch_stats
from .population import set_population_statistics
from .schedules import LinearRamp, paper_d_max, paper_r_max, scaled_paper_schedules

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "BatchNormFunction",
    "BatchRenorm1d",
    "BatchRenorm2d",
    "BatchRenorm3d",
    "LinearRamp",
    "batch_stats",
    "bn_affine",
    "convert_norm",
    "convert_sync_batchnorm",
    "fuse_bn_eval",
    "fuse_linear_bn",
    "get_norm_layer",
    "paper_d_max",
    "paper_r_max",
    "scaled_paper_schedules",
    "set_population_statistics",
]
