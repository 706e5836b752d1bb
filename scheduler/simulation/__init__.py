"""Simulation: the placement engine on recorded or synthetic workloads, away from real clusters.

- ``traces``: readers for the public traces (Alibaba 2023 ``openb`` node and pod lists, Microsoft Philly jobs).
- ``packing``: the FGD paper's packing protocol (place pods one by one, no departures), our engine beside
  the published baselines.
- ``events``: a deterministic discrete-event simulator (submit, cycle, finish, preemption, node failure
  and recovery) that runs any policy, the engine included, over a fleet and a stream of jobs.
- ``jobs``: the job-level policies (FIFO, SJF, Tiresias's LAS, the engine) and the Philly replay.

Everything here is plain Python on the engine's entry point; the ``simulate`` management command is a thin
shell over it.
"""
