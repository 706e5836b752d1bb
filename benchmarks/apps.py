from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    """The benchmarks' management commands (``bench_engine``, ``bench_admission``, ``bench_sync``, ``bench_billing``,
    ``simulate``) and the synthetic fleets they run on. Nothing in the product imports this package."""

    name = "benchmarks"
