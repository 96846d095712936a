"""meshplan's benchmarks: `python -m benchmarks <name> [--quick]`.

Names: latency, throughput, scaling, fidelity, and all.

Each benchmark is a module with `main(argv: list[str]) -> int` that prints a table and ends with
a one-line summary starting with "summary:". The instances are fixed in `benchmarks.suite`;
measured figures and the targets are in `benchmarks/RESULTS.md`.
"""
