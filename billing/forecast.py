"""Demand against capacity per flavor: history from the meter and the queue, forecasts with prediction
intervals for the next 12 weeks and 6 months, and a backtest of each on held-back history.

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
it is unknown. Forecast capacity is today's fleet carried forward: the present nodes' accelerators, all day
every day. Orders and retirements are not known here; the what-if page replays such changes.

**Models** (statsmodels' ``ETSModel``, additive errors: days without demand rule multiplicative ones out): no,
additive or damped trend, with and without a seasonality of ``season`` periods when the history holds two
full seasons, chosen by AICc. Intervals (80 and 95%) are the model's own; a weekly total of the daily model
takes its interval from simulated paths; negative bounds are cut to 0. The 12-week horizon fits the daily
series (weekly seasonality) for 84 days; the 6-month one fits weekly totals (7-day blocks ending yesterday, so
that the last one is whole) for 26 weeks. History ends yesterday: today is not over.

**Backtest**: the last ``steps`` periods of the history are held back (fewer when it is short: at least half of
it, and at least 4 weeks of days or 8 weeks, are kept to train on, as a model trained on a sliver of the
history says little of one trained on all of it); the model is chosen and fitted on the rest as above, and its
forecast compared with them: the MAPE over the held-back periods with demand (a zero has no percentage error:
those are counted and said), the share of them inside the 80 and 95% intervals, and the MAPE of repeating the
last week (the last 7 days, or the last weekly total) as a baseline the model should beat.

This module is the arithmetic, without a database; ``forecast_history`` reads the history and caches an
organization's forecast.

Size: the forecast arithmetic without a database: candidate models, fitting, blocks, intervals and the backtests
that judge them; the backtest (``Backtest``, ``backtest``, ``mape``, ``wape``, ``coverage``) would split out first.
"""

from __future__ import annotations

import ctypes
import math
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from functools import cache
from typing import Any, TypeVar

import numpy as np
import pandas as pd

LEVELS = (80, 95)
#: The pending queue's backlog is spread over the forecast's first this many days.
BACKLOG_DAYS = 7
#: Simulated paths behind the intervals of weekly totals of a daily forecast.
PATHS = 2000


@dataclass(frozen=True)
class Horizon:
    """A forecast horizon and the series it is fitted on."""

    key: str
    label: str
    #: What one step of the series is: "day" or "week" (7 days).
    period: str
    steps: int
    #: Seasonal period in steps, tried when the history holds two full seasons.
    season: int
    #: Periods of history needed to forecast at all.
    min_history: int
    #: The backtest trains on at least this many periods, and holds back at least ``min_held``.
    min_train: int
    min_held: int

    @property
    def days(self) -> int:
        return 1 if self.period == "day" else 7

    def count(self, n: int) -> str:
        return f"{n} {self.period}{'' if n == 1 else 's'}"


HORIZONS: dict[str, Horizon] = {
    "12w": Horizon("12w", "Next 12 weeks", "day", 84, 7, min_history=21, min_train=28, min_held=7),
    "6m": Horizon("6m", "Next 6 months", "week", 26, 52, min_history=8, min_train=8, min_held=2),
}
SEASON_WORDS = {7: "weekly", 52: "yearly"}
T = TypeVar("T")


# --- fitting and forecasting a series (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Forecast:
    """A series' forecast: the mean and the 80 and 95% bounds per step (cut at 0), the model that made it, and
    with ``block``, totals of that many steps. ``message`` says why there is none (then the lists are empty)."""

    model: str = ""
    description: str = ""
    aicc: float | None = None
    mean: list[float] = field(default_factory=list)
    lower_80: list[float] = field(default_factory=list)
    upper_80: list[float] = field(default_factory=list)
    lower_95: list[float] = field(default_factory=list)
    upper_95: list[float] = field(default_factory=list)
    blocks: Forecast | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message


@dataclass(frozen=True)
class _Candidate:
    trend: str | None
    damped: bool
    seasonal: bool

    def code(self) -> str:
        trend = "N" if self.trend is None else ("Ad" if self.damped else "A")
        return f"ETS(A,{trend},{'A' if self.seasonal else 'N'})"

    def words(self, season: int) -> str:
        trend = "no trend" if self.trend is None else ("damped trend" if self.damped else "additive trend")
        seasonal = f"{SEASON_WORDS.get(season, f'{season}-period')} seasonality" if self.seasonal else "no seasonality"
        return f"additive errors, {trend}, {seasonal}"


def candidates(n: int, season: int) -> list[_Candidate]:
    """The configurations tried on ``n`` periods: trend none, additive or damped; seasonal with two seasons."""
    seasonal = (False, True) if n >= 2 * season else (False,)
    trends = [(None, False), ("add", False), ("add", True)]
    return [_Candidate(t, d, s) for s in seasonal for t, d in trends]


# OpenBLAS as numpy and scipy ship it: (get, set) thread-count functions by their exported names.
_BLAS_NAMES = [
    (f"{p}_get_num_threads{s}", f"{p}_set_num_threads{s}") for p in ("scipy_openblas", "openblas") for s in ("64_", "")
]
_blas_lock = threading.Lock()
_blas_users = 0
_blas_saved: list[tuple[Any, int]] = []


@cache
def _blas_libraries() -> list[tuple[Any, Any]]:
    """The (get, set) thread-count functions of the OpenBLAS libraries this process loaded (Linux; none
    elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and line.rstrip().endswith(".so")}
    except OSError:
        return []
    found = []
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for get, set_ in _BLAS_NAMES:
            if hasattr(library, get) and hasattr(library, set_):
                found.append((getattr(library, get), getattr(library, set_)))
                break
    return found


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Hold OpenBLAS to one thread while fitting. ETS's optimizer (L-BFGS-B) does thousands of operations on
    vectors of a few numbers, for which waking BLAS threads costs more than it saves: fits ran 3 to 10 times
    slower with two threads than with one on a busy machine. The counts are given back when the last fit
    ends; where no OpenBLAS is found this does nothing."""
    global _blas_users
    from statsmodels.tsa.exponential_smoothing import ets  # noqa: F401 - loads scipy and its OpenBLAS, to be found

    with _blas_lock:
        if _blas_users == 0:
            _blas_saved[:] = [(set_, int(get())) for get, set_ in _blas_libraries()]
            for set_, _ in _blas_saved:
                set_(1)
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                for set_, count in _blas_saved:
                    set_(count)


def _fit(values: np.ndarray[Any, Any], candidate: _Candidate, season: int) -> Any:
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel  # slow to import; only when fitting

    endog = pd.Series(values, dtype=float)
    options: dict[str, Any] = {
        "error": "add",
        "trend": candidate.trend,
        "damped_trend": candidate.damped,
        "seasonal": "add" if candidate.seasonal else None,
        "seasonal_periods": season if candidate.seasonal else None,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter; a bad fit loses on AICc or is skipped
        try:
            model = ETSModel(endog, initialization_method="heuristic", **options)
        except ValueError:  # too short for the heuristic start: estimate the initial states too
            model = ETSModel(endog, initialization_method="estimated", **options)
        return model.fit(disp=False, maxiter=2000)


def _finite(*arrays: Any) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(a, dtype=float)))) for a in arrays)


def _clipped(values: Any) -> list[float]:
    return [max(0.0, float(v)) for v in values]


def forecast_series(
    values: Sequence[float], steps: int, *, season: int, min_history: int, unit: str = "days", block: int = 0
) -> Forecast:
    """Forecast ``steps`` periods after ``values`` with the ETS configuration of least AICc. With ``block``,
    also totals of ``block`` steps at a time (intervals from simulated paths). Too short a history gives a
    Forecast whose ``message`` says so."""
    with one_blas_thread():
        return _forecast_series(values, steps, season=season, min_history=min_history, unit=unit, block=block)


def _forecast_series(
    values: Sequence[float], steps: int, *, season: int, min_history: int, unit: str, block: int
) -> Forecast:
    n = len(values)
    if n < min_history:
        return Forecast(message=f"not enough history ({n} {unit}; needs {min_history})")
    y = np.asarray(values, dtype=float)
    if float(y.max()) == float(y.min()):  # nothing varies: ETS has nothing to estimate (and degenerates)
        flat = [max(0.0, float(y[0]))] * steps
        blocks = None
        if block:
            total = [flat[0] * block] * (steps // block)
            blocks = Forecast("constant", "no variation in the history", None, total, total, total, total, total)
        return Forecast("constant", "no variation in the history", None, flat, flat, flat, flat, flat, blocks)
    best: tuple[float, _Candidate, Any, dict[int, Any]] | None = None
    for candidate in candidates(n, season):
        try:
            results = _fit(y, candidate, season)
            prediction = results.get_prediction(start=n, end=n + steps - 1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                frames = {level: prediction.summary_frame(alpha=1 - level / 100) for level in LEVELS}
        except (ValueError, np.linalg.LinAlgError, IndexError):
            continue
        aicc = float(results.aicc)
        bounds = [f[column] for f in frames.values() for column in ("mean", "pi_lower", "pi_upper")]
        if not (math.isfinite(aicc) and _finite(*bounds)):
            continue
        if best is None or aicc < best[0]:
            best = (aicc, candidate, results, frames)
    if best is None:
        return Forecast(message="no model could be fitted to the history")
    aicc, chosen, results, frames = best
    mean = _clipped(frames[80]["mean"])
    blocks = _block_forecast(results, mean, steps, block, chosen, season, aicc) if block else None
    return Forecast(
        model=chosen.code(),
        description=chosen.words(season),
        aicc=aicc,
        mean=mean,
        lower_80=_clipped(frames[80]["pi_lower"]),
        upper_80=_clipped(frames[80]["pi_upper"]),
        lower_95=_clipped(frames[95]["pi_lower"]),
        upper_95=_clipped(frames[95]["pi_upper"]),
        blocks=blocks,
    )


def _block_forecast(
    results: Any, mean: list[float], steps: int, block: int, chosen: _Candidate, season: int, aicc: float
) -> Forecast:
    """Totals of ``block`` steps: the sum of the means, bounds from the quantiles of simulated paths' totals
    (a sum's interval is not the sum of the intervals). Seeded, so the same history gives the same bounds."""
    count = steps // block
    paths = np.asarray(
        results.simulate(steps, anchor="end", repetitions=PATHS, rng=np.random.default_rng(0)), dtype=float
    ).reshape(steps, -1)
    totals = np.clip(paths[: count * block], 0, None).reshape(count, block, -1).sum(axis=1)
    quantile = {q: np.quantile(totals, q, axis=1) for q in (0.025, 0.1, 0.9, 0.975)}
    return Forecast(
        model=chosen.code(),
        description=chosen.words(season),
        aicc=aicc,
        mean=[float(sum(mean[i * block : (i + 1) * block])) for i in range(count)],
        lower_80=_clipped(quantile[0.1]),
        upper_80=_clipped(quantile[0.9]),
        lower_95=_clipped(quantile[0.025]),
        upper_95=_clipped(quantile[0.975]),
    )


def forecast_horizon(values: Sequence[float], horizon: Horizon) -> Forecast:
    """``horizon``'s forecast of ``values`` (one a period), with weekly totals of a daily one."""
    return forecast_series(
        values,
        horizon.steps,
        season=horizon.season,
        min_history=horizon.min_history,
        unit=f"{horizon.period}s",
        block=7 if horizon.period == "day" else 0,
    )


def mape(actual: Sequence[float], predicted: Sequence[float]) -> tuple[float | None, int]:
    """Mean absolute percentage error over the periods with demand, and how many had none (skipped: a zero has
    no percentage error). None when every period was zero."""
    errors = [abs(a - p) / a for a, p in zip(actual, predicted, strict=True) if a > 0]
    skipped = len(actual) - len(errors)
    return (float(100 * sum(errors) / len(errors)) if errors else None), skipped


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


def seasonal_naive(history: Sequence[float], steps: int, season: int) -> list[float]:
    """The last season repeated (the last value when shorter than a season)."""
    last = list(history[-season:]) if len(history) >= season else [history[-1]]
    return [last[i % len(last)] for i in range(steps)]


@dataclass(frozen=True)
class Backtest:
    """How the horizon's model did on the last ``held_back`` periods after training on ``trained_on``."""

    horizon: str
    period: str
    held_back: int = 0
    trained_on: int = 0
    model: str = ""
    mape: float | None = None
    #: Held-back periods without demand, left out of the MAPE.
    zeros_skipped: int = 0
    #: Percent of the held-back periods inside the 80 and 95% intervals.
    coverage_80: float | None = None
    coverage_95: float | None = None
    #: MAPE of repeating the training's last season (week): what the model should beat.
    baseline_mape: float | None = None
    #: Of a daily horizon: the MAPE of 7-day totals.
    weekly_mape: float | None = None
    #: All the held-back periods' absolute errors over all their demand, in percent: unlike the MAPE, not
    #: dominated by a few quiet periods.
    wape: float | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message


def backtest(values: Sequence[float], horizon: Horizon) -> Backtest:
    """Hold back the last ``horizon.steps`` periods (fewer when the history is short: at least half of it and at
    least ``min_train`` periods are kept to train on), fit on the rest as a forecast would, and score the forecast
    of the held-back periods."""
    n = len(values)
    held = min(horizon.steps, n - horizon.min_train, n // 2)
    if held < horizon.min_held:
        needs = horizon.min_train + horizon.min_held
        return Backtest(
            horizon.key, horizon.period, message=f"not enough history to backtest ({horizon.count(n)}; needs {needs})"
        )
    train, actual = list(values[: n - held]), list(values[n - held :])
    predicted = forecast_series(train, held, season=horizon.season, min_history=horizon.min_train)
    if not predicted.ok:
        return Backtest(horizon.key, horizon.period, held, len(train), message=predicted.message)
    error, zeros = mape(actual, predicted.mean)
    weekly = None
    if horizon.period == "day":
        weeks = held // 7
        weekly = mape(
            [sum(actual[i * 7 : i * 7 + 7]) for i in range(weeks)],
            [sum(predicted.mean[i * 7 : i * 7 + 7]) for i in range(weeks)],
        )[0]
    season = horizon.season if horizon.period == "day" else 1
    return Backtest(
        horizon=horizon.key,
        period=horizon.period,
        held_back=held,
        trained_on=len(train),
        model=predicted.model,
        mape=error,
        zeros_skipped=zeros,
        coverage_80=coverage(actual, predicted.lower_80, predicted.upper_80),
        coverage_95=coverage(actual, predicted.lower_95, predicted.upper_95),
        baseline_mape=mape(actual, seasonal_naive(train, held, season))[0],
        weekly_mape=weekly,
        wape=wape(actual, predicted.mean),
        message="" if error is not None else "every held-back period was zero: no percentage error",
    )


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
    capacity (None before its first capacity record); the fleet's accelerators now; the pending backlog."""

    flavor: str
    days: list[date]
    used: list[float]
    queued: list[float]
    capacity: list[float | None]
    accelerators: int = 0
    backlog: float = 0.0

    @property
    def demand(self) -> list[float]:
        return [u + q for u, q in zip(self.used, self.queued, strict=True)]


# --- a flavor's forecast ------------------------------------------------------------------------------------


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
    """A forecast period: demand's mean and bounds (backlog included) against capacity, in accelerator-hours."""

    start: date
    demand: float
    lower_80: float
    upper_80: float
    lower_95: float
    upper_95: float
    capacity: float
    #: Of the pending backlog, what this period carries (in every figure above).
    backlog: float = 0.0

    @property
    def exceeds(self) -> str:
        """Which figure passes capacity: "forecast" (the mean), "80%" or "95%" (the upper bound), or ""."""
        if self.demand > self.capacity:
            return "forecast"
        if self.upper_80 > self.capacity:
            return "80%"
        if self.upper_95 > self.capacity:
            return "95%"
        return ""


@dataclass(frozen=True)
class FlavorForecast:
    flavor: str
    horizon: str
    period: str
    history: list[Point]
    forecast: list[Predicted]
    #: The forecast in weeks (the daily one's 7-day totals; the weekly one itself).
    weeks: list[Predicted]
    backtest: Backtest
    model: str = ""
    description: str = ""
    #: The fleet's accelerators now, and what they give a period.
    accelerators: int = 0
    capacity: float = 0.0
    backlog: float = 0.0
    message: str = ""

    @property
    def shortfall(self) -> list[Predicted]:
        """The weeks where demand's upper 95% bound passes capacity."""
        return [w for w in self.weeks if w.exceeds]


def _with_backlog(
    forecast: Forecast, starts: Sequence[date], capacity: float, backlog: Sequence[float]
) -> list[Predicted]:
    out = []
    for i, start in enumerate(starts):
        extra = backlog[i] if i < len(backlog) else 0.0
        out.append(
            Predicted(
                start,
                forecast.mean[i] + extra,
                forecast.lower_80[i] + extra,
                forecast.upper_80[i] + extra,
                forecast.lower_95[i] + extra,
                forecast.upper_95[i] + extra,
                capacity,
                extra,
            )
        )
    return out


def forecast_flavor(history: FlavorHistory, horizon: Horizon, today: date) -> FlavorForecast:
    """One flavor's forecast for ``horizon`` from ``today`` on, with its backtest (pure: no database)."""
    demand = history.demand
    per_day = history.accelerators * 24.0
    if horizon.period == "day":
        points = [
            Point(d, dem, u, q, c)
            for d, dem, u, q, c in zip(
                history.days, demand, history.used, history.queued, history.capacity, strict=True
            )
        ]
        values = demand
    else:
        capacity = [
            None if any(c is None for c in week) else float(sum(c for c in week if c is not None))
            for week in whole_blocks(history.capacity)
        ]
        values = blocks_of(demand)
        points = [
            Point(s, dem, u, q, c)
            for s, dem, u, q, c in zip(
                block_starts(history.days),
                values,
                blocks_of(history.used),
                blocks_of(history.queued),
                capacity,
                strict=True,
            )
        ]
    fitted = forecast_horizon(values, horizon)
    tested = backtest(values, horizon)
    capacity_per = per_day * horizon.days
    base = FlavorForecast(
        flavor=history.flavor,
        horizon=horizon.key,
        period=horizon.period,
        history=points,
        forecast=[],
        weeks=[],
        backtest=tested,
        accelerators=history.accelerators,
        capacity=capacity_per,
        backlog=history.backlog,
        message=fitted.message,
    )
    if not fitted.ok:
        return base
    starts = [today + timedelta(days=i * horizon.days) for i in range(horizon.steps)]
    if horizon.period == "day":
        spread = [history.backlog / BACKLOG_DAYS] * BACKLOG_DAYS
        forecast = _with_backlog(fitted, starts, capacity_per, spread)
        assert fitted.blocks is not None
        week_starts = [today + timedelta(days=7 * i) for i in range(len(fitted.blocks.mean))]
        weeks = _with_backlog(fitted.blocks, week_starts, per_day * 7, [history.backlog])
    else:
        forecast = _with_backlog(fitted, starts, capacity_per, [history.backlog])
        weeks = forecast
    return replace(base, forecast=forecast, weeks=weeks, model=fitted.model, description=fitted.description)
