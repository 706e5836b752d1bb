"""The forecast's arithmetic on synthetic series, without a database: model choice, intervals, backtest, short
histories, the backlog and capacity of a flavor's forecast."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest

from billing.forecast import (
    BACKLOG_DAYS,
    HORIZONS,
    FlavorHistory,
    backtest,
    block_starts,
    blocks_of,
    carried,
    coverage,
    days_between,
    filled,
    forecast_flavor,
    forecast_series,
    mape,
    seasonal_naive,
    wape,
)

DAILY, WEEKLY = HORIZONS["12w"], HORIZONS["6m"]
PATTERN = np.array([1.0, 1.1, 1.15, 1.1, 1.0, 0.6, 0.5])  # a working week and a quiet weekend


def weekly_pattern_with_trend(days: int, noise: float = 40.0, seed: int = 1) -> list[float]:
    """Accelerator-hours a day: 1,000 growing by 2 a day, times the weekly pattern, plus normal noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    return list((1000 + 2 * t) * PATTERN[t % 7] + rng.normal(0, noise, days))


def history(values: list[float], accelerators: int = 100, backlog: float = 0.0) -> FlavorHistory:
    days = days_between(date(2025, 1, 1), date(2025, 1, 1) + timedelta(days=len(values) - 1))
    capacity: list[float | None] = [accelerators * 24.0] * len(values)
    return FlavorHistory("H100", days, values, [0.0] * len(values), capacity, accelerators, backlog)


def test_a_weekly_pattern_with_a_trend_is_forecast_with_a_seasonal_trended_model():
    values = weekly_pattern_with_trend(365)
    forecast = forecast_series(values, 84, season=7, min_history=21)
    assert forecast.ok
    assert forecast.model == "ETS(A,A,A)"
    assert forecast.description == "additive errors, additive trend, weekly seasonality"
    assert len(forecast.mean) == 84
    # The weekend dip carries on, and the level keeps growing.
    assert forecast.mean[5] < 0.7 * forecast.mean[2]
    assert forecast.mean[-7] > forecast.mean[0]
    for i in range(84):
        assert forecast.lower_95[i] <= forecast.lower_80[i] <= forecast.mean[i] <= forecast.upper_80[i]
        assert forecast.upper_80[i] <= forecast.upper_95[i]


def test_the_daily_backtest_holds_back_twelve_weeks_and_scores_the_forecast():
    values = weekly_pattern_with_trend(365)
    result = backtest(values, DAILY)
    assert (result.held_back, result.trained_on) == (84, 281)
    assert result.ok
    assert result.model == "ETS(A,A,A)"
    assert result.mape is not None
    assert result.mape < 5
    assert result.weekly_mape is not None
    assert result.weekly_mape < 5
    assert result.zeros_skipped == 0
    assert result.wape is not None
    assert result.wape < 5
    # The intervals hold most held-back days, and the 95% one more than the 80% one.
    assert result.coverage_80 is not None
    assert result.coverage_80 >= 70
    assert result.coverage_95 is not None
    assert result.coverage_95 >= 90
    assert result.coverage_95 >= result.coverage_80
    # Repeating the last week misses the trend: the model beats it.
    assert result.baseline_mape is not None
    assert result.baseline_mape > result.mape


def test_the_weekly_backtest_scores_weekly_totals():
    values = blocks_of(weekly_pattern_with_trend(364))
    assert len(values) == 52
    result = backtest(values, WEEKLY)
    assert (result.held_back, result.trained_on) == (26, 26)
    assert result.mape is not None
    assert result.mape < 5
    assert result.coverage_95 is not None
    assert result.coverage_95 >= 80
    assert result.weekly_mape is None  # the periods are weeks already


def test_a_short_history_says_how_much_is_needed_instead_of_failing():
    values = weekly_pattern_with_trend(10)
    forecast = forecast_series(values, 84, season=7, min_history=21)
    assert not forecast.ok
    assert forecast.message == "not enough history (10 days; needs 21)"
    assert forecast.mean == []
    assert backtest(values, DAILY).message == "not enough history to backtest (10 days; needs 35)"
    assert backtest(values[:5], WEEKLY).message == "not enough history to backtest (5 weeks; needs 10)"
    result = forecast_flavor(history(values), DAILY, date(2025, 1, 11))
    assert result.message == "not enough history (10 days; needs 21)"
    assert result.forecast == []
    assert result.weeks == []
    assert result.shortfall == []
    assert len(result.history) == 10


def test_a_short_history_holds_back_at_most_half_and_keeps_four_weeks_to_train_on():
    values = weekly_pattern_with_trend(50)
    assert forecast_series(values, 84, season=7, min_history=21).ok
    result = backtest(values, DAILY)
    assert (result.held_back, result.trained_on) == (22, 28)
    assert result.mape is not None
    result = backtest(weekly_pattern_with_trend(120), DAILY)
    assert (result.held_back, result.trained_on) == (60, 60)
    assert (
        backtest(weekly_pattern_with_trend(34), DAILY).message == "not enough history to backtest (34 days; needs 35)"
    )
    assert backtest(weekly_pattern_with_trend(35), DAILY).held_back == 7


def test_seasonality_is_tried_only_with_two_full_seasons():
    from billing.forecast import candidates

    assert all(not c.seasonal for c in candidates(13, 7))
    assert any(c.seasonal for c in candidates(14, 7))
    assert len(candidates(14, 7)) == 6  # trend none, additive, damped; with and without the season


def test_lower_bounds_are_cut_at_zero():
    rng = np.random.default_rng(3)
    values = list(np.clip(rng.normal(2, 5, 60), 0, None))  # mostly zero or small: wide intervals around little
    forecast = forecast_series(values, 84, season=7, min_history=21, block=7)
    assert forecast.ok
    assert min(forecast.lower_95) == 0.0
    assert all(v >= 0 for v in forecast.lower_95 + forecast.lower_80 + forecast.mean)
    assert forecast.blocks is not None
    assert all(v >= 0 for v in forecast.blocks.lower_95)


def test_a_constant_history_forecasts_itself():
    forecast = forecast_series([0.0] * 30, 84, season=7, min_history=21, block=7)
    assert forecast.model == "constant"
    assert forecast.mean == [0.0] * 84
    assert forecast.upper_95 == [0.0] * 84
    assert forecast.blocks is not None
    assert forecast.blocks.mean == [0.0] * 12
    assert backtest([0.0] * 60, DAILY).message == "every held-back period was zero: no percentage error"


def test_weekly_totals_of_a_daily_forecast_sum_the_means_with_narrower_intervals_than_summed_bounds():
    forecast = forecast_series(weekly_pattern_with_trend(200), 84, season=7, min_history=21, block=7)
    weeks = forecast.blocks
    assert weeks is not None
    assert len(weeks.mean) == 12
    assert weeks.mean[0] == pytest.approx(sum(forecast.mean[:7]))
    # Daily errors partly cancel within a week: its 95% bound is below the sum of the days' bounds.
    assert weeks.upper_95[0] < sum(forecast.upper_95[:7])
    assert weeks.lower_95[0] < weeks.mean[0] < weeks.upper_95[0]
    assert weeks.upper_95[-1] - weeks.lower_95[-1] > weeks.upper_95[0] - weeks.lower_95[0]  # wider further out


def test_mape_skips_zero_actuals_and_says_how_many():
    assert wape([100, 0, 200], [110, 5, 150]) == pytest.approx(65 / 3)
    assert wape([0, 0], [1, 2]) is None
    error, skipped = mape([100, 0, 200], [110, 5, 150])
    assert error == pytest.approx(17.5)
    assert skipped == 1
    assert mape([0, 0], [1, 2]) == (None, 2)
    assert coverage([1, 5, 10], [0, 0, 0], [4, 5, 9]) == pytest.approx(200 / 3)


def test_series_helpers_fill_carry_and_block_days():
    days = days_between(date(2025, 1, 1), date(2025, 1, 5))
    assert len(days) == 5
    points = {date(2025, 1, 2): 3.0, date(2025, 1, 4): 5.0}
    assert filled(days, points) == [0.0, 3.0, 0.0, 5.0, 0.0]
    assert carried(days, points) == [None, 3.0, 3.0, 5.0, 5.0]
    values = list(range(1, 17))  # 16 days: two whole weeks end at the last day, the first 2 days are left out
    assert blocks_of(values) == [sum(range(3, 10)), sum(range(10, 17))]
    many = days_between(date(2025, 1, 1), date(2025, 1, 16))
    assert block_starts(many) == [date(2025, 1, 3), date(2025, 1, 10)]
    assert seasonal_naive([1, 2, 3, 4, 5, 6, 7, 8], 9, 7) == [2, 3, 4, 5, 6, 7, 8, 2, 3]
    assert seasonal_naive([4.0], 3, 7) == [4.0, 4.0, 4.0]


def test_a_flavors_forecast_adds_the_backlog_to_its_first_week_and_carries_todays_capacity():
    values = weekly_pattern_with_trend(120)
    today = date(2025, 5, 1)
    without = forecast_flavor(history(values, accelerators=100), DAILY, today)
    backlog = 700.0
    with_backlog = forecast_flavor(history(values, accelerators=100, backlog=backlog), DAILY, today)
    assert with_backlog.model == without.model
    assert with_backlog.message == ""
    assert [p.start for p in with_backlog.forecast[:2]] == [today, today + timedelta(days=1)]
    for i in range(84):
        extra = backlog / BACKLOG_DAYS if i < BACKLOG_DAYS else 0.0
        assert with_backlog.forecast[i].demand == pytest.approx(without.forecast[i].demand + extra)
        assert with_backlog.forecast[i].upper_95 == pytest.approx(without.forecast[i].upper_95 + extra)
        assert with_backlog.forecast[i].capacity == 2400.0  # 100 accelerators all day
    assert len(with_backlog.weeks) == 12
    assert with_backlog.weeks[0].demand == pytest.approx(without.weeks[0].demand + backlog)
    assert with_backlog.weeks[1].demand == pytest.approx(without.weeks[1].demand)
    assert with_backlog.weeks[0].capacity == 16800.0
    # 120 days: half held back.
    assert (with_backlog.backtest.held_back, with_backlog.backtest.trained_on) == (60, 60)


def test_the_weeks_where_demand_may_pass_capacity_are_the_shortfall():
    values = weekly_pattern_with_trend(200)  # about 9,000 accelerator-hours a week by then, growing by 90 a week
    plenty = forecast_flavor(history(values, accelerators=200), DAILY, date(2025, 8, 1))
    assert plenty.shortfall == []
    tight = forecast_flavor(history(values, accelerators=57), DAILY, date(2025, 8, 1))  # 9,576 a week
    assert tight.shortfall, "demand passes 57 accelerators' 9,576 hours a week"
    assert {w.exceeds for w in tight.shortfall} <= {"forecast", "80%", "95%"}
    assert all(w.upper_95 > w.capacity for w in tight.shortfall)
    # Demand grows toward capacity: first only its upper bound passes, in the end the forecast itself does.
    first, last = tight.shortfall[0], tight.shortfall[-1]
    assert first.exceeds in ("80%", "95%")
    assert first.demand <= first.capacity
    assert last.exceeds == "forecast"
    assert last.demand > last.capacity


def test_the_six_month_forecast_is_weekly_from_whole_weeks_ending_yesterday():
    values = weekly_pattern_with_trend(200)
    today = date(2025, 8, 1)
    result = forecast_flavor(history(values, accelerators=100, backlog=500.0), WEEKLY, today)
    assert result.period == "week"
    assert len(result.history) == 28  # 200 days: 28 whole weeks, the first 4 days left out
    assert result.history[-1].start + timedelta(days=7) == date(2025, 1, 1) + timedelta(days=200)
    assert result.history[-1].capacity == 16800.0
    assert len(result.forecast) == 26
    assert result.forecast[1].start == today + timedelta(days=7)
    assert result.forecast[0].backlog == 500.0
    assert result.forecast[1].backlog == 0.0
    assert result.weeks == result.forecast
    assert result.capacity == 16800.0
    assert result.backtest.held_back == 14  # 28 weeks: half held back
