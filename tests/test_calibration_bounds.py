"""How far one bad run can skew the calibration that persists: a fit outside the sane band is used (clamped) in
its own session and never joins the model's stored history."""

from __future__ import annotations

from windowsmith.tokens import Calibration


def test_a_fit_outside_the_band_is_clamped_and_not_persisted() -> None:
    cal = Calibration()
    for counted in (1_000, 2_000, 3_000, 4_000):
        cal.observe(counted, counted // 3)  # billed a third of the count: no tokenizer is that far off
    assert cal.slope == cal.low  # used clamped in this session
    assert not cal.fitted
    assert Calibration.from_dict(cal.to_dict()).prior == 1.0  # the next session does not inherit it


def test_a_sane_fit_persists_and_one_session_moves_the_prior_by_one_rank() -> None:
    cal = Calibration()
    for counted in (1_000, 2_000, 3_000, 4_000):
        cal.observe(counted, int(counted * 1.2))
    assert cal.fitted and abs(cal.slope - 1.2) < 0.05
    stored = {**cal.to_dict(), "history": [1.0] * 10}
    assert Calibration.from_dict(stored).prior == 1.0  # a median of eleven: one session cannot swing it
