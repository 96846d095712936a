"""gRPC service meshplan.v1.Planner: proto <-> domain, validation, limits, deadlines, shutdown.

No arithmetic lives here: every answer comes from `solver.plan` / `solver.evaluate`.
Entry points: `server.app.create_server`, `server.app.serve`, `python -m meshplan.server`.
"""
