"""The mechanism study: the network as per-example functions equals the model, the three views of
the sigmoid inputs, the logged measures, resume, every setup end to end. Offline, tiny data."""

import copy
import math

import numpy as np
import pytest
import torch

import bn
from experiments import mechanism, mechanism_results, mnist
from experiments.kit import mlp_harness
from experiments.kit.config import setups
from experiments.kit.errors import ConfigError
from experiments.kit.seeds import derive_seed
from experiments.nets.mlp import SigmoidMLP
from experiments.nets.noisy import CovariateShiftNoise
from experiments.studies import study
from tests.configs import compose_config
from tests.interrupt import dies_at_step
from tests.runs import metric_rows


def _small(root, *extra):
    return compose_config(
        "mechanism",
        [
            "data=fashion_mnist", f"data.root={root}", "data.download=false", "data.verify=false",
            "logger.mode=disabled", "train.steps=20", "eval.every=10", "train.batch_size=20",
            "train.lr=0.5", "probe.batches=3", "probe.jacobian_examples=5", *extra,
        ],
    )  # fmt: skip


def test_the_setups():
    assert set(setups("mechanism")) == {
        "mech_baseline", "mech_bn", "mech_noisy_bn", "mech_bn_wd1e-4", "mech_bn_wd1e-3",
        "mech_relu_baseline", "mech_relu_bn",
    }  # fmt: skip


@pytest.mark.parametrize(
    "setup", ["mech_baseline", "mech_bn", "mech_noisy_bn", "mech_relu_baseline", "mech_relu_bn"]
)
def test_layer_functions_are_the_model_in_inference(root, setup):
    cfg = _small(root, f"setup={setup}")
    data = mnist.load_data(cfg.data)
    model = mechanism.build_model(cfg, data)
    with torch.no_grad():  # move the statistics and biases away from their initial values
        model.train()(data.x_test[:40])
        for layer in model.hidden:
            if layer.bias is not None:
                layer.bias.normal_()
    model.eval()
    x = data.x_test[:4]
    h = x.float()
    fns = mechanism.layer_functions(model)
    logits = torch.stack([_compose(fns, v) for v in h])
    torch.testing.assert_close(logits, model(x)[0])


def _compose(fns, v):
    for f in fns:
        v = f(v)
    return v


def test_input_output_jacobian_matches_autograd_of_the_model(root):
    cfg = _small(root)
    data = mnist.load_data(cfg.data)
    model = mechanism.build_model(cfg, data).eval()
    x = data.x_test[:3].float()
    out = mechanism.jacobian_metrics(model, x)
    svals = []
    for v in x:
        jac = torch.autograd.functional.jacobian(lambda u: model(u[None])[0, 0], v)
        svals.append(torch.linalg.svdvals(jac))
    svals = torch.stack(svals)
    assert out["jacobian/input_output/sv_max"] == pytest.approx(svals.max().item(), rel=1e-4)
    assert out["jacobian/input_output/sv_median"] == pytest.approx(svals.median().item(), rel=1e-4)


def test_drift_and_the_typical_unit():
    qs = [15.0, 50.0, 85.0]
    prev = torch.zeros(1, 3, 4)
    now = torch.zeros(1, 3, 4)
    now[0, 1] = torch.tensor([0.0, 1.0, 2.0, 3.0])  # medians move by 0..3
    now[0, 2] = torch.tensor([1.0, 1.0, 1.0, 1.0])  # spreads grow by 1
    d = mechanism.drift(prev, now, qs, "x")
    assert d["x/layer1/median_mean"] == 1.5 and d["x/layer1/spread_mean"] == 1.0
    values = np.zeros((3, 3, 5))
    values[1:, 1] = [[0, 1, 2, 3, 4], [0, 2, 4, 6, 8]]  # total median drift 0, 2, 4, 6, 8
    assert mechanism_results.typical_unit(values, qs) == 2


@pytest.mark.slow
def test_a_short_run_logs_every_measure(root, tmp_path):
    summary = mechanism.train(_small(root, "setup=mech_bn"), tmp_path)
    metrics = {r["metric"] for r in metric_rows(tmp_path) if r["step"] == "20"}
    for way in mechanism.WAYS:
        assert f"shift/{way}/layer3/median_mean" in metrics
    assert {"grad_ics/layer2/cosine", "landscape/beta_smoothness", "jacobian/layer2/sv_median",
            "jacobian/input_output/sv_in_band", "weights/layer1/relative_update"} <= metrics  # fmt: skip
    normalized = {
        f"jacobian_normalized/{part}/{k}"
        for part in ("layer1to2", "layer2to3")
        for k in ("sv_median", "sv_min", "sv_max", "sv_in_band", "isometry_gap")
    } | {f"jacobian_normalized/layer{i}/mean_abs_corr" for i in (1, 2, 3)}
    for step in ("0", "20"):  # initialization too
        logged = {r["metric"] for r in metric_rows(tmp_path) if r["step"] == step}
        assert {m for m in logged if m.startswith("jacobian_normalized/")} == normalized
    saved = torch.load(tmp_path / "unit_percentiles.pt", weights_only=True)
    assert saved["steps"] == [0, 10, 20] and saved["values"].shape == (3, 3, 3, 3, 100)
    assert summary["setup"] == "mech_bn" and not summary["diverged"]


@pytest.mark.slow
def test_without_bn_the_population_view_is_the_moving_one(root, tmp_path):
    mechanism.train(_small(root, "setup=mech_baseline"), tmp_path)
    saved = torch.load(tmp_path / "unit_percentiles.pt", weights_only=True)["values"]
    assert torch.equal(saved[:, 0], saved[:, 1]) and not torch.equal(saved[:, 0], saved[:, 2])


@pytest.mark.slow
def test_weight_decay_shrinks_the_weights(root, tmp_path):
    def norm_at_end(setup, path):
        mechanism.train(_small(root, f"setup={setup}", "train.weight_decay=0.5"), path)
        return [
            float(r["value"]) for r in metric_rows(path) if r["metric"] == "weights/layer2/norm"
        ][-1]

    plain = mechanism.train(_small(root, "setup=mech_bn"), tmp_path / "plain")
    decayed = norm_at_end("mech_bn", tmp_path / "decayed")
    rows = metric_rows(tmp_path / "plain")
    assert decayed < [float(r["value"]) for r in rows if r["metric"] == "weights/layer2/norm"][-1]
    assert plain["weight_decay"] == 0.0


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted(root, tmp_path, monkeypatch):
    mechanism.train(_small(root, "setup=mech_noisy_bn"), tmp_path / "full")
    original = mlp_harness.stacked_batches
    with monkeypatch.context() as m:
        m.setattr(mlp_harness, "stacked_batches", lambda *a: dies_at_step(original(*a), 15))
        with pytest.raises(KeyboardInterrupt):
            mechanism.train(_small(root, "setup=mech_noisy_bn"), tmp_path / "killed")
    mechanism.train(_small(root, "setup=mech_noisy_bn", "resume=true"), tmp_path / "killed")
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")


@pytest.mark.slow
def test_a_diverging_run_ends_cleanly(root, tmp_path):
    summary = mechanism.train(_small(root, "setup=mech_baseline", "model.init_std=1e37"), tmp_path)
    assert summary["diverged"] and summary["steps_done"] == summary["diverged_at_step"] <= 20
    assert any(r["metric"] == "test/acc" for r in metric_rows(tmp_path))  # step-0 row kept
    spectra = [r["value"] for r in metric_rows(tmp_path) if r["metric"].endswith("to3/sv_median")]
    assert spectra and spectra[0] == "nan"  # overflowing statistics: no spectrum, no raise


@pytest.mark.parametrize(
    "override,message",
    [
        ("seed=[0,1]", "must be one integer"),
        ("probe.etas=[0.5,-1]", "must be positive"),
        ("probe.percentiles=[10,90]", "must hold 50"),
    ],
)
def test_invalid_settings_fail_before_training(root, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        mechanism.train(_small(root, override), tmp_path)


def test_noise_needs_a_norm(root, tmp_path):
    with pytest.raises(ConfigError, match="model.noise=true adds noise after BN"):
        mechanism.train(_small(root, "setup=mech_baseline", "model.noise=true"), tmp_path)


def test_the_relu_network_and_a_bad_activation(root):
    cfg = _small(root, "setup=mech_relu_bn")
    model = mechanism.build_model(cfg, mnist.load_data(cfg.data))
    assert all(isinstance(m, torch.nn.ReLU) for m in model.activations)
    with pytest.raises(ConfigError, match="model.activation=tanh"):
        mechanism.check(_small(root, "model.activation=tanh"))


@pytest.mark.slow
def test_collect_writes_the_typical_unit_and_the_moving_average_share(root, tmp_path, monkeypatch):
    import csv
    import json

    from experiments.kit.results import collect

    for setup in ("mech_baseline", "mech_bn"):
        mechanism.train(_small(root, f"setup={setup}"), tmp_path / "sweep" / setup)
    [summary] = collect(study("mechanism"), tmp_path / "sweep", tmp_path / "out")
    units = summary["typical_unit_of_the_last_hidden_layer"]
    saved = torch.load(tmp_path / "sweep/mech_bn/unit_percentiles.pt", weights_only=True)
    values = saved["values"].numpy()[:, 1, 2]  # way (b), the last hidden layer
    assert units["mech_bn-s0"] == mechanism_results.typical_unit(values, saved["percentiles"])
    with (tmp_path / "out/typical_unit.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["setup"] == "mech_bn"]
    assert len(rows) == 3 * 3 * 3  # ways x evaluations x percentiles
    way_b = [r for r in rows if r["way"] == "population" and r["percentile"] == "50.0"]
    unit = units["mech_bn-s0"]
    assert [float(r["value"]) for r in way_b] == pytest.approx(
        values[:, 1, unit].tolist(), rel=1e-5
    )
    share = summary["moving_average_share_of_drift"]
    assert set(share) == {"mech_bn"} and set(share["mech_bn"]) == {"layer1", "layer2", "layer3"}
    assert (
        json.loads((tmp_path / "out/summary.json").read_text())[
            "typical_unit_of_the_last_hidden_layer"
        ]
        == units
    )
    from scripts import plot_mechanism, plotting

    monkeypatch.setattr(plot_mechanism, "RESULTS", tmp_path / "out")
    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    plot_mechanism.main()  # the figures a setup without results leaves empty still draw
    drawn = {p.name for p in (tmp_path / "figures").glob("*.png")}
    assert drawn == {
        "mechanism_ics_three_ways.png", "mechanism_typical_unit.png", "mechanism_santurkar.png",
        "mechanism_santurkar_relu.png", "mechanism_jacobian.png", "mechanism_weights.png",
    }  # fmt: skip


def test_the_step_is_sgd_with_l2_on_the_weight_matrices_only(root):
    cfg = _small(root, "setup=mech_bn", "train.weight_decay=0.1")
    data = mnist.load_data(cfg.data)
    model = mechanism.build_model(cfg, data)
    x, y = data.x_train[:8], data.y_train[:8][None]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = torch.nn.functional.cross_entropy(model(x).transpose(1, 2), y)
    grads = dict(zip(before, torch.autograd.grad(loss, list(model.parameters()))))
    matrices = {id(w) for w in mechanism.weight_matrices(model)}
    out = mechanism.sgd_step(model, 0.5, 0.1, every=1)(0, (x, y))
    for n, p in model.named_parameters():
        decay = 0.1 * before[n] if id(p) in matrices else 0
        torch.testing.assert_close(p.detach(), before[n] - 0.5 * (grads[n] + decay))
    assert set(out) >= {"loss", "weights/layer1/norm", "weights/layer4/relative_update"}


@pytest.mark.slow
def test_the_noise_has_a_stream_of_its_own(root, tmp_path, monkeypatch):
    """The first training step's noise starts from ``derive_seed(seed, "noise")``; no noise
    draws the numbers that initialized the network (its generator seeded with the run's seed)."""
    states, sample = [], CovariateShiftNoise.sample

    def recording(self, shape, like):
        states.append(torch.get_rng_state())
        return sample(self, shape, like)

    monkeypatch.setattr(CovariateShiftNoise, "sample", recording)
    cfg = _small(root, "setup=mech_noisy_bn", "seed=3", "train.steps=2", "eval.every=2")
    mechanism.train(cfg, tmp_path)
    torch.manual_seed(derive_seed(3, "noise"))
    assert any(torch.equal(state, torch.get_rng_state()) for state in states)
    torch.manual_seed(3)
    assert not any(torch.equal(state, torch.get_rng_state()) for state in states)


# -- the Jacobian between consecutive normalized pre-activations (BN paper Sec. 3.3) ------------
def _hidden_outputs(model, x):
    """Every hidden layer's ``z = W h + b`` for the examples ``x``, ``(examples, units)``, from
    hooks on the model's own linear layers."""
    zs = []
    hooks = [m.register_forward_hook(lambda _m, _i, z: zs.append(z[0].t())) for m in model.hidden]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return zs


def _statistics_by_hand(model, fixed):
    """``(mean, sqrt(var + eps))`` of every hidden layer's ``z``: BN paper Algorithm 2 (the mean
    of the batch means; m/(m − 1) times the mean of the batch variances) over ``fixed`` in
    training mode, the noise off, with BN; the mean and biased variance of all their examples
    without."""
    if model.norms is None:
        zs = _hidden_outputs(model.eval(), torch.cat(fixed, 1))
        return [(z.mean(0), (z.var(0, correction=0) + 1e-5).sqrt()) for z in zs]
    m = copy.deepcopy(model).train()
    for module in m.modules():
        if isinstance(module, CovariateShiftNoise):
            module.eval()
    per_batch = [_hidden_outputs(m, x) for x in fixed]
    stats = []
    for layer, norm in enumerate(_norms(model)):
        zs = [zs[layer] for zs in per_batch]
        n = zs[0].shape[0]
        var = torch.stack([z.var(0, correction=0) for z in zs]).mean(0) * n / (n - 1)
        stats.append((torch.stack([z.mean(0) for z in zs]).mean(0), (var + norm.eps).sqrt()))
    return stats


def _norms(model):
    return [n[0] if isinstance(n, torch.nn.Sequential) else n for n in model.norms]


@pytest.mark.parametrize(
    "setup", ["mech_baseline", "mech_bn", "mech_noisy_bn", "mech_relu_baseline", "mech_relu_bn"]
)
def test_normalized_jacobians_are_autograd_of_the_composed_layers(root, setup):
    """``∂x̂_{l+1}/∂x̂_l`` in closed form equals ``jacrev`` of ``x̂_l ↦ x̂_{l+1}``, composed here
    from the model's own modules and statistics computed by hand, in float64; unequal widths, so
    a transposed factor shows."""
    cfg = _small(root, f"setup={setup}", "model.hidden=[30,20,10,8]", "data.binarize=true")
    data = mnist.load_data(cfg.data)
    model = mechanism.build_model(cfg, data).double()
    with torch.no_grad():  # biases, γ and β away from their initial values
        for name, p in model.named_parameters():
            if "bias" in name or name.startswith("norms"):
                p.copy_(torch.randn_like(p))
    fixed = [data.x_train[20 * i : 20 * (i + 1)][None] for i in range(3)]
    x = data.x_test[:4]
    stats = _statistics_by_hand(model, fixed)
    act = torch.sigmoid if cfg.model.activation == "sigmoid" else torch.relu
    if model.norms is None:
        affine = [(scale, mean) for mean, scale in stats]  # the sigmoid's input is z itself
        zs = _hidden_outputs(model.eval(), x)
        fixed_zs = _hidden_outputs(model, torch.cat(fixed, 1))
    else:
        affine = [(n.weight, n.bias) for n in _norms(model)]
        population = copy.deepcopy(model).eval()
        for norm, (mean, scale) in zip(_norms(population), stats):
            norm.running_mean.copy_(mean)
            norm.running_var.copy_(scale**2 - norm.eps)
        zs = _hidden_outputs(population, x)
        fixed_zs = _hidden_outputs(population, torch.cat(fixed, 1))
    layers = mechanism.normalized_layers(model, fixed)
    xhats, us = mechanism.normalized_forward(layers, x)
    jacs = mechanism.normalized_jacobians(layers, us)
    metrics = mechanism.normalized_jacobian_metrics(model, fixed, x)
    assert len(jacs) == 3
    for i, jac in enumerate(jacs):
        (gain, shift), (mean, scale) = affine[i], stats[i + 1]

        def step(xhat, i=i, gain=gain, shift=shift, mean=mean, scale=scale):
            z = model.hidden[i + 1](act(gain.detach() * xhat + shift.detach())[:, None])
            return (z[0, :, 0] - mean) / scale

        xhat = (zs[i] - stats[i][0]) / stats[i][1]
        torch.testing.assert_close(xhats[i], xhat)
        expected = torch.func.vmap(torch.func.jacrev(step))(xhat)
        torch.testing.assert_close(jac, expected)
        sv = torch.linalg.svdvals(expected)
        key = f"jacobian_normalized/layer{i + 1}to{i + 2}"
        assert metrics[f"{key}/sv_max"] == pytest.approx(sv.max().item(), rel=1e-9)
        assert metrics[f"{key}/sv_median"] == pytest.approx(sv.median().item(), rel=1e-9)
    for i, z in enumerate(fixed_zs):
        corr = torch.corrcoef(z.t())
        expected = corr[~torch.eye(len(corr), dtype=torch.bool)].abs().mean().item()
        assert metrics[f"jacobian_normalized/layer{i + 1}/mean_abs_corr"] == pytest.approx(expected)


def _white(n, d, generator):
    """``n`` examples of ``d`` components, centred, with ``XᵀX / n = I`` exactly."""
    q, _ = torch.linalg.qr(torch.randn(n, d, generator=generator, dtype=torch.float64))
    q = q - q.mean(0)
    q, _ = torch.linalg.qr(q)
    return q * n**0.5


@pytest.mark.parametrize("with_bn", [False, True])
@pytest.mark.parametrize("correlated", [False, True])
def test_the_papers_identity_for_white_uncorrelated_linear_layers(with_bn, correlated):
    """BN paper Sec. 3.3: white inputs, a linear layer (the activation replaced by the identity)
    whose normalized outputs are uncorrelated (``W = D Q``, with ``Q`` orthogonal and ``D``
    positive diagonal, times the previous ``D⁻¹`` without BN) give ``J Jᵀ = Cov[x̂_{l+1}] = I``:
    every singular value 1, the gap 0. With BN they are ``sqrt((m − 1)/m)``: Algorithm 2's
    population variance is ``m/(m − 1)`` times that of the batch-normalized inputs it sees. A
    ``W`` that correlates the outputs is no isometry."""
    d, n = 6, 300
    g = torch.Generator().manual_seed(0)
    model = SigmoidMLP(bn.BatchNorm1d if with_bn else None, [d] * 3, in_features=d).double()
    model.activations = torch.nn.ModuleList(torch.nn.Identity() for _ in range(3))
    x = _white(n, d, g)
    previous = torch.ones(d, dtype=torch.float64)
    with torch.no_grad():
        for i, layer in enumerate(model.hidden):
            q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
            if correlated and i == 1:
                q = q + 0.8 * torch.ones(d, d, dtype=torch.float64)
            scale = 1 + 2 * torch.rand(d, generator=g, dtype=torch.float64)
            layer.weight[0].copy_(scale[:, None] * q / (1 if with_bn else previous))
            previous = scale
    out = mechanism.normalized_jacobian_metrics(model, [x[None]], x[:10])
    out = {k.removeprefix("jacobian_normalized/"): v for k, v in out.items()}
    assert out["layer1/mean_abs_corr"] < 1e-12
    if correlated:
        assert out["layer1to2/isometry_gap"] > 0.05 and out["layer2/mean_abs_corr"] > 0.1
        return
    sv = ((n - 1) / n) ** 0.5 if with_bn else 1.0
    for pair in ("layer1to2", "layer2to3"):
        assert out[f"{pair}/sv_min"] == pytest.approx(sv, abs=1e-5)
        assert out[f"{pair}/sv_max"] == pytest.approx(sv, abs=1e-5)
        assert out[f"{pair}/isometry_gap"] == pytest.approx(-math.log10(sv), abs=1e-5)
        assert out[f"{pair}/sv_in_band"] == 1.0
    # (with BN eps scales x̂_2's components by 1 − O(eps/D²) each: correlations ~1e-7 in x̂_3)
    assert out["layer2/mean_abs_corr"] < 1e-6 and out["layer3/mean_abs_corr"] < 1e-6


def test_the_baseline_is_standardized_with_the_bn_layers_eps(root):
    assert _small(root, "setup=mech_bn").norm.eps == mechanism.BASELINE_EPS
