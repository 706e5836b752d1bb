"""Benchmarks of the engine, the placement loop, the inventory sync and billing, and the synthetic fleets they
run on. The product never imports this package."""
