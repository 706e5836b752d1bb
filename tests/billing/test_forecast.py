"""The forecast's arithmetic on synthetic series, without a database: the methods and their weights, the
rolling-origin backtest, calibrated intervals, one forecast for every view, the teams' parts, the backlog, the
capacity plan and the verdict in words."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest

from billing.forecast import (
    AHEAD_DAYS,
    AHEAD_WEEKS,
    BACKLOG_DAYS,
    HALF_LIFE,
    HORIZONS,
    MAX_ORIGINS,
    Backtest,
    FlavorHistory,
    Score,
    Scores,
    Track,
    block_starts,
    blocks_of,
    carried,
    coverage,
    days_between,
    filled,
    forecast_flavor,
    forecast_values,
    origins_of,
    recent_median,
    seasonal_naive,
    theta,
    verdict,
    wape,
    weighted_quantile,
)

DAILY, WEEKLY = HORIZONS["12w"], HORIZONS["6m"]
PATTERN = np.array([1.0, 1.1, 1.15, 1.1, 1.0, 0.6, 0.5])  # a working week and a quiet weekend


def weekly_pattern_with_trend(days: int, noise: float = 40.0, seed: int = 1) -> list[float]:
    """Accelerator-hours a day: 1,000 growing by 2 a day, times the weekly pattern, plus normal noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    return list((1000 + 2 * t) * PATTERN[t % 7] + rng.normal(0, noise, days))


def history(values: list[float], accelerators: int = 100, backlog: float = 0.0, **extra: object) -> FlavorHistory:
    days = days_between(date(2025, 1, 1), date(2025, 1, 1) + timedelta(days=len(values) - 1))
    capacity: list[float | None] = [accelerators * 24.0] * len(values)
    return FlavorHistory("H100", days, values, [0.0] * len(values), capacity, accelerators, backlog, **extra)  # type: ignore[arg-type]


def test_the_methods_repeat_the_last_week_follow_the_trend_and_take_the_median():
    y = np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 9])
    assert list(seasonal_naive(y, 9)) == [3, 4, 5, 6, 7, 8, 9, 3, 4]
    assert list(seasonal_naive(np.array([4.0]), 3)) == [4.0, 4.0, 4.0]
    assert list(recent_median(np.array([1.0, 100, 2, 3]), 2)) == [2.5, 2.5]
    rising = theta(np.arange(100, dtype=float), 10)
    assert np.all(np.diff(rising) > 0)  # half the drift carries on
    assert theta(np.array([5.0, 0, 0, 0, 0, 0]), 60).min() == 0.0  # cut at 0


def test_a_trend_with_a_weekly_pattern_is_forecast_better_than_repeating_the_last_week():
    values = weekly_pattern_with_trend(365)
    result = forecast_values(values)
    assert not isinstance(result, str)
    assert len(result.mean) == AHEAD_DAYS
    assert len(result.weeks) == AHEAD_WEEKS
    test = result.backtest
    assert 50 <= test.origins <= MAX_ORIGINS
    four = test.score(4)
    assert four is not None
    assert four.wape is not None
    assert four.baseline_wape is not None
    assert four.wape < four.baseline_wape  # the last week repeated misses the growth
    assert four.wape < 5
    # The intervals were calibrated on earlier backtests only, and hold about what they say.
    assert four.coverage_80 is not None
    assert 65 <= four.coverage_80 <= 100
    assert four.coverage_95 is not None
    assert four.coverage_95 >= four.coverage_80
    # The level keeps growing.
    assert result.weeks[11] > result.weeks[0]
    for i in range(AHEAD_DAYS):
        bounds = result.bounds
        assert bounds["lower_95"][i] <= bounds["lower_80"][i] <= result.mean[i] <= bounds["upper_80"][i]
        assert bounds["upper_80"][i] <= bounds["upper_95"][i]


def test_intervals_widen_with_the_lead():
    result = forecast_values(weekly_pattern_with_trend(200))
    assert not isinstance(result, str)
    width = [result.week_bounds["upper_80"][k] - result.week_bounds["lower_80"][k] for k in range(AHEAD_WEEKS)]
    assert width[-1] > width[0]


def test_a_week_is_the_sum_of_its_days_and_every_view_is_the_same_forecast():
    values = weekly_pattern_with_trend(150)
    today = date(2025, 6, 1)
    daily = forecast_flavor(history(values), DAILY, today)
    weekly = forecast_flavor(history(values), WEEKLY, today)
    for k, week in enumerate(daily.weeks):
        days = daily.forecast[7 * k : 7 * k + 7]
        assert week.start == days[0].start
        assert week.demand == pytest.approx(sum(d.demand for d in days), rel=1e-9)  # the target: within 1%
    assert len(daily.weeks) == 12
    assert len(weekly.weeks) == len(weekly.forecast) == 26
    assert weekly.weeks[:12] == daily.weeks
    assert weekly.backtest == daily.backtest


def test_the_teams_forecasts_add_up_to_the_flavors():
    rng = np.random.default_rng(2)
    vision = np.array(weekly_pattern_with_trend(120)) * 0.7
    robotics = np.clip(rng.normal(200, 60, 120), 0, None)
    total = list(vision + robotics)
    found = forecast_flavor(
        history(
            total,
            backlog=50.0,
            teams={"Vision": list(vision), "Robotics": list(robotics)},
            team_backlog={"Robotics": 50.0},
        ),
        WEEKLY,
        date(2025, 5, 1),
    )
    assert [t.team for t in found.teams] == ["Robotics", "Vision"]
    for k, week in enumerate(found.weeks):
        assert sum(t.weeks[k].demand for t in found.teams) == pytest.approx(week.demand, rel=1e-9)
    assert found.teams[0].weeks[0].backlog == 50.0
    # Each team is backtested on its own demand.
    assert found.teams[0].backtest.origins == found.backtest.origins
    assert found.teams[0].backtest.score(4) != found.teams[1].backtest.score(4)
    assert found.teams[0].verdict


def test_backtest_origins_are_evenly_spaced_the_latest_last():
    assert origins_of(20) == []  # 14 days before and a week after: 21 days
    assert origins_of(21) == [14]
    assert origins_of(30) == list(range(14, 24))
    many = origins_of(400)
    assert len(many) <= MAX_ORIGINS
    assert many[-1] == 393
    assert len(set(np.diff(many))) == 1


def test_each_backtest_is_weighted_on_what_was_known_by_its_origin():
    values = weekly_pattern_with_trend(120)
    track = Track(values)
    # The first origin knows no error: equal weights.
    assert np.allclose(track.weights[0], 1 / 3)
    # A week after an origin, that origin's first week is known, and the weights move.
    assert not np.allclose(track.weights_by(track.origins[0] + 7), 1 / 3)
    weights, _ = track.today()
    assert np.allclose(weights.sum(axis=1), 1.0)
    # On a steady climb without a weekly pattern, Theta (which follows the trend) weighs most at every lead.
    rng = np.random.default_rng(4)
    climbing = Track(list(100 + 5 * np.arange(150) + rng.normal(0, 10, 150)))
    weights, _ = climbing.today()
    assert [int(np.argmax(row)) for row in weights] == [1, 1, 1]


def test_conformal_quantiles_need_enough_scores_and_weigh_recent_ones_more():
    scores = np.arange(1.0, 21.0)  # 20 scores, all new
    assert weighted_quantile(scores, np.zeros(20), 80) == 17.0  # ceil(21 x 0.8) = 17th
    assert weighted_quantile(scores, np.zeros(20), 95) == 20.0
    assert weighted_quantile(scores[:18], np.zeros(18), 95) is None  # 19 needed
    assert weighted_quantile(np.array([]), np.array([]), 80) is None
    # Old large errors weigh less than new small ones.
    mixed = np.array([1.0] * 10 + [10.0] * 10)
    ages = np.array([0.0] * 10 + [4 * HALF_LIFE] * 10)
    assert weighted_quantile(mixed, ages, 80) == 1.0
    held = Scores()
    held.add([5, 50], [1.0, 9.0])
    assert held.quantiles(10)[80] is None  # one score known by day 10: too few
    held.add([6, 7, 8, 9, 10] * 2, [1.0] * 10)
    assert held.quantiles(10)[80] == 1.0  # the score known on day 50 is not used on day 10


def test_a_short_history_says_how_much_is_needed_instead_of_failing():
    values = weekly_pattern_with_trend(10)
    assert forecast_values(values) == "not enough history (10 days; needs 14)"
    result = forecast_flavor(history(values), DAILY, date(2025, 1, 11))
    assert result.message == "not enough history (10 days; needs 14)"
    assert result.verdict == "No forecast: not enough history (10 days; needs 14)."
    assert (result.forecast, result.weeks, result.shortfall) == ([], [], [])
    assert len(result.history) == 10
    young = forecast_flavor(history(weekly_pattern_with_trend(16)), DAILY, date(2025, 1, 17))
    assert young.forecast
    assert young.backtest.message == "not enough history to backtest (16 days; needs 21)"
    assert young.verdict.startswith("Not backtested")
    assert young.forecast[0].upper_80 is None  # nothing to calibrate it on: said, not guessed


def test_bounds_are_cut_at_zero_and_no_demand_forecasts_none():
    rng = np.random.default_rng(3)
    values = list(np.clip(rng.normal(2, 5, 60), 0, None))  # mostly zero or small
    result = forecast_values(values)
    assert not isinstance(result, str)
    assert all(v >= 0 for key in ("lower_80", "lower_95") for v in result.bounds[key])
    nothing = forecast_values([0.0] * 60)
    assert not isinstance(nothing, str)
    assert max(nothing.mean) == 0.0
    assert max(nothing.week_bounds["upper_95"]) == pytest.approx(0.0, abs=1e-3)
    four = nothing.backtest.score(4)
    assert four is not None
    assert four.pairs > 0
    assert (four.wape, four.baseline_wape, four.coverage_80, four.coverage_95) == (None, None, 100.0, 100.0)


def test_scoring_helpers():
    assert wape([100, 0, 200], [110, 5, 150]) == pytest.approx(65 / 3)
    assert wape([0, 0], [1, 2]) is None
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


def test_a_flavors_forecast_adds_the_backlog_to_its_first_week_and_carries_todays_capacity():
    values = weekly_pattern_with_trend(120)
    today = date(2025, 5, 1)
    without = forecast_flavor(history(values, accelerators=100), DAILY, today)
    backlog = 700.0
    with_backlog = forecast_flavor(history(values, accelerators=100, backlog=backlog), DAILY, today)
    assert with_backlog.message == ""
    assert [p.start for p in with_backlog.forecast[:2]] == [today, today + timedelta(days=1)]
    for i in range(84):
        extra = backlog / BACKLOG_DAYS if i < BACKLOG_DAYS else 0.0
        assert with_backlog.forecast[i].demand == pytest.approx(without.forecast[i].demand + extra)
        upper, plain = with_backlog.forecast[i].upper_95, without.forecast[i].upper_95
        assert upper is not None
        assert plain is not None
        assert upper == pytest.approx(plain + extra)
        assert with_backlog.forecast[i].capacity == 2400.0  # 100 accelerators all day
    assert with_backlog.weeks[0].demand == pytest.approx(without.weeks[0].demand + backlog)
    assert with_backlog.weeks[1].demand == pytest.approx(without.weeks[1].demand)
    assert with_backlog.weeks[0].capacity == 16800.0
    assert not with_backlog.planned


def test_capacity_ahead_follows_the_plan_when_there_is_one():
    values = weekly_pattern_with_trend(120)
    plan = [100.0] * 30 + [150.0] * (AHEAD_DAYS - 30)  # 50 more accelerators arrive on day 30
    found = forecast_flavor(history(values, plan=plan), WEEKLY, date(2025, 5, 1))
    assert found.planned
    assert found.weeks[0].capacity == 16800.0
    assert found.weeks[4].capacity == 24 * (2 * 100 + 5 * 150)  # days 28-34
    assert found.weeks[5].capacity == 25200.0


def test_the_weeks_where_demand_may_pass_capacity_are_the_shortfall():
    values = weekly_pattern_with_trend(200)  # about 9,000 accelerator-hours a week by then, growing by 90 a week
    plenty = forecast_flavor(history(values, accelerators=200), DAILY, date(2025, 8, 1))
    assert plenty.shortfall == []
    tight = forecast_flavor(history(values, accelerators=57), DAILY, date(2025, 8, 1))  # 9,576 a week
    assert tight.shortfall, "demand passes 57 accelerators' 9,576 hours a week"
    first, last = tight.shortfall[0], tight.shortfall[-1]
    assert first.exceeds in ("80%", "95%")
    assert first.demand <= first.capacity
    assert last.exceeds == "forecast"
    assert last.demand > last.capacity


def test_the_verdict_says_in_words_why_a_forecast_cannot_be_trusted():
    good = Backtest(
        origins=40, scores=(Score(1, 40, 40, 10.0, 20.0, 80.0, 95.0), Score(4, 160, 160, 12.0, 25.0, 78.0, 94.0))
    )
    words, reliable = verdict(good)
    assert reliable
    assert words.startswith("In 40 backtests it was off by 12% of demand over 4 weeks (repeating the last week: 25%)")
    worse = Backtest(origins=40, scores=(Score(4, 160, 160, 61.0, 55.0, 31.0, 60.0),))
    words, reliable = verdict(worse)
    assert not reliable
    assert "an error over 50% is too large to plan on" in words
    assert "it did no better than repeating the last week" in words
    assert "its 80% interval held only 31% of the backtested weeks" in words
    words, reliable = verdict(Backtest(origins=40, scores=(Score(4, 160, 160, 12.0, 25.0, 99.0, 100.0),)))
    assert reliable  # too wide is said, and is no reason to distrust the forecast
    assert words.endswith("The intervals are cautious (its 80% interval held 99%): wider than the errors were.")
    assert verdict(Backtest(message="not enough history to backtest (16 days; needs 21)"))[1] is False
    words, reliable = verdict(good, (1000.0, 400.0, 3500.0))
    assert not reliable
    assert "its 80% interval is too wide to plan on (400 to 3,500 in its 4th week, around 1,000)" in words
    assert verdict(good, (1000.0, 700.0, 1400.0))[1]
