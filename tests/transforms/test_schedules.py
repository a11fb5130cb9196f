"""Schedules: values over steps, warm-up, holding the end value, validation."""

import math
import pickle

import pytest

import plugdrop as pd
from plugdrop.schedules import as_schedule


def test_linear():
    s = pd.linear(0.0, 0.1, steps=10)
    assert [s(i) for i in (0, 5, 10, 11, 10**6)] == pytest.approx([0.0, 0.05, 0.1, 0.1, 0.1])


def test_cosine():
    s = pd.cosine(1.0, 0.0, steps=4)
    assert s(0) == 1.0 and s(4) == pytest.approx(0.0) and s(99) == pytest.approx(0.0)
    assert s(2) == pytest.approx(0.5)
    assert s(1) == pytest.approx((1 + math.cos(math.pi / 4)) / 2)


def test_piecewise_constant_and_linear():
    s = pd.piecewise({0: 0.0, 10: 0.05, 20: 0.1})
    assert [s(i) for i in (0, 9, 10, 19, 20, 500)] == [0.0, 0.0, 0.05, 0.05, 0.1, 0.1]
    s = pd.piecewise({10: 0.2, 20: 0.4}, interpolation="linear")
    assert [s(i) for i in (0, 10, 15, 20, 30)] == pytest.approx([0.2, 0.2, 0.3, 0.4, 0.4])


def test_warmup():
    s = pd.linear(0.1, 0.3, steps=10, warmup=5)
    assert [s(i) for i in (0, 1, 5, 10, 15, 99)] == pytest.approx([0.0, 0.02, 0.1, 0.2, 0.3, 0.3])
    w = pd.warmup(0.5, 4, start=0.1)
    assert [w(i) for i in (0, 2, 4, 10)] == pytest.approx([0.1, 0.3, 0.5, 0.5])


def test_callable_and_pickle():
    s = as_schedule(abs)
    assert s(3) == 3.0
    for sched in (pd.linear(0, 1, 3), pd.cosine(0, 1, 3), pd.piecewise({0: 1.0}),
                  pd.warmup(pd.linear(0, 1, 3), 2)):
        assert pickle.loads(pickle.dumps(sched))(2) == sched(2)
        assert repr(sched)


@pytest.mark.parametrize("bad,exc", [
    (lambda: pd.linear(0, 1, steps=0), ValueError),
    (lambda: pd.linear(0, 1, steps=2.5), TypeError),
    (lambda: pd.linear("0", 1, steps=3), TypeError),
    (lambda: pd.linear(0, float("nan"), steps=3), ValueError),
    (lambda: pd.piecewise({}), ValueError),
    (lambda: pd.piecewise([(0, 1)]), TypeError),
    (lambda: pd.piecewise({-1: 0.1}), ValueError),
    (lambda: pd.piecewise({0: 0.1}, interpolation="cubic"), ValueError),
    (lambda: pd.linear(0, 1, steps=3, warmup=-1), ValueError),
    (lambda: as_schedule("0.1"), TypeError),
])
def test_bad_schedules(bad, exc):
    with pytest.raises(exc):
        bad()


def test_callable_returning_garbage_is_caught():
    t = pd.Dropout(lambda step: 0.1 if step < 2 else "x")
    t._set_step(1)
    with pytest.raises(TypeError, match="step 2"):
        t._set_step(2)
