"""`manage.py simulate packing ...`: replay a trace through the engine and the published baselines.

A thin shell over `scheduler.simulation` (plain Python, no database). `--json` prints one object,
`{"default_policy": ..., "policies": {name: figures}}`; otherwise a table. Progress goes to stderr.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from scheduler.simulation import packing
from scheduler.simulation.traces import TraceError, read_nodes, read_pods


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
        f"{report['nodes']} nodes, {report['gpus']} GPUs, {report['pods']} pods; * ours. "
        "Allocated GPUs as % of the fleet's, once arrived demand reaches 100% and 130% of it (mean ± std over seeds)."
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
        pack.add_argument("--json", action="store_true", help="Print one JSON object instead of a table.")

    def handle(self, *args: Any, mode: str, **options: Any) -> None:
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
                report = packing.run_packing(nodes, pods, policies, seeds, progress)
            except ValueError as error:
                raise CommandError(str(error)) from None
        self.stdout.write(json.dumps(report) if options["json"] else packing_table(report))
