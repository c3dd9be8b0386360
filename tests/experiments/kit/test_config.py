"""experiments.kit.config across the studies: every setup file composes with its study and passes
that study's check; a setup of another study, a value of the wrong type, a misspelled choice and
a value out of its range are refused before anything runs (the ``norm`` group: test_norm.py)."""

import copy
import functools
import importlib
import math
import re

import pytest
from hydra.errors import ConfigCompositionException

from experiments.kit.config import preflight, setup_name, setups
from experiments.kit.errors import ConfigError
from experiments.studies import TRAINING as STUDIES
from tests.configs import CONFIGS, compose_config

SETUPS = {study: setups(study) for study in STUDIES}  # configs/<study>/setup/*.yaml


def _check(study: str):
    return importlib.import_module(f"experiments.{study}").check


def test_every_study_has_a_config_folder_with_its_setups():
    assert sorted(p.parent.name for p in CONFIGS.glob("*/setup")) == sorted(STUDIES)
    assert sorted(p.parent.name for p in CONFIGS.glob("*/*.yaml") if p.stem == p.parent.name) == (
        sorted(STUDIES)
    )
    assert all(SETUPS[study] for study in STUDIES)


@pytest.mark.slow
@pytest.mark.parametrize(
    "setup,study", [(setup, study) for study in STUDIES for setup in SETUPS[study]]
)
def test_every_setup_composes_with_its_study_and_passes_its_check(setup, study):
    cfg = compose_config(study, [f"setup={setup}"])
    assert setup_name() == setup  # runs are named after Hydra's choice of setup
    _check(study)(cfg)


@pytest.mark.parametrize(
    "setup,study,owner",
    [("bn32", "mnist", "renorm"), ("bn", "renorm", "mnist"), ("mech_bn", "inception", "mechanism")],
)
def test_a_setup_of_another_study_is_refused_naming_only_this_studys_setups(setup, study, owner):
    with pytest.raises(ConfigCompositionException, match=f"Could not find 'setup/{setup}'") as e:
        compose_config(study, [f"setup={setup}"])
    listed = re.findall(r"^\t(\S+)$", str(e.value), flags=re.M)  # Hydra's list of the options
    assert listed == SETUPS[study]
    with pytest.raises(SystemExit) as e:  # before Hydra, on the command line: one line
        preflight(study, [f"setup={setup}"])
    assert str(e.value) == (
        f"error: setup={setup} is not a setup of {study} (a setup of {owner}); its setups: "
        f"{', '.join(SETUPS[study])} (configs/{study}/setup/)"
    )
    preflight(study, [f"setup={SETUPS[study][0]}"])  # its own setups pass


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
@pytest.mark.parametrize(
    "override,why",
    [
        ("train.steps=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
        ("data.binarize=maybe", "Value 'maybe' is not a valid bool"),
        ("norm.kind=batchnrom", "Invalid value 'batchnrom', expected one of"),
        ("norm.momentum=fast", "Value 'fast' of type 'str' could not be converted to Float"),
        ("eval.every=often", "Value 'often' of type 'str' could not be converted to Integer"),
    ],
)
def test_wrong_types_and_choices_are_rejected_when_composing(study, override, why):
    with pytest.raises(ConfigCompositionException, match=f"Error merging override {override}") as e:
        compose_config(study, [override])
    assert why in str(e.value.__cause__)


@pytest.mark.parametrize("study", STUDIES)
def test_unknown_keys_and_groups_are_rejected_when_composing(study):
    with pytest.raises(ConfigCompositionException, match="norm.momentun"):
        compose_config(study, ["norm.momentun=0.05"])
    with pytest.raises(ConfigCompositionException, match="batchnrom"):
        compose_config(study, ["norm=batchnrom"])


@pytest.mark.slow
@pytest.mark.parametrize("study", ["mnist", "renorm"])
def test_help_lists_every_config_group_the_study_can_use_with_its_options(
    study, monkeypatch, capsys
):
    """``--help``: the study's own groups (setup, debug, scale) and the shared ones (data, norm,
    logger), each with every option; no other study's folder, which Hydra would list as a group
    of the shared configs/."""
    main = importlib.import_module(f"experiments.{study}").main
    monkeypatch.setattr("sys.argv", [study, "--help"])
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 0
    out = capsys.readouterr().out
    section = out.split("== Configuration groups ==")[1].split("== Config ==")[0]
    listed = dict(re.findall(r"^(\S+): (.*)$", section, flags=re.M))
    folders = [*(CONFIGS / study).iterdir(), *(CONFIGS / g for g in ("data", "norm", "logger"))]
    expected = {
        d.name: ", ".join(sorted(p.stem for p in d.glob("*.yaml"))) for d in folders if d.is_dir()
    }
    assert listed == expected
    assert {"data", "norm", "logger", "setup", "debug"} <= set(listed)


# --- norm.* reaches the layers ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (["+train.lrr=5"], "mnist has no setting train.lrr"),
        (["+norm.schedule.foo=1"], "mnist has no setting norm.schedule.foo"),
        (["~setup"], "every mnist run has a setup"),
        (["setup=baseline,bn_x5"], "setup=bn_x5 is not a setup of mnist (a setup of inception)"),
        (["--cfg", "hydra", "--resolve"], "--cfg hydra --resolve cannot resolve"),
    ],
)
def test_the_command_line_is_checked_before_hydra_composes(args, message):
    import experiments.mnist  # noqa: F401  (registers the schema)
    from experiments.kit.config import preflight

    with pytest.raises(SystemExit, match=re.escape(message)):
        preflight("mnist", args)
    preflight("mnist", ["setup=baseline,bn", "train.lr=0.5", "++train.lr=0.1"])  # all fine


@functools.cache
def _study_configs() -> tuple:
    return tuple(compose_config(s) for s in STUDIES)


def _outside(rule) -> float:
    return rule.low - 1 if not rule.low_open else rule.low


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(__import__("experiments.kit.ranges").kit.ranges.RANGES))
def test_every_numeric_setting_out_of_its_range_is_one_line_naming_it(key):
    from omegaconf import OmegaConf, open_dict

    from experiments.kit.ranges import RANGES, check_ranges

    configs = [copy.deepcopy(c) for c in _study_configs()]
    having = [c for c in configs if OmegaConf.select(c, key, default="absent") != "absent"]
    assert having, f"{key} is in RANGES but in no study's config"
    for cfg in configs:
        check_ranges(cfg)  # every study's defaults are in range
    cfg, rule = having[0], RANGES[key]
    with open_dict(cfg):
        OmegaConf.update(cfg, key, _outside(rule), force_add=True)
    stored = OmegaConf.select(cfg, key)  # as the schema's type keeps it (-1 or -1.0)
    with pytest.raises(ConfigError, match=re.escape(f"{key}={stored} must be")):
        check_ranges(cfg)
    if rule.high is not None:
        with open_dict(cfg):
            OmegaConf.update(cfg, key, rule.high + 1, force_add=True)
        with pytest.raises(ConfigError, match=re.escape(f"{key}=")):
            check_ranges(cfg)


# --- closed lower bounds: the bound itself is a value the setting takes ---------------------------


def test_a_closed_lower_bound_admits_its_value_and_refuses_just_below():
    """``at_least(x)`` and ``Range(low=x, ...)`` take ``x``; ``positive()`` and an open low end
    do not."""
    from experiments.kit.ranges import Range, at_least, positive

    closed = [(at_least(0), 0), (at_least(1), 1), (at_least(2.5), 2.5), (Range(low=0, high=1), 0)]
    closed += [(Range(low=0, high=1, null="a cumulative average"), 0)]
    for rule, low in closed:
        assert rule.admits(low) and rule.admits(float(low)), rule
        assert not rule.admits(math.nextafter(low, -math.inf)), rule
    for rule in (positive(), Range(low=0, high=1, low_open=True)):
        assert not rule.admits(0) and rule.admits(math.nextafter(0, 1)), rule


@pytest.mark.parametrize(
    "key,low",
    [
        ("train.steps", 1),
        ("train.weight_decay", 0),
        ("threads", 1),
        ("data.num_workers", 0),  # load in the training process
        ("data.image_size", 1),
        ("norm.momentum", 0),
        ("norm.schedule.r_max", 1),  # no r correction
        ("norm.schedule.d_max", 0),  # no d correction
        ("norm.schedule.warmup", 0),
        ("eval.test_subset", 0),  # the full test set
        ("eval.pair_batch_size", 2),  # the smallest batch with a statistic
        ("model.dropout", 0),
    ],
)
def test_a_setting_at_its_closed_lower_bound_passes_and_just_below_is_refused(key, low):
    from omegaconf import OmegaConf

    from experiments.kit.ranges import check_ranges

    cfg = OmegaConf.create({})
    OmegaConf.update(cfg, key, low, force_add=True)
    check_ranges(cfg)
    OmegaConf.update(cfg, key, math.nextafter(low, -math.inf))
    with pytest.raises(ConfigError, match=re.escape(f"{key}=")):
        check_ranges(cfg)


@pytest.mark.parametrize("size,ok", [(0, False), (1, True), (1024, True), (100000, False)])
def test_an_image_size_out_of_its_range_is_one_line(size, ok):
    """An image size of 0 crashes the transforms, a huge one grows the process until the system
    kills it: both are refused before any data is read."""
    from omegaconf import OmegaConf

    from experiments.kit.ranges import check_ranges

    cfg = OmegaConf.create({"data": {"image_size": size}})
    if ok:
        check_ranges(cfg)
    else:
        with pytest.raises(ConfigError, match=f"^data.image_size={size} must be in"):
            check_ranges(cfg)


def test_a_microbatch_of_one_example_is_refused():
    """A microbatch of 1 has one value per channel: no batch variance to normalize with."""
    check = _check("renorm")
    with pytest.raises(ConfigError, match=r"norm\.microbatch=1 must be at least 2"):
        check(compose_config("renorm", ["setup=bn_micro4", "norm.microbatch=1"]))
    check(compose_config("renorm", ["setup=bn_micro4", "norm.microbatch=2"]))  # the smallest


# --- numbers that are not numbers: one rule for every setting --------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "key",
    # listed with a range that a NaN or an infinity would pass by comparison alone, and not listed
    ["train.lr", "norm.schedule.r_max", "train.stop.plateau", "norm.eps", "train.lr_decay_factor"],
)
def test_a_non_finite_setting_is_one_line_naming_it(key, value):
    from omegaconf import OmegaConf, open_dict

    from experiments.kit.ranges import check_ranges

    cfg = copy.deepcopy(
        next(c for c in _study_configs() if OmegaConf.select(c, key, default="x") != "x")
    )
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ConfigError, match=re.escape(f"{key}={value} must be a finite number")):
        check_ranges(cfg)


def test_a_non_finite_number_anywhere_in_a_config_is_refused():
    from omegaconf import OmegaConf

    from experiments.kit.ranges import check_ranges, non_finite

    cfg = OmegaConf.create({"a": {"b": [1.0, math.nan]}, "c": 1.0, "d": "nan", "e": math.inf})
    assert non_finite(cfg) == ["a.b.1", "e"]  # a string is not a number
    with pytest.raises(ConfigError, match=r"a\.b\.1=nan must be a finite number"):
        check_ranges(cfg)


@pytest.mark.parametrize(
    "key,value,ok",
    [
        ("train.momentum", -1.0, False),
        ("train.momentum", 1.0, False),  # no decay of the velocity: it never forgets
        ("train.momentum", 0.0, True),
        ("train.grad_clip", 0.0, False),  # 0 used to mean "no clipping" silently: null does
        ("train.grad_clip", -1.0, False),  # a negative norm reversed the gradient
        ("train.grad_clip", None, True),
        ("train.grad_clip", 2.0, True),
    ],
)
def test_sgd_momentum_and_gradient_clipping_ranges(key, value, ok):
    from omegaconf import OmegaConf, open_dict

    from experiments.kit.ranges import check_ranges

    cfg = copy.deepcopy(
        next(c for c in _study_configs() if OmegaConf.select(c, key, default="x") != "x")
    )
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value, force_add=True)
    if ok:
        check_ranges(cfg)
    else:
        with pytest.raises(ConfigError, match=re.escape(f"{key}={value} must be")):
            check_ranges(cfg)
