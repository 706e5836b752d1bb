"""`manage.py simulate packing|jobs|stragglers ...`: replay a trace through the engine and the published
baselines, or through the straggler and hang detectors against a fixed-threshold baseline.

A thin shell over `scheduler.simulation` (plain Python, no database). `--json` prints one object,
`{"default_policy": ..., "policies": {name: figures}}`; otherwise a table. Progress goes to stderr.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from scheduler.engine.model import Config
from scheduler.simulation import jobs, packing, stragglers
from scheduler.simulation.events import SIZES, Outage, SimJob
from scheduler.simulation.pools import Pool
from scheduler.simulation.traces import TraceError, read_nodes, read_philly, read_pods, read_vc_nodes


def seed_list(text: str) -> list[int]:
    """Seeds as ``42-51``, ``42,45,47`` or a mix of both."""
    seeds: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise CommandError(f"--seeds: {part!r} is not a seed or a range like 42-51")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise CommandError(f"--seeds: the range {part!r} runs backwards")
        seeds.extend(range(low, high + 1))
    if not seeds:
        raise CommandError("--seeds: give at least one seed")
    return seeds


def packing_table(report: dict[str, Any]) -> str:
    rows = [f"{'policy':<15} {'alloc % at 100':>15} {'alloc % at 130':>15} {'seeds':>6} {'seconds':>8}"]
    for name, f in report["policies"].items():
        mark = " *" if name == report["default_policy"] else ""
        rows.append(
            f"{name + mark:<15} {f['alloc_pct_at_100']:>9.2f} ±{f['std_at_100']:<4.2f} "
            f"{f['alloc_pct_at_130']:>9.2f} ±{f['std_at_130']:<4.2f} {f['seeds']:>6} {f['seconds']:>8.1f}"
        )
    rows.append(
        f"{report['nodes']} nodes, {report['gpus']} GPUs, {report['pods']} pods ({report['workload']}); * ours. "
        "Allocated GPUs as % of the fleet's, once arrived demand reaches 100% and 130% of it (mean ± std over seeds)."
    )
    return "\n".join(rows)


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def jobs_table(report: dict[str, Any]) -> str:
    head = (
        "policy",
        "avg JCT",
        "p99 JCT",
        "avg wait",
        "p99 wait",
        "max wait",
        "makespan",
        "GPU util",
        "preempt",
        "seconds",
    )
    rows = ["".join(f"{h:>11}" if i else f"{h:<15}" for i, h in enumerate(head))]
    for name, f in report["policies"].items():
        mark = " *" if name == report["default_policy"] else ""
        times = [
            hours(f[k]) for k in ("avg_jct_s", "p99_jct_s", "avg_wait_s", "p99_wait_s", "max_wait_s", "makespan_s")
        ]
        cells = [*times, f"{100 * f['gpu_utilization']:.1f}%", str(f["preemptions"]), f"{f['seconds']:.1f}"]
        rows.append(f"{name + mark:<15}" + "".join(f"{c:>11}" for c in cells))
    rows.append("")
    rows.append(f"{'wait by GPUs':<15}" + "".join(f"{label:>22}" for label, *_ in SIZES))
    for name, f in report["policies"].items():
        cells = []
        for label, *_ in SIZES:
            size = f["by_gpus"].get(label)
            cells.append(f"{hours(size['avg_wait_s'])} / {hours(size['max_wait_s'])}" if size else "-")
        rows.append(f"{name:<15}" + "".join(f"{c:>22}" for c in cells))
    queues = sorted({q for f in report["policies"].values() for q in f.get("by_queue", {})})
    if len(queues) > 1:
        rows.append("")
        rows.append(f"{'JCT / wait':<15}" + "".join(f"{q:>22}" for q in queues))
        for name, f in report["policies"].items():
            cells = []
            for q in queues:
                got = f["by_queue"].get(q)
                cells.append(f"{hours(got['avg_jct_s'])} / {hours(got['avg_wait_s'])}" if got else "-")
            rows.append(f"{name:<15}" + "".join(f"{c:>22}" for c in cells))
    rows.append(
        f"{report['nodes']} nodes, {report['gpus']} GPUs, {report['jobs']} jobs; * ours. "
        "JCT: submission to completion; wait: time spent waiting (avg / max per gang size)."
    )
    return "\n".join(rows)


def shares(total: int, weights: dict[str, int]) -> dict[str, int]:
    """``total`` split in proportion to ``weights``, in whole units that add up to it (largest remainders)."""
    whole = sum(weights.values())
    exact = {name: total * weight / whole for name, weight in weights.items()}
    out = {name: int(value) for name, value in exact.items()}
    for name in sorted(exact, key=lambda n: (out[n] - exact[n], n))[: total - sum(out.values())]:
        out[name] += 1
    return out


def gpu_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise CommandError(f"--gpus-per-node: {text!r} is not a number or a list like 2,8") from None
    if not counts or min(counts) < 1:
        raise CommandError("--gpus-per-node: every node needs at least one GPU")
    return counts


def budget_list(text: str) -> list[float | None]:
    """Monthly budgets as ``2000,8000,none``."""
    budgets: list[float | None] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.lower() == "none":
            budgets.append(None)
            continue
        try:
            budgets.append(float(part))
        except ValueError:
            raise CommandError(f"--elastic-budgets: {part!r} is not an amount or 'none'") from None
        if (budgets[-1] or 0) < 0:
            raise CommandError(f"--elastic-budgets: {part} is below zero")
    if not budgets:
        raise CommandError("--elastic-budgets: give at least one budget")
    return budgets


def elastic_pools(
    cluster: str, sizes: list[int], workload: tuple[SimJob, ...], options: dict[str, Any]
) -> tuple[tuple[Pool, ...], tuple[SimJob, ...]]:
    """The pools the options describe, of nodes as large as the fleet's largest, and the workload with the share
    of jobs that accept spot marked (where there is a spot pool)."""
    on_demand = Pool(
        "cloud",
        cluster,
        jobs.FLAVOR,
        max(sizes),
        64_000,
        512 * 1024,
        price_per_accel_hour=options["elastic_price"],
        lead_time=options["elastic_lead_minutes"] * 60,
        max_nodes=options["elastic_nodes"],
        idle_release=options["elastic_idle_minutes"] * 60,
    )
    pools = [on_demand]
    if options["spot_nodes"] > 0:
        if not 0 <= options["spot_jobs"] <= 1:
            raise ValueError("--spot-jobs is a share, from 0 to 1")
        spot = replace(
            on_demand,
            name="spot",
            price_per_accel_hour=options["spot_price"],
            max_nodes=options["spot_nodes"],
            spot=True,
            reclaims_per_day=options["spot_reclaims_per_day"],
            notice=120.0,
        )
        pools.append(spot)
        chosen = random.Random(options["seed"])  # noqa: S311 - a reproducible sample, not a secret
        workload = tuple(replace(j, spot=chosen.random() < options["spot_jobs"]) for j in workload)
    return tuple(pools), workload


def elastic_table(report: dict[str, Any]) -> str:
    head = (
        "budget",
        "cost",
        "worst month",
        "node-h",
        "asked",
        "reclaims",
        "avg JCT",
        "avg wait",
        "p95 wait",
        "max wait",
        "seconds",
    )
    rows = ["".join(f"{h:>12}" if i else f"{h:<13}" for i, h in enumerate(head))]
    for run in report["runs"]:
        pools = run.get("pools", {}).values()
        cells = [
            f"{run.get('elastic_cost', 0.0):,.0f}",
            f"{max((p['most_in_a_month'] for p in pools), default=0.0):,.0f}",
            f"{sum(p['node_hours'] for p in pools):,.0f}",
            str(sum(p["asked"] for p in pools)),
            str(run.get("reclaims", 0)),
            *(hours(run[k]) for k in ("avg_jct_s", "avg_wait_s", "p95_wait_s", "max_wait_s")),
            f"{run['seconds']:.1f}",
        ]
        rows.append(f"{run['budget']:<13}" + "".join(f"{c:>12}" for c in cells))
    described = "; ".join(
        f"{p['name']}: up to {p['max_nodes']} nodes of {p['accelerators']} GPUs "
        f"at {p['price_per_accel_hour']:g}/GPU-h, up {p['lead_time'] / 60:g} min after an ask, "
        f"released after {p['idle_release'] / 60:g} min idle"
        + (f", {p['reclaims_per_day']:g} reclaims per node-day" if p["spot"] else "")
        for p in report["pools"]
    )
    rows.append(f"{report['nodes']} fixed nodes, {report['gpus']} GPUs, {report['jobs']} jobs. Pools: {described}.")
    rows.append(
        "Budget: for each pool, per month of 30 days. Cost: what the pools' nodes cost while up, in all; worst month: "
        "the most one pool's nodes cost in one month."
    )
    return "\n".join(rows)


class Command(BaseCommand):
    help = "Replay a trace through the placement engine and the published baselines."
    requires_system_checks: list[str] = []  # needs neither the database nor the project's checks

    def add_arguments(self, parser: CommandParser) -> None:
        modes = parser.add_subparsers(dest="mode", required=True, metavar="MODE")
        pack = modes.add_parser(
            "packing",
            help="The FGD paper's protocol on Alibaba's openb node and pod lists.",
            description=packing.__doc__,
        )
        pack.add_argument("--nodes", required=True, help="openb node list CSV (sn,cpu_milli,memory_mib,gpu,model).")
        pack.add_argument("--pods", required=True, help="openb pod list CSV, any of the dataset's formats.")
        pack.add_argument(
            "--policy",
            action="append",
            choices=list(packing.POLICIES),
            help="A policy to run; repeat for several (default: all).",
        )
        pack.add_argument("--seeds", type=seed_list, default=list(range(42, 52)), help="e.g. 42-51 (the default).")
        pack.add_argument(
            "--workload",
            choices=packing.WORKLOADS,
            default="default",
            help="The pod list as it is (default), or a variant drawn from it per seed: more fractional-GPU "
            "pods, more multi-GPU pods, or more pods that require a GPU model.",
        )
        pack.add_argument("--json", action="store_true", help="Print one JSON object instead of a table.")

        replay = modes.add_parser(
            "jobs",
            help="Replay the Philly job trace of one virtual cluster: FIFO, SJF, Tiresias and ours.",
            description=jobs.__doc__,
        )
        replay.add_argument("--trace", required=True, help="philly.csv (timestamp,duration,num_gpus,...,cluster).")
        replay.add_argument(
            "--vc",
            required=True,
            help="The virtual cluster to replay, e.g. 6214e9; several, comma-separated, share one fleet (the sum of "
            "their nodes), each its own queue.",
        )
        replay.add_argument(
            "--nodes",
            type=int,
            help="Nodes in the fleet (default: the VC's count in philly_vc_node_count.csv beside the trace).",
        )
        replay.add_argument(
            "--gpus-per-node",
            type=gpu_counts,
            default=[2],
            help="GPUs per node, or a list taken in turn (2,8 = half of each); default 2.",
        )
        replay.add_argument(
            "--limits",
            choices=("exact", "rounded"),
            default="exact",
            help="Time limits the jobs declare: their true duration, or that rounded up to 1h/2h/4h/8h/1d/3d/7d.",
        )
        replay.add_argument(
            "--mtbf-days", type=float, help="Fail nodes at random with this mean time between failures."
        )
        replay.add_argument("--repair-hours", type=float, default=4.0, help="How long a failed node stays down.")
        replay.add_argument("--seed", type=int, default=1, help="Seed of the node failures.")
        replay.add_argument(
            "--policy",
            action="append",
            choices=jobs.POLICY_NAMES,
            help="A policy to run; repeat for several (default: all).",
        )
        replay.add_argument(
            "--max-wait-hours",
            type=float,
            default=0.0,
            help="Our policy's bound on waiting (its tier's max_wait), in hours; 0 (the default): none.",
        )
        replay.add_argument(
            "--short-first",
            type=float,
            default=None,
            help="Our policy's short-first aging (the engine's Config.short_first; default: the engine's own).",
        )
        replay.add_argument(
            "--srpt",
            type=float,
            default=None,
            help="Our policy's shortest remaining time first (Config.srpt): a waiting job may preempt work of its "
            "priority with more than this many times its time limit left (default: off).",
        )
        replay.add_argument(
            "--half-life-hours",
            type=float,
            default=0.0,
            help="Our policy's memory of each queue's use (a Philly virtual cluster's, with several --vc): its "
            "half-life in hours; 0 (the default): none.",
        )
        replay.add_argument(
            "--usage-weight",
            type=float,
            default=None,
            help="How much recent use counts in our policy's shares (Config.usage_weight; default: the engine's).",
        )
        elastic = replay.add_argument_group(
            "elastic pools",
            "With --elastic-budgets, our policy alone replays the trace on the fixed fleet, then with an elastic "
            "cloud pool beside it at each monthly budget (months of 30 days from the trace's start), and the table "
            "gives each run's cost against its waits.",
        )
        elastic.add_argument(
            "--elastic-budgets",
            type=budget_list,
            help="Monthly budgets of each pool, comma-separated; 'none' for no limit (e.g. 2000,8000,none).",
        )
        elastic.add_argument("--elastic-nodes", type=int, default=16, help="Most nodes of the on-demand pool (16).")
        elastic.add_argument(
            "--elastic-price", type=float, default=2.0, help="Its price per GPU-hour (2.0, in the budget's currency)."
        )
        elastic.add_argument(
            "--elastic-lead-minutes", type=float, default=10.0, help="Minutes from an ask until its nodes are up (10)."
        )
        elastic.add_argument(
            "--elastic-idle-minutes", type=float, default=10.0, help="Minutes an idle pool node is kept (10)."
        )
        elastic.add_argument(
            "--spot-nodes", type=int, default=0, help="Most nodes of a spot pool beside it (0, the default: none)."
        )
        elastic.add_argument("--spot-price", type=float, default=0.7, help="The spot pool's price per GPU-hour (0.7).")
        elastic.add_argument(
            "--spot-reclaims-per-day",
            type=float,
            default=1.0,
            help="How often the cloud takes a spot node back, per node and day on average (1); 2 minutes' notice.",
        )
        elastic.add_argument(
            "--spot-jobs",
            type=float,
            default=0.5,
            help="The share of jobs that accept spot, chosen with --seed (0.5).",
        )
        replay.add_argument("--json", action="store_true", help="Print one JSON object instead of a table.")

        watch = modes.add_parser(
            "stragglers",
            help="Inject stragglers and hangs into the Philly trace's multi-node jobs; score the detectors.",
            description=stragglers.__doc__,
        )
        watch.add_argument("--trace", required=True, help="philly.csv (timestamp,duration,num_gpus,...,cluster).")
        watch.add_argument("--seeds", type=seed_list, default=[1, 2, 3], help="e.g. 1-3 (the default).")
        watch.add_argument("--max-hours", type=float, default=6.0, help="Cap each job's duration (default 6).")
        watch.add_argument("--json", action="store_true", help="Print one JSON object instead of a table.")

    def handle(self, *args: Any, mode: str, **options: Any) -> None:
        if mode == "jobs":
            self.replay(**options)
            return
        if mode == "stragglers":
            try:
                trace = read_philly(options["trace"])
            except TraceError as error:
                raise CommandError(str(error)) from None
            if options["max_hours"] <= 0:
                raise CommandError("--max-hours must be more than 0")
            report = stragglers.run(trace, options["seeds"], max_hours=options["max_hours"])
            self.stdout.write(json.dumps(report) if options["json"] else stragglers.table(report))
            return
        try:
            nodes, pods = read_nodes(options["nodes"]), read_pods(options["pods"])
        except TraceError as error:
            raise CommandError(str(error)) from None
        policies = options["policy"] or list(packing.POLICIES)
        seeds = options["seeds"]
        with tqdm(total=len(policies) * len(seeds), desc="packing", unit="run", disable=None) as bar:

            def progress(policy: str, seed: int) -> None:
                bar.set_postfix_str(f"{policy} seed {seed}")
                bar.update()

            try:
                report = packing.run_packing(nodes, pods, policies, seeds, progress, options["workload"])
            except ValueError as error:
                raise CommandError(str(error)) from None
        self.stdout.write(json.dumps(report) if options["json"] else packing_table(report))

    def replay(self, **options: Any) -> None:
        trace_path = Path(options["trace"])
        vcs = [vc.strip() for vc in options["vc"].split(",")]
        try:
            trace = read_philly(trace_path, options["vc"])
            counts_path = trace_path.with_name("philly_vc_node_count.csv")
            counts = read_vc_nodes(counts_path) if counts_path.exists() else {}
        except TraceError as error:
            raise CommandError(str(error)) from None
        unknown = [vc for vc in vcs if vc not in counts]
        if unknown and (options["nodes"] is None or len(vcs) > 1):
            raise CommandError(f"--nodes: {counts_path} does not give the node count of {', '.join(unknown)}; say it")
        nodes = options["nodes"] if options["nodes"] is not None else sum(counts[vc] for vc in vcs)
        sizes = options["gpus_per_node"]
        try:
            clusters, fleet = jobs.philly_fleet(nodes, sizes)
            # Several virtual clusters share the fleet, each with its part of the GPUs as its quota, in one cohort.
            quotas = shares(sum(n.accel_count for n in fleet), {vc: counts[vc] for vc in vcs}) if len(vcs) > 1 else None
            workload = tuple(jobs.philly_jobs(trace, sizes, options["limits"]))
            outages: tuple[Outage, ...] = ()
            if options["mtbf_days"] is not None:
                span = max(j.submitted for j in workload)
                outages = jobs.random_outages(
                    fleet, span, options["mtbf_days"], options["repair_hours"], options["seed"]
                )
        except ValueError as error:
            raise CommandError(str(error)) from None
        budgets = options["elastic_budgets"]
        pools: tuple[Pool, ...] = ()
        if budgets is not None:
            try:
                pools, workload = elastic_pools(clusters[0].name, sizes, workload, options)
            except ValueError as error:
                raise CommandError(str(error)) from None
        policies = options["policy"] or list(jobs.POLICY_NAMES)
        runs = len(policies) if budgets is None else 1 + len(budgets)
        with tqdm(total=runs * len(workload), desc="jobs", unit="job", disable=None, miniters=500) as bar:

            def progress(policy: str, done: int) -> None:
                bar.set_postfix_str(policy, refresh=False)
                bar.update()

            tuned = {k: options[k] for k in ("short_first", "usage_weight", "srpt") if options[k] is not None}
            config = Config(**tuned) if tuned else None
            replay = jobs.Replay(
                clusters,
                fleet,
                workload,
                outages,
                max_wait=options["max_wait_hours"] * 3600,
                config=config,
                half_life=options["half_life_hours"] * 3600,
                quotas=quotas,
                pools=pools,
                seed=options["seed"],
            )
            if budgets is not None:
                report = jobs.run_elastic(replay, budgets, progress)
                self.stdout.write(json.dumps(report) if options["json"] else elastic_table(report))
                return
            report = jobs.run_jobs(replay, policies, progress)
        self.stdout.write(json.dumps(report) if options["json"] else jobs_table(report))
