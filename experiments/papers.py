"""The papers' published numbers, one source for the studies, the figures and the claims table
(no torch import)."""

import math

# BN paper (Ioffe & Szegedy, 2015) Figure 1(a): MNIST test accuracy at 50k steps, read off the plot
# (the paper states no number): the ranges the curves sit in.
BN_FIG1 = {
    "source": "BN paper Fig. 1(a), read off the plot (approximate; the paper states no number)",
    "bn_test_acc_at_50k": [0.98, 0.99],
    "baseline_test_acc_at_50k": [0.95, 0.97],
}

# BN paper (Ioffe & Szegedy, 2015) Sec. 4.2.2, Figure 3: ImageNet validation, single crop, batch 32.
BN_FIG3 = {
    "source": "BN paper Sec. 4.2.2, Figure 3 (ImageNet validation, single crop)",
    "setups": {
        "inception": {"steps_to_baseline_max": 31.0e6, "max_acc": 0.722},
        "bn_baseline": {"steps_to_baseline_max": 13.3e6, "max_acc": 0.727},
        "bn_x5": {"steps_to_baseline_max": 2.1e6, "max_acc": 0.730},
        "bn_x30": {"steps_to_baseline_max": 2.7e6, "max_acc": 0.748},
        "bn_x5_sigmoid": {"steps_to_baseline_max": None, "max_acc": 0.698},
        # "never achieves better than 1/1000 accuracy": chance on ImageNet's 1000 classes
        "inception_sigmoid": {"steps_to_baseline_max": None, "max_acc": None},
    },
}

# Batch Renorm paper (Ioffe, 2017) Secs. 4.2-4.3: Inception-v3 on ImageNet, validation top-1.
BRN_RESULTS = {
    "source": "Batch Renorm paper Secs. 4.2-4.3 (Inception-v3, ImageNet; paper scale)",
    "setups": {
        "bn32": {"test_acc": 0.783, "at_step": 130_000},
        "brn32": {"test_acc": 0.785, "at_step": 130_000},
        "bn_micro4": {"test_acc": 0.742, "at_step": 210_000},
        "brn_micro4": {"test_acc": 0.765, "at_step": 130_000},
        "noniid_bn": {"test_acc": 0.67, "train_acc": 0.728, "test_acc_train_mode": 0.765},
        "noniid_bn_halves": {"test_acc": 0.774, "at_step": 140_000},
        "noniid_brn": {"test_acc": 0.786, "at_step": 120_000},
    },
}

# Yang, Pennington, Rao, Sohl-Dickstein & Schoenholz (ICLR 2019), "A Mean Field Theory of Batch
# Normalization": at initialization, in the limit of infinite width and batch size, a ReLU network
# with BN multiplies the squared gradient norm by pi/(pi - 1) per layer, so log10 of the gradient
# norm grows by half log10 of that: about 0.0832 decades per layer.
YANG_RELU_RATE = 0.5 * math.log10(math.pi / (math.pi - 1))
