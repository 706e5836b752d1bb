"""Demand against capacity per flavor: history from the meter and the queue, one daily forecast for the next
26 weeks with calibrated 80 and 95% intervals, backtested from many origins, and split among teams.

**Demand** of a flavor on a UTC day, in accelerator-hours, is what was used plus what waited:

- *used*: the meter's usage records of the day, seconds x thousandths of accelerators.
- *queued*: a waiting job holds out workers x accelerators x share accelerators, from its submission until
  its first attempt's admission, from each requeue (the end of an attempt) until the next admission, and
  from the last requeue or its submission until now (still waiting) or until it was cancelled. Each wait
  counts on the days it covers.

A job's flavor is the first accelerator type it asks for; else the flavor its attempt ran on (the attempt
its wait ended in; for a job still waiting, its last attempt); else its queue's first preferred flavor; else
the organization's largest flavor in the fleet. A job that asks for no accelerators is no demand.

**The pending queue**: the jobs waiting now ask for workers x accelerators x share x time limit accelerator-
hours not served yet (a requeued job's whole limit: what it still needs is not known). That backlog is added
to the forecast's first week, a seventh on each of its first seven days, mean and bounds alike.

**Capacity** of a flavor on a day: its capacity records, accelerators x seconds present. A day without records
after the first one carries the day before (the meter did not run; the fleet did); before the first record
it is unknown. Ahead, capacity is the capacity plan's (``FlavorHistory.plan``: today's fleet with the orders,
retirements and commitments of the plan on their days), else today's fleet carried forward.

**One model for every horizon.** Demand is forecast by the day, 26 weeks ahead, once; the 12-week view shows
its first 84 days and the 6-month view its 26 weekly totals, so a week's figure is the same in both (the
weekly total is the sum of the days, exactly). The forecast is a weighted combination of three simple
forecasts of the daily series (``METHODS``): the last week repeated (seasonal naive), the Theta method (simple
exponential smoothing with half the history's linear drift) and the median of the last 28 days. Each lead
bucket (week 1, weeks 2-4, weeks 5-26) weighs each method by the inverse square of its error there in the
backtests (WAPE of weekly totals); before any backtest the weights are equal. These three and that rule were
chosen on two of the Philly trace's virtual clusters, and hold on the other two (``tests/bench/bench_forecast.py``;
``docs/billing.md`` has the table).

**Backtests from rolling origins**: from every origin (a day with at least ``MIN_HISTORY`` days before it and a
whole week after it, at most ``MAX_ORIGINS`` of them evenly spaced, the latest last) the combination forecasts
what came after, weighted as it would have been on that day (only errors seen by then count). Scores per
horizon of 1, 4 and 12 weeks: the WAPE of weekly totals (all absolute errors over all demand) over every
origin and week of the horizon that the history holds, beside the same of the seasonal naive forecast.

**Intervals are calibrated on those backtests** (split conformal): the score of a forecast is
``|log((actual + e) / (forecast + e))|`` (``e`` is a hundredth of the mean demand before the origin, so zeros
stay finite); an interval at level L from scores s_1..s_n is ``(forecast + e) x exp(-q) - e`` to
``(forecast + e) x exp(q) - e``, ``q`` the ceil((n + 1) L)-th smallest score, per lead bucket, for days and
for weekly totals apart. A bucket with too few scores for a level (4 for 80%, 19 for 95%) borrows the nearest
shorter bucket's, and the forecast says so. The coverage reported is honest: the interval of each backtest was
calibrated on the scores of earlier backtests only.

**Teams**: a team's forecast of a flavor is the flavor's forecast times the team's share of its demand over
the 28 days before the origin, so the teams' forecasts add up to the flavor's; each team's backtest and
intervals are its own (scores of its own errors).

This module is the arithmetic, without a database; ``forecast_history`` reads the history and caches an
organization's forecast.

Size: the forecast arithmetic without a database: methods, their combination, the rolling-origin backtest that
weighs them and calibrates the intervals, the teams' split and a flavor's forecast against its capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, TypeVar

import numpy as np

LEVELS = (80, 95)
#: The pending queue's backlog is spread over the forecast's first this many days.
BACKLOG_DAYS = 7
#: How far the forecast reaches, in weeks.
AHEAD_WEEKS = 26
AHEAD_DAYS = 7 * AHEAD_WEEKS
#: Days of history needed to forecast at all (two weeks: the seasonal naive forecast repeats the last one).
MIN_HISTORY = 14
#: Backtest origins, at most (evenly spaced over the history, the latest last).
MAX_ORIGINS = 60
#: The median and the teams' shares read the last this many days.
WINDOW = 28
#: The horizons the backtest scores, in weeks.
SCORED_WEEKS = (1, 4, 12)
#: Lead buckets by week (0-based first week, last week): weights and intervals are per bucket.
BUCKETS = ((0, 0), (1, 3), (4, AHEAD_WEEKS - 1))
BUCKET_WORDS = ("week 1", "weeks 2-4", f"weeks 5-{AHEAD_WEEKS}")
#: Conformal scores weigh a half at this age, in days.
HALF_LIFE = 28
#: Scores of forecasts k weeks ahead (1-based) are divided by k to this power to be pooled with the first week's.
GROWTH = 0.25
#: Methods are weighed by their backtest error to this power (inverse).
WEIGHT_POWER = 2
#: A forecast is called unreliable past this 4-week WAPE, or an interval past this many points off nominal.
UNRELIABLE_WAPE = 50.0
UNRELIABLE_COVERAGE = 10.0
#: ... or when the 80% interval's upper bound passes this many times the forecast (too wide to plan on).
WIDE = 3.0
#: The longest history the Theta method fits (older days change little and cost time).
FIT_DAYS = 365
T = TypeVar("T")


# --- the methods (pure) ---------------------------------------------------------------------------------------


def seasonal_naive(history: np.ndarray[Any, Any], days: int) -> np.ndarray[Any, Any]:
    """The last 7 days repeated (the last value when shorter)."""
    last = history[-7:] if len(history) >= 7 else history[-1:]
    return np.resize(last, days).astype(float)


_ALPHAS = np.arange(0.02, 1.0, 0.02)


def _smoothed(history: np.ndarray[Any, Any]) -> tuple[float, float]:
    """Simple exponential smoothing's (alpha, last level), alpha the least squared one-step error on a grid."""
    level = np.full(len(_ALPHAS), float(history[0]))
    squared = np.zeros(len(_ALPHAS))
    for value in history[1:]:
        error = value - level
        squared += error * error
        level += _ALPHAS * error
    best = int(np.argmin(squared))
    return float(_ALPHAS[best]), float(level[best])


def theta(history: np.ndarray[Any, Any], days: int) -> np.ndarray[Any, Any]:
    """The Theta method (Assimakopoulos & Nikolopoulos; Hyndman & Billah's form): simple exponential smoothing
    plus half the linear trend's slope, cut at 0."""
    y = history[-FIT_DAYS:]
    if len(y) < 2:
        return np.full(days, float(y[-1]))
    alpha, level = _smoothed(y)
    slope = float(np.polyfit(np.arange(len(y)), y, 1)[0])
    h = np.arange(1, days + 1)
    drift = 0.5 * slope * (h - 1 + 1 / alpha - (1 - alpha) ** len(y) / alpha)
    out: np.ndarray[Any, Any] = np.maximum(0.0, level + drift)
    return out


def recent_median(history: np.ndarray[Any, Any], days: int) -> np.ndarray[Any, Any]:
    """The median day of the last ``WINDOW`` days, every day (robust to a burst)."""
    return np.full(days, float(np.median(history[-WINDOW:])))


METHODS = {"seasonal naive": seasonal_naive, "Theta": theta, "28-day median": recent_median}
NAMES = list(METHODS)


def method_paths(history: np.ndarray[Any, Any], days: int) -> np.ndarray[Any, Any]:
    """Each method's forecast of the next ``days`` days: an array (method, day)."""
    return np.vstack([method(history, days) for method in METHODS.values()])


# --- scoring helpers (pure) -----------------------------------------------------------------------------------


def wape(actual: Sequence[float], predicted: Sequence[float]) -> float | None:
    """Weighted absolute percentage error: the sum of absolute errors over the sum of actuals; None when that
    is zero."""
    total = sum(actual)
    errors = sum(abs(a - p) for a, p in zip(actual, predicted, strict=True))
    return float(100 * errors / total) if total > 0 else None


def coverage(actual: Sequence[float], lower: Sequence[float], upper: Sequence[float]) -> float:
    """The percentage of ``actual`` within [lower, upper]."""
    inside = sum(1 for a, lo, hi in zip(actual, lower, upper, strict=True) if lo <= a <= hi)
    return 100 * inside / len(actual) if actual else 0.0


def bucket_of_week(week: int) -> int:
    return next(i for i, (first, last) in enumerate(BUCKETS) if first <= week <= last)


#: Each day's bucket, by its 0-based index ahead.
DAY_BUCKET = np.array([bucket_of_week(d // 7) for d in range(AHEAD_DAYS)])
WEEK_BUCKET = np.array([bucket_of_week(k) for k in range(AHEAD_WEEKS)])


def weighted_quantile(scores: np.ndarray[Any, Any], ages: np.ndarray[Any, Any], level: int) -> float | None:
    """Non-exchangeable split conformal (Barber, Candes, Ramdas & Tibshirani, 2023): the least score whose
    weight and the weights of the smaller ones reach ``level`` percent of all weights plus the new forecast's
    own (1, at +infinity); a score ``HALF_LIFE`` days old weighs a half, so the intervals follow the errors of
    late. None when the weights are too few to reach it."""
    if len(scores) == 0:
        return None
    order = np.argsort(scores)
    weights = 0.5 ** (ages[order] / HALF_LIFE)
    reached = np.cumsum(weights) / (weights.sum() + 1.0) >= level / 100
    return float(scores[order][np.argmax(reached)]) if reached.any() else None


def _score(actual: Any, predicted: Any, epsilon: Any) -> Any:
    return np.abs(np.log((actual + epsilon) / (predicted + epsilon)))


def _bounds(mean: Any, q: Any, epsilon: Any) -> tuple[Any, Any]:
    return np.maximum(0.0, (mean + epsilon) * np.exp(-q) - epsilon), (mean + epsilon) * np.exp(q) - epsilon


# --- calibration ----------------------------------------------------------------------------------------------


def growth(week: Any) -> Any:
    """How much wider an interval is ``week`` weeks ahead (0-based) than in the first week: scores of every lead
    are divided by it to be pooled, and quantiles multiplied by it."""
    return (np.asarray(week) + 1.0) ** GROWTH


@dataclass
class Scores:
    """Scores of backtested forecasts (days or weekly totals), each divided by its lead's ``growth``, with when
    it became known (the index of the day after its target)."""

    known: list[int] = field(default_factory=list)
    score: list[float] = field(default_factory=list)

    def add(self, known: Any, score: Any) -> None:
        self.known.extend(int(k) for k in known)
        self.score.extend(float(s) for s in score)

    def quantiles(self, by: int) -> dict[int, float | None]:
        """Per level, ``weighted_quantile`` of the scores known by day ``by``, weighted by their age."""
        known, score = np.asarray(self.known, dtype=int), np.asarray(self.score, dtype=float)
        seen = known <= by
        return {level: weighted_quantile(score[seen], by - known[seen], level) for level in LEVELS}


def _intervals(
    mean: np.ndarray[Any, Any], weeks: np.ndarray[Any, Any], quantiles: Mapping[int, float | None], epsilon: float
) -> dict[str, np.ndarray[Any, Any]]:
    """Lower and upper bounds at each level for forecasts ``weeks`` ahead (0-based); NaN where a level has no
    calibration."""
    out: dict[str, np.ndarray[Any, Any]] = {}
    for level in LEVELS:
        q = quantiles[level]
        if q is None:
            out[f"lower_{level}"] = out[f"upper_{level}"] = np.full(len(mean), np.nan)
            continue
        out[f"lower_{level}"], out[f"upper_{level}"] = _bounds(mean, q * growth(weeks), epsilon)
    return out


# --- the rolling-origin backtest --------------------------------------------------------------------------------


def origins_of(n: int) -> list[int]:
    """Backtest origins of a history of ``n`` days: indexes with ``MIN_HISTORY`` days before and a whole week
    after, at most ``MAX_ORIGINS`` evenly spaced, the latest last."""
    last = n - 7
    if last < MIN_HISTORY:
        return []
    stride = max(1, math.ceil((last - MIN_HISTORY + 1) / MAX_ORIGINS))
    return list(range(last, MIN_HISTORY - 1, -stride))[::-1]


def weekly(path: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Totals of whole weeks of a path (a trailing part week left out); along the last axis."""
    weeks = path.shape[-1] // 7
    out: np.ndarray[Any, Any] = path[..., : weeks * 7].reshape(*path.shape[:-1], weeks, 7).sum(axis=-1)
    return out


def _epsilon(history: np.ndarray[Any, Any]) -> float:
    """A hundredth of the mean day before an origin (a tiny floor when there was no demand)."""
    return max(0.01 * float(np.mean(history)), 1e-6)


@dataclass(frozen=True)
class Score:
    """How the forecast did over its first ``weeks`` weeks, from every backtest origin."""

    weeks: int
    #: (origin, week) pairs scored, and of them those with calibrated intervals.
    pairs: int = 0
    calibrated: int = 0
    wape: float | None = None
    #: The seasonal naive forecast's WAPE on the same pairs: what the forecast should beat.
    baseline_wape: float | None = None
    coverage_80: float | None = None
    coverage_95: float | None = None


@dataclass(frozen=True)
class Backtest:
    """The rolling-origin backtest of a series' forecast: scores per horizon, and of the daily values over the
    first 12 weeks."""

    origins: int = 0
    first: int = 0
    stride: int = 0
    scores: tuple[Score, ...] = ()
    daily_wape: float | None = None
    daily_coverage_80: float | None = None
    daily_coverage_95: float | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message

    def score(self, weeks: int) -> Score | None:
        return next((s for s in self.scores if s.weeks == weeks), None)

    @property
    def headline(self) -> Score | None:
        """The 4-week score: what the page leads with (the 1-week one when the history holds no more)."""
        four = self.score(4)
        return four if four is not None and four.pairs else self.score(1)


@dataclass
class _Pairs:
    """Forecasts of weekly totals and of days, and their actuals, for scoring."""

    week: list[int] = field(default_factory=list)
    actual: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    lower: dict[int, list[float]] = field(default_factory=lambda: {level: [] for level in LEVELS})
    upper: dict[int, list[float]] = field(default_factory=lambda: {level: [] for level in LEVELS})


def _score_pairs(pairs: _Pairs, weeks: int) -> Score:
    chosen = [i for i, k in enumerate(pairs.week) if k < weeks]
    actual = [pairs.actual[i] for i in chosen]
    coverages: dict[int, float | None] = {}
    calibrated = 0
    for level in LEVELS:
        kept = [i for i in chosen if not math.isnan(pairs.lower[level][i])]
        calibrated = len(kept) if level == LEVELS[0] else calibrated
        inside = [pairs.actual[i] for i in kept]
        lower = [pairs.lower[level][i] for i in kept]
        upper = [pairs.upper[level][i] for i in kept]
        coverages[level] = coverage(inside, lower, upper) if kept else None
    return Score(
        weeks=weeks,
        pairs=len(chosen),
        calibrated=calibrated,
        wape=wape(actual, [pairs.predicted[i] for i in chosen]) if chosen else None,
        baseline_wape=wape(actual, [pairs.baseline[i] for i in chosen]) if chosen else None,
        coverage_80=coverages[80],
        coverage_95=coverages[95],
    )


@dataclass(frozen=True)
class Combined:
    """A series' forecast from today: daily mean and bounds for ``AHEAD_DAYS``, weekly totals and theirs, the
    methods' weights per bucket, which bucket each interval was calibrated on, and the backtest."""

    mean: list[float]
    bounds: dict[str, list[float]]
    weeks: list[float]
    week_bounds: dict[str, list[float]]
    weights: list[dict[str, float]]
    backtest: Backtest


class Track:
    """A series' rolling-origin run: every origin's methods' forecasts, the weights each origin would have used,
    the combination's forecasts and the calibration of their intervals; then today's forecast."""

    def __init__(self, values: Sequence[float] | np.ndarray[Any, Any]) -> None:
        self.values = np.asarray(values, dtype=float)
        n = len(self.values)
        self.origins = origins_of(n)
        #: Per origin: the methods' forecasts of the days the history holds after it (method, day).
        self.paths = [method_paths(self.values[:t], min(AHEAD_DAYS, n - t)) for t in self.origins]
        # The methods' weekly errors as they became known: (known day, bucket, method, |error|, actual).
        events: list[tuple[int, int, int, float, float]] = []
        for t, paths in zip(self.origins, self.paths, strict=True):
            actual = weekly(self.values[t : t + paths.shape[1]])
            for k, total in enumerate(actual):
                for m, predicted in enumerate(weekly(paths)[:, k]):
                    events.append((t + 7 * (k + 1), int(WEEK_BUCKET[k]), m, abs(total - predicted), total))
        self.events = np.array(events, dtype=float).reshape(-1, 5)
        #: Per origin: the weights it used (bucket, method), and its combined forecast of the days after it.
        self.weights = [self.weights_by(t) for t in self.origins]
        self.combined = [
            np.einsum("dm,md->d", w[DAY_BUCKET[: p.shape[1]]], p) for w, p in zip(self.weights, self.paths, strict=True)
        ]

    def weights_by(self, day: int) -> np.ndarray[Any, Any]:
        """The methods' weights per bucket from the errors known by ``day`` (bucket, method): inverse error to the
        ``WEIGHT_POWER``; a bucket without errors borrows the nearest shorter one's; equal when none."""
        count = len(BUCKETS) * len(METHODS)
        known = self.events[self.events[:, 0] <= day] if len(self.events) else self.events
        index = (known[:, 1] * len(METHODS) + known[:, 2]).astype(int)
        errors = np.bincount(index, weights=known[:, 3], minlength=count).reshape(len(BUCKETS), len(METHODS))
        actual = np.bincount(index, weights=known[:, 4], minlength=count).reshape(len(BUCKETS), len(METHODS))
        weights = np.full((len(BUCKETS), len(METHODS)), 1 / len(METHODS))
        for b in range(len(BUCKETS)):
            source = next((s for s in range(b, -1, -1) if actual[s, 0] > 0), None)
            if source is None:
                continue
            inverse = (actual[source] / np.maximum(errors[source], 1e-9 * actual[source])) ** WEIGHT_POWER
            weights[b] = inverse / inverse.sum()
        return weights

    def evaluate(
        self, actual: np.ndarray[Any, Any], forecasts: list[np.ndarray[Any, Any]], baselines: list[Any]
    ) -> tuple[Backtest, Scores, Scores]:
        """Score ``forecasts`` (one a backtest origin, of the days after it) against ``actual``: each origin's
        intervals calibrated on the scores known by then. Gives the backtest and every score (days, weeks)."""
        if not self.origins:
            return (
                Backtest(message=f"not enough history to backtest ({len(actual)} days; needs {MIN_HISTORY + 7})"),
                Scores(),
                Scores(),
            )
        days, weeks = Scores(), Scores()
        week_pairs, day_pairs = _Pairs(), _Pairs()
        for t, forecast, baseline in zip(self.origins, forecasts, baselines, strict=True):
            epsilon = _epsilon(actual[:t])
            ahead = len(forecast)
            held = actual[t : t + ahead]
            for scores, pairs, unit in ((days, day_pairs, 1), (weeks, week_pairs, 7)):
                if unit == 1:
                    truth, mean, base = held[: 7 * 12], forecast[: 7 * 12], baseline[: 7 * 12]
                else:
                    truth, mean, base = weekly(held), weekly(forecast), weekly(baseline)
                index = np.arange(len(truth))
                lead = index // (7 // unit)
                bounds = _intervals(mean, lead, scores.quantiles(by=t), epsilon * unit)
                pairs.week.extend(int(k) for k in lead)
                pairs.actual.extend(float(v) for v in truth)
                pairs.predicted.extend(float(v) for v in mean)
                pairs.baseline.extend(float(v) for v in base)
                for level in LEVELS:
                    pairs.lower[level].extend(float(v) for v in bounds[f"lower_{level}"])
                    pairs.upper[level].extend(float(v) for v in bounds[f"upper_{level}"])
                scores.add(t + unit * (index + 1), _score(truth, mean, epsilon * unit) / growth(lead))
        daily = _score_pairs(day_pairs, 12)
        origins = self.origins
        test = Backtest(
            origins=len(origins),
            first=origins[0],
            stride=origins[1] - origins[0] if len(origins) > 1 else 1,
            scores=tuple(_score_pairs(week_pairs, w) for w in SCORED_WEEKS),
            daily_wape=daily.wape,
            daily_coverage_80=daily.coverage_80,
            daily_coverage_95=daily.coverage_95,
        )
        return test, days, weeks

    def baselines(self) -> list[np.ndarray[Any, Any]]:
        return [p[0] for p in self.paths]

    def today(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Today's weights (from every error known) and combined forecast of ``AHEAD_DAYS`` days."""
        weights = self.weights_by(len(self.values))
        paths = method_paths(self.values, AHEAD_DAYS)
        return weights, np.einsum("dm,md->d", weights[DAY_BUCKET], paths)


def _combined(
    mean: np.ndarray[Any, Any],
    weights: np.ndarray[Any, Any],
    backtest: Backtest,
    days: Scores,
    weeks: Scores,
    epsilon: float,
    today: int,
) -> Combined:
    daily = _intervals(mean, np.arange(AHEAD_DAYS) // 7, days.quantiles(today), epsilon)
    totals = weekly(mean)
    weekly_bounds = _intervals(totals, np.arange(AHEAD_WEEKS), weeks.quantiles(today), 7 * epsilon)

    def listed(bounds: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, list[float]]:
        return {key: [float(v) for v in values] for key, values in bounds.items()}

    return Combined(
        mean=[float(v) for v in mean],
        bounds=listed(daily),
        weeks=[float(v) for v in totals],
        week_bounds=listed(weekly_bounds),
        weights=[{name: float(w) for name, w in zip(NAMES, row, strict=True)} for row in weights],
        backtest=backtest,
    )


def _fitted(y: np.ndarray[Any, Any]) -> tuple[Track, np.ndarray[Any, Any], np.ndarray[Any, Any], Combined]:
    """A series' run of backtests, today's weights and mean, and its combined forecast with intervals."""
    track = Track(y)
    backtest, days, weeks = track.evaluate(y, track.combined, track.baselines())
    weights, mean = track.today()
    return track, weights, mean, _combined(mean, weights, backtest, days, weeks, _epsilon(y), len(y))


def forecast_values(values: Sequence[float]) -> Combined | str:
    """A series' combined forecast, its intervals and backtest; or why there is none."""
    y = np.asarray(values, dtype=float)
    if len(y) < MIN_HISTORY:
        return f"not enough history ({len(y)} days; needs {MIN_HISTORY})"
    return _fitted(y)[3]


def cache_key(organization_id: int, horizon: str, day: date) -> str:
    """Where an organization's forecast for ``horizon`` made on ``day`` is cached (``forecast_history``)."""
    return f"billing:forecast:{organization_id}:{horizon}:{day.isoformat()}"


def forecast_shares(
    track: Track,
    fleet_mean: np.ndarray[Any, Any],
    weights: np.ndarray[Any, Any],
    team: Sequence[float],
    total: np.ndarray[Any, Any],
) -> Combined:
    """A team's forecast: the fleet's times the team's share of demand over the ``WINDOW`` days before each
    origin (and before today); backtested and calibrated on the team's own errors."""
    mine, everyone = np.asarray(team, dtype=float), np.asarray(total, dtype=float)

    def share(t: int) -> float:
        for start in (t - WINDOW, 0):
            whole = float(everyone[max(0, start) : t].sum())
            if whole > 0:
                return float(mine[max(0, start) : t].sum()) / whole
        return 0.0

    forecasts = [share(t) * c for t, c in zip(track.origins, track.combined, strict=True)]
    baselines = [share(t) * b for t, b in zip(track.origins, track.baselines(), strict=True)]
    backtest, days, weeks = track.evaluate(mine, forecasts, baselines)
    return _combined(share(len(mine)) * fleet_mean, weights, backtest, days, weeks, _epsilon(mine), len(mine))


# --- series from days (pure) --------------------------------------------------------------------------------


def days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def filled(days: Sequence[date], points: Mapping[date, float]) -> list[float]:
    """One value a day, 0 where there is none."""
    return [points.get(d, 0.0) for d in days]


def carried(days: Sequence[date], points: Mapping[date, float]) -> list[float | None]:
    """One value a day, a day without one carrying the day before; None before the first."""
    out: list[float | None] = []
    last: float | None = None
    for d in days:
        last = points.get(d, last)
        out.append(last)
    return out


def whole_blocks(values: Sequence[T], size: int = 7) -> list[Sequence[T]]:
    """``size`` consecutive values at a time, the last block ending at the last value (a partial first block
    is left out)."""
    return [values[start : start + size] for start in range(len(values) % size, len(values), size)]


def blocks_of(values: Sequence[float], size: int = 7) -> list[float]:
    """Totals of ``whole_blocks``."""
    return [float(sum(block)) for block in whole_blocks(values, size)]


def block_starts(days: Sequence[date], size: int = 7) -> list[date]:
    return [block[0] for block in whole_blocks(days, size)]


@dataclass
class FlavorHistory:
    """A flavor's days from its first record (or wait) to yesterday: used and queued accelerator-hours, and
    capacity (None before its first capacity record); the fleet's accelerators now; the pending backlog; per
    team, its demand on those days and its part of the backlog; the capacity plan's accelerators on each day
    ahead (empty: today's fleet carried forward)."""

    flavor: str
    days: list[date]
    used: list[float]
    queued: list[float]
    capacity: list[float | None]
    accelerators: int = 0
    backlog: float = 0.0
    teams: dict[str, list[float]] = field(default_factory=dict)
    team_backlog: dict[str, float] = field(default_factory=dict)
    plan: list[float] = field(default_factory=list)

    @property
    def demand(self) -> list[float]:
        return [u + q for u, q in zip(self.used, self.queued, strict=True)]


# --- a flavor's forecast ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Horizon:
    """A view of the forecast: its first ``weeks`` weeks, by the day or by the week."""

    key: str
    label: str
    period: str
    weeks: int

    @property
    def days(self) -> int:
        """Days in one period."""
        return 1 if self.period == "day" else 7

    @property
    def steps(self) -> int:
        return self.weeks * 7 // self.days


HORIZONS: dict[str, Horizon] = {
    "12w": Horizon("12w", "Next 12 weeks", "day", 12),
    "6m": Horizon("6m", "Next 6 months", "week", AHEAD_WEEKS),
}


@dataclass(frozen=True)
class Point:
    """A period of history (a day, or 7 days from ``start``), in accelerator-hours."""

    start: date
    demand: float
    used: float
    queued: float
    capacity: float | None


@dataclass(frozen=True)
class Predicted:
    """A forecast period: demand's mean and bounds (backlog included) against capacity, in accelerator-hours.
    A bound is None where too few backtests calibrate it."""

    start: date
    demand: float
    lower_80: float | None
    upper_80: float | None
    lower_95: float | None
    upper_95: float | None
    capacity: float
    #: Of the pending backlog, what this period carries (in every figure above).
    backlog: float = 0.0

    @property
    def exceeds(self) -> str:
        """Which figure passes capacity: "forecast" (the mean), "80%" or "95%" (the upper bound), or ""."""
        if self.demand > self.capacity:
            return "forecast"
        if self.upper_80 is not None and self.upper_80 > self.capacity:
            return "80%"
        if self.upper_95 is not None and self.upper_95 > self.capacity:
            return "95%"
        return ""


@dataclass(frozen=True)
class TeamForecast:
    """A team's part of a flavor's forecast, with its own backtest."""

    team: str
    weeks: list[Predicted]
    backtest: Backtest
    verdict: str


@dataclass(frozen=True)
class FlavorForecast:
    flavor: str
    horizon: str
    period: str
    history: list[Point]
    forecast: list[Predicted]
    #: The forecast in weeks from today (the same weeks in every view).
    weeks: list[Predicted]
    backtest: Backtest
    #: The methods' weights per lead bucket (``BUCKET_WORDS``) today.
    weights: list[dict[str, float]] = field(default_factory=list)
    #: In words: how far the forecast can be trusted.
    verdict: str = ""
    reliable: bool = False
    teams: list[TeamForecast] = field(default_factory=list)
    #: The fleet's accelerators now, and what they give a period.
    accelerators: int = 0
    capacity: float = 0.0
    backlog: float = 0.0
    #: Whether capacity ahead follows a capacity plan (else today's fleet carried forward).
    planned: bool = False
    message: str = ""

    @property
    def shortfall(self) -> list[Predicted]:
        """The weeks where demand's mean or an upper bound passes capacity."""
        return [w for w in self.weeks if w.exceeds]

    @property
    def model(self) -> str:
        return "weighted Theta, 28-day median and seasonal naive" if self.weights else ""


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def verdict(test: Backtest, week: tuple[float, float | None, float | None] | None = None) -> tuple[str, bool]:
    """How far a forecast with this backtest can be trusted, in words, and whether it can at all; ``week`` is the
    forecast of its 4th week (mean, 80% bounds), whose interval may be too wide to plan on."""
    if not test.ok:
        return f"Not backtested: {test.message}. Treat it as a guess.", False
    score = test.headline
    assert score is not None
    horizon = f"{score.weeks} week{'s' if score.weeks > 1 else ''}"
    facts = (
        f"In {test.origins} backtests it was off by {_percent(score.wape)} of demand over {horizon} "
        f"(repeating the last week: {_percent(score.baseline_wape)})"
    )
    problems = []
    if score.wape is None:
        problems.append("there was no demand to score it on")
    elif score.wape > UNRELIABLE_WAPE:
        problems.append(f"an error over {UNRELIABLE_WAPE:.0f}% is too large to plan on")
    if score.wape is not None and score.baseline_wape is not None and score.wape >= score.baseline_wape:
        problems.append("it did no better than repeating the last week")
    cautious = []
    for level in LEVELS:
        held = getattr(score, f"coverage_{level}")
        if held is None:
            problems.append(f"too few backtests to calibrate its {level}% interval")
        elif held < level - UNRELIABLE_COVERAGE:
            problems.append(f"its {level}% interval held only {_percent(held)} of the backtested weeks")
        elif held > level + UNRELIABLE_COVERAGE:
            cautious.append(f"its {level}% interval held {_percent(held)}")
    if test.origins < 8:
        problems.append(f"{test.origins} backtests are too few to judge it")
    if week is not None and week[2] is not None and week[0] > 0 and week[2] > WIDE * week[0]:
        low = f"{week[1]:,.0f}" if week[1] is not None else "?"
        problems.append(
            f"its 80% interval is too wide to plan on ({low} to {week[2]:,.0f} in its 4th week, around {week[0]:,.0f})"
        )
    if problems:
        return f"Unreliable: {'; '.join(problems)}. {facts}.", False
    wide = f" The intervals are cautious ({' and '.join(cautious)}): wider than the errors were." if cautious else ""
    return (
        f"{facts}; its 80% and 95% intervals held {_percent(score.coverage_80)} and "
        f"{_percent(score.coverage_95)} of the backtested weeks.{wide}",
        True,
    )


def _predicted(
    starts: Sequence[date],
    mean: Sequence[float],
    bounds: Mapping[str, Sequence[float]],
    capacity: Sequence[float],
    backlog: Sequence[float],
) -> list[Predicted]:
    out = []
    for i, start in enumerate(starts):
        extra = backlog[i] if i < len(backlog) else 0.0

        def bound(key: str, i: int = i, extra: float = extra) -> float | None:
            value = bounds[key][i]
            return None if math.isnan(value) else value + extra

        out.append(
            Predicted(
                start,
                mean[i] + extra,
                bound("lower_80"),
                bound("upper_80"),
                bound("lower_95"),
                bound("upper_95"),
                capacity[i],
                extra,
            )
        )
    return out


def _history_points(history: FlavorHistory, horizon: Horizon) -> list[Point]:
    demand = history.demand
    if horizon.period == "day":
        return [
            Point(d, dem, u, q, c)
            for d, dem, u, q, c in zip(
                history.days, demand, history.used, history.queued, history.capacity, strict=True
            )
        ]
    capacity = [
        None if any(c is None for c in week) else float(sum(c for c in week if c is not None))
        for week in whole_blocks(history.capacity)
    ]
    return [
        Point(s, dem, u, q, c)
        for s, dem, u, q, c in zip(
            block_starts(history.days),
            blocks_of(demand),
            blocks_of(history.used),
            blocks_of(history.queued),
            capacity,
            strict=True,
        )
    ]


def forecast_flavor(history: FlavorHistory, horizon: Horizon, today: date) -> FlavorForecast:
    """One flavor's forecast seen through ``horizon`` from ``today`` on, with its backtest and its teams' parts
    (pure: no database)."""
    plan = history.plan or [float(history.accelerators)] * AHEAD_DAYS
    per_day = [accelerators * 24.0 for accelerators in plan]
    per_week = [sum(per_day[7 * k : 7 * k + 7]) for k in range(AHEAD_WEEKS)]
    base = FlavorForecast(
        flavor=history.flavor,
        horizon=horizon.key,
        period=horizon.period,
        history=_history_points(history, horizon),
        forecast=[],
        weeks=[],
        backtest=Backtest(message="no forecast"),
        accelerators=history.accelerators,
        capacity=history.accelerators * 24.0 * horizon.days,
        backlog=history.backlog,
        planned=bool(history.plan),
    )
    demand = history.demand
    if len(demand) < MIN_HISTORY:
        message = f"not enough history ({len(demand)} days; needs {MIN_HISTORY})"
        return FlavorForecast(**{**base.__dict__, "message": message, "verdict": f"No forecast: {message}."})
    y = np.asarray(demand, dtype=float)
    track, weights, mean, fleet = _fitted(y)
    backtest = fleet.backtest
    week_starts = [today + timedelta(days=7 * k) for k in range(AHEAD_WEEKS)]
    weekly_view = _predicted(week_starts, fleet.weeks, fleet.week_bounds, per_week, [history.backlog])
    if horizon.period == "day":
        starts = [today + timedelta(days=i) for i in range(horizon.steps)]
        spread = [history.backlog / BACKLOG_DAYS] * BACKLOG_DAYS
        forecast = _predicted(starts, fleet.mean, fleet.bounds, per_day, spread)
        shown_weeks = weekly_view[: horizon.weeks]
    else:
        forecast = weekly_view
        shown_weeks = weekly_view
    teams = []
    for team, values in sorted(history.teams.items()):
        part = forecast_shares(track, mean, weights, values, y)
        words, _ = verdict(part.backtest)
        team_weeks = _predicted(
            week_starts, part.weeks, part.week_bounds, per_week, [history.team_backlog.get(team, 0.0)]
        )
        teams.append(TeamForecast(team, team_weeks[: horizon.weeks], part.backtest, words))
    fourth = (fleet.weeks[3], fleet.week_bounds["lower_80"][3], fleet.week_bounds["upper_80"][3])
    words, reliable = verdict(backtest, tuple(None if math.isnan(v) else v for v in fourth))  # type: ignore[arg-type]
    return FlavorForecast(
        **{
            **base.__dict__,
            "forecast": forecast,
            "weeks": shown_weeks,
            "backtest": backtest,
            "weights": fleet.weights,
            "verdict": words,
            "reliable": reliable,
            "teams": teams,
        }
    )
