"""The benchmarks' statistics: a ratio's bootstrap interval says how far chance alone moves it."""

from __future__ import annotations

import random

import pytest

from bench.harness import percentile, ratio_interval


def test_equal_samples_give_a_ratio_of_one_with_no_spread() -> None:
    assert ratio_interval([0.2] * 20, [0.2] * 20, 50) == (1.0, 1.0)


@pytest.mark.parametrize(("slowdown", "q"), [(1.0, 50), (1.5, 50), (2.0, 95)])
def test_the_interval_holds_the_true_ratio_of_two_noisy_samples(slowdown: float, q: float) -> None:
    rng = random.Random(7)
    base = [rng.lognormvariate(-1.9, 0.2) for _ in range(400)]
    slow = [slowdown * rng.lognormvariate(-1.9, 0.2) for _ in range(400)]
    low, high = ratio_interval(slow, base, q)
    assert low <= slowdown <= high and high - low < 0.3 * slowdown, (low, high)


def test_fewer_trials_give_a_wider_interval() -> None:
    rng = random.Random(3)
    draw = [rng.lognormvariate(-1.9, 0.3) for _ in range(400)]
    wide = ratio_interval(draw[:20], draw[20:40], 50)
    narrow = ratio_interval(draw[:200], draw[200:], 50)
    assert wide[1] - wide[0] > narrow[1] - narrow[0] > 0


def test_the_interval_is_reproducible_from_its_samples() -> None:
    samples = [0.1 + 0.01 * i for i in range(30)]
    assert ratio_interval(samples, samples[::-1], 50) == ratio_interval(samples, samples[::-1], 50)
    assert percentile(samples, 50) == pytest.approx(0.245)
