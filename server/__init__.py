"""gRPC service meshplan.v1.Planner: proto <-> domain, validation, limits, deadlines, shutdown.

No arithmetic lives here: every answer comes from `solver.plan` / `solver.evaluate` and the
scheduler queries of `solver.scheduler`.
Entry points: `server.app.create_server`, `server.app.serve`, `python -m meshplan.server`.

- app: the asyncio server on its event-loop thread; services register in `app.SERVICES`
- runtime: what every call goes through (id, caller, deadline, admission, fair slots, the log
  line, metrics, status mapping); dispatch: where solves run (the runner interface, threads);
  pool: the solver's worker processes (the default runner); work: what a solve runs there
- servicer: Plan, Evaluate, PlanBatch, ListCatalog; scheduler: ScalingCurve, Replan,
  SmallestAllocation, TrainingFront; requests, convert, validate: bytes -> domain, errors -> fields
- limits: admission and fair solver slots; auth, tls: tokens and certificates, both reloadable
- health: health and bounded reflection; metrics, logs, memory: what an operator watches
- settings, cli: `meshplan serve` flags over MESHPLAN_* variables; probe: the container's check
"""
