"""Shared helpers: small requests built from plain dicts."""

from __future__ import annotations

from meshplan.solver import EvaluateRequest, PlanRequest


def plan_req(**kw: object) -> PlanRequest:
    return PlanRequest.model_validate(kw)


def eval_req(**kw: object) -> EvaluateRequest:
    return EvaluateRequest.model_validate(kw)
