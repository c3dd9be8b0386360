"""experiments/kit/identity.py: a run's identity, torch-free; a study declares its own settings a
resume may change (its schema's ``resume_safe``), so the kit names no study."""

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.kit.config import StudyConf, resume_safe
from experiments.kit.errors import ConfigError
from experiments.kit.identity import check_same_run, comparable_config, flat_config
from tests.configs import compose_config

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("module", ["experiments.kit.identity", "experiments.kit.results"])
def test_the_identity_and_the_collection_import_without_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


def test_a_study_names_its_own_resume_safe_settings_and_the_kit_none():
    assert StudyConf.resume_safe == ()
    assert resume_safe(compose_config("mnist")) == ("probe.", "population.")
    assert resume_safe(compose_config("mechanism")) == ("probe.",)
    assert resume_safe(compose_config("renorm")) == ()
    source = (REPO / "experiments" / "kit" / "identity.py").read_text()
    assert '"probe."' not in source and '"population."' not in source


def test_a_studys_resume_safe_settings_are_no_part_of_its_identity():
    cfg = compose_config("mnist", ["setup=bn"])
    flat = flat_config(cfg)
    assert "probe.unit" in flat and "population.num_batches" in flat
    record = comparable_config(flat, resume_safe(cfg))
    assert not any(k.startswith(("probe.", "population.")) for k in record)
    assert record["train.lr"] == flat["train.lr"] and "seed" not in record
    assert "probe.unit" in comparable_config(flat)  # a study that does not declare it


def test_a_resume_may_change_what_the_study_declares_and_nothing_else(tmp_path):
    saved = {"probe.unit": 0, "population.num_batches": 100, "train.lr": 0.1}
    now = {**saved, "probe.unit": 3, "population.num_batches": 10}
    assert check_same_run(tmp_path, saved, now, ("probe.", "population.")) == {
        "population.num_batches": [100, 10],
        "probe.unit": [0, 3],
    }
    with pytest.raises(ConfigError, match=r"holds the run of population\.num_batches=100, not"):
        check_same_run(tmp_path, saved, now, ("probe.",))


def test_a_run_saved_before_a_setting_existed_resumes_at_its_default(tmp_path):
    saved = {"train.lr": 0.1}  # a checkpoint older than train.first_images and train.trainable
    now = {**saved, "train.first_images": 0, "train.trainable": "all"}
    assert check_same_run(tmp_path, saved, now) == {}
    with pytest.raises(ConfigError, match=r"train\.first_images=0, not train\.first_images=100"):
        check_same_run(tmp_path, saved, {**now, "train.first_images": 100})
