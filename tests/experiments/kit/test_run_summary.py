"""Every study's runs start their summary through one builder: the kit's keys, the study's own
where it puts them, and in each study the keys and order its ``summary.json`` has always had
(collection reads them; the committed results were built from them)."""

import pytest
import torch

from experiments import depth, mechanism, mnist
from experiments.kit import classify
from experiments.kit.run_summary import KIT_KEYS, run_name, run_summary
from tests.configs import compose_config

QUICK = ("debug=quick", "data.root=/nonexistent", "data.download=false")


def test_the_study_places_its_keys_after_the_kit_keys_it_names():
    cfg = compose_config("mnist", [*QUICK, "setup=bn", "seed=3"])
    s = run_summary(cfg, "mnist", 3, after={"setup": {"a": 1}, "command": {"b": 2, "c": 3}})
    assert list(s) == ["name", "setup", "a", "seed", "data", "norm", "steps", "command", "b", "c"]
    assert (
        s["name"] == "bn-s3"
        and s["setup"] == "bn"
        and (s["data"], s["norm"]) == ("mnist", "batchnorm")
    )
    assert s["command"].startswith("python -m experiments.mnist ")
    assert run_summary(cfg, "mnist", 3, setup="other")["name"] == "other-s3" == run_name("other", 3)
    assert run_name("bn", 0, 1, 2) == "bn-s0,1,2"


@pytest.mark.parametrize(
    "after",
    [{"lr": {"x": 1}}, {"norm": {"seed": 1}}, {"norm": {"x": 1}, "steps": {"x": 2}}],
    ids=["not a kit key", "a kit key as its own", "one key twice"],
)
def test_a_misplaced_key_is_refused(after):
    cfg = compose_config("mnist", QUICK)
    with pytest.raises(ValueError, match="kit"):
        run_summary(cfg, "mnist", 0, after=after)


def test_every_study_keeps_its_keys_and_their_order(tmp_path):
    head = ["name", "setup", "seed", "data"]
    cfg = compose_config("mnist", [*QUICK, "setup=bn"])
    [run] = mnist.make_runs(cfg, tmp_path, [0])
    assert list(run.summary) == [*head, "norm", "lr", "init_std", "steps", "copies", "train_subset", "command"]  # fmt: skip
    cfg = compose_config("mechanism", [*QUICK, "setup=mech_bn"])
    run = mechanism.make_run(cfg, tmp_path)
    assert list(run.summary) == [*head, "activation", "norm", "noise", "weight_decay", "lr", "steps", "command"]  # fmt: skip
    cfg = compose_config("depth", [*QUICK, "setup=deep_mlp_bn"])
    runs = depth.make_runs(cfg, tmp_path)
    assert [r.name for r in runs] == [f"deep_mlp_bn_relu_d{d}-s0" for d in cfg.model.depths]
    assert list(runs[0].summary) == ["name", "setup", "setup_base", "seed", "data", "norm", "activation", "depth", "width", "lr", "batch_size", "steps", "command"]  # fmt: skip
    cfg = compose_config("renorm", [*QUICK, "setup=bn32", "seed=[0,1]"])
    proc = classify.Process(0, 1, torch.device("cpu"), torch.contiguous_format, None, tmp_path)
    runs = classify._runs(cfg, proc, "renorm", {"model": "m", "copies": 2})
    assert [r.out_dir for r in runs] == [tmp_path / "seed0", tmp_path / "seed1"]
    assert list(runs[1].summary) == [*KIT_KEYS[:-1], "world_size", "eval_every", "test_subset", "command", "model", "copies"]  # fmt: skip
