"""Hypothesis profiles for the engine's property tests.

``pytest tests/engine`` runs each property on 150 examples; ``pytest tests/engine --hypothesis-profile=ci``
runs 1,000. The engine tests need no database.
"""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
