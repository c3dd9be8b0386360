"""My study: BN and Batch Renorm on the small conv net (an example of adding a study).

python -m experiments.mystudy setup=brn32 seed=1
"""

from dataclasses import dataclass, field

import hydra
import torch
from omegaconf import DictConfig

from experiments.kit import classify, config
from experiments.kit.data import load_splits
from experiments.kit.norm import apply_norm_options, norm_factory
from experiments.kit.sampling import IIDBatches
from experiments.kit.seeds import derive_seed
from experiments.nets.convnet import SmallConvNet


@dataclass
class MyStudy(config.StudyConf):  # the typed keys; configs/mystudy/mystudy.yaml sets their values
    train: config.ClassifierTrainConf = field(default_factory=config.ClassifierTrainConf)
    eval: config.ClassifierEvalConf = field(default_factory=config.ClassifierEvalConf)


config.register("mystudy", MyStudy)


def check(cfg: DictConfig) -> None:
    config.check_common(cfg)  # the rules every study shares; add this study's own


def train(cfg: DictConfig, out_dir) -> dict:
    check(cfg)
    proc = classify.start_process(cfg, out_dir)
    train_split, test_split, channels, classes = load_splits(cfg.data)
    torch.manual_seed(cfg.seed)
    layers = norm_factory(cfg.norm, 2, cfg.train.steps), norm_factory(cfg.norm, 1, cfg.train.steps)
    model = apply_norm_options(SmallConvNet(*layers, channels, classes), cfg.norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.train.lr, momentum=cfg.train.momentum)
    scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)  # a constant lr
    seed = derive_seed(cfg.seed, "train", proc.rank)  # each torchrun process its own batches
    sampler = IIDBatches(len(train_split), cfg.train.batch_size, seed)
    net = classify.Classifier(model, optimizer, scheduler)
    loop = classify.classifier_loop(
        cfg, proc, net, sampler, (train_split, test_split), study="mystudy"
    )
    loop.start(cfg)
    return classify.finish(loop, loop.run())


@hydra.main(version_base="1.3", config_path=str(config.CONFIGS / "mystudy"), config_name="mystudy")
def main(cfg: DictConfig) -> float | None:
    return config.run_study(train, cfg)


def cli() -> None:  # python -m experiments.mystudy, bn-study mystudy
    config.preflight("mystudy")  # one-line errors for what Hydra would refuse less clearly
    main()


if __name__ == "__main__":
    cli()
