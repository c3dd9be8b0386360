"""Santurkar et al.'s noisy BN: the noise has the statistics their 2018 paper gives, changes every
step, and is off in inference mode."""

import torch

from experiments.nets.noisy import CovariateShiftNoise


def test_one_steps_noise_has_the_stated_statistics():
    torch.manual_seed(0)
    noise = CovariateShiftNoise()
    x = torch.empty(200_000)
    for _ in range(20):
        s, m, sigma, mu = noise.sample(x.shape, x)
        assert -0.5 <= mu <= 0.5 and 1.0 <= sigma <= 1.25
        assert m.min() >= mu - 0.1 and m.max() <= mu + 0.1
        assert abs(m.mean() - mu) < 0.002 and abs(m.std() - 0.2 / 12**0.5) < 0.002  # uniform
        assert abs(s.mean() - sigma) < 0.002 and abs(s.std() - 0.1) < 0.002


def test_the_step_parameters_vary_over_their_ranges():
    torch.manual_seed(1)
    noise = CovariateShiftNoise()
    draws = [noise.sample(torch.Size([1]), torch.empty(1))[2:] for _ in range(4000)]
    sigmas = torch.tensor([d[0] for d in draws])
    mus = torch.tensor([d[1] for d in draws])
    assert abs(mus.mean()) < 0.02 and abs(mus.std() - 1 / 12**0.5) < 0.01  # U(-0.5, 0.5)
    assert abs(sigmas.mean() - 1.125) < 0.005 and abs(sigmas.std() - 0.25 / 12**0.5) < 0.005


def test_forward_is_s_times_a_plus_m_in_training_and_identity_in_inference():
    noise = CovariateShiftNoise()
    a = torch.randn(64, 10)
    torch.manual_seed(3)
    s, m, _, _ = noise.sample(a.shape, a)
    torch.manual_seed(3)
    torch.testing.assert_close(noise.train()(a), s * a + m)
    assert torch.equal(noise.eval()(a), a)
