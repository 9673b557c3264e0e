"""The Hypothesis state machines: what a run draws, step by step, for the engine to check.

- lone.py: QPMachine, up to a few lone QPs (modify, query, posts where nothing reaches a
  wire, destroy and re-create), and `run_machine`, which runs it and hands each
  divergence to a `keep` callback; what its modifies draw (mask shapes, edge values) in
  modify_draws.py;
- pair.py: the traffic machines over a connected pair (`machine_for` per InfiniBand QP
  type, `iwarp_machine_for` over rdma_cm connections): their rules in ib_traffic.py and
  iwarp_traffic.py, what both share (the pair, the checks after each step) in
  pair_machine.py;
- stops.py: a Ctrl-C or time bound that a gc callback swallowed, delivered between steps.

They import the engine and models only: the device comes in as the engine's Device
protocol (qpconform/adapters/ on real devices, tests/ fakes in self-tests), and what a
run keeps goes out through callbacks (reports/ writes it). The suites run them.
"""
