"""Words for users: every flag has help with its default; the walls and warnings are defined in
`meshplan plan --help` and the README; no user-facing text (the README, the reference pages in
docs/, help, answers) points at material outside the repository (seed documents, issue numbers,
a design note)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from benchmarks.suite import LATENCY_SUITE
from meshplan.solver import EvaluateRequest, PlanRequest, evaluate, plan
from meshplan.solver.costmodel.activations import TEXTBOOK
from meshplan.solver.profiles import PROFILES
from meshplan.solver.results import Wall
from meshplan.solver.walls import BUBBLE_WARN, COMM_WALL
from meshplan.tools.calibration.score import SOURCES, load_all
from meshplan.tools.cli import glossary
from meshplan.tools.cli.main import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent
INTERNAL = re.compile(r"\bseeds? \d|\bseed[_-]?\d|\bseed's|\bissue \d|DESIGN\.md", re.I)
S_OWNED = {"serve"}  # the server's settings flags: their help is the server's own


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    ap = build_parser()
    (sub,) = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_flag_has_help_and_says_its_default() -> None:
    missing = []
    for name, p in _subparsers().items():
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = f"{name} {action.option_strings[0]}"
            text = action.help or ""
            if not text.strip():
                missing.append(f"{flag}: no help")
            elif (
                name not in S_OWNED
                and action.nargs != 0
                and not action.required
                and not re.search(r"default|required", text)
            ):
                missing.append(f"{flag}: no default in {text!r}")
    assert not missing, "\n".join(missing)


def test_value_flags_name_their_unit() -> None:
    """Counts, sizes and times say their unit (GPUs, tokens, GiB, s, count, ...)."""
    units = re.compile(r"GPUs|tokens|GiB|\(s[;)]|seconds|count|sequences|replicas|stages|shards")
    plan_parser = _subparsers()["plan"]
    for action in plan_parser._actions:
        if action.type in (int, float) or action.dest.endswith("_tokens"):
            if action.dest in ("zero_stage",):
                continue
            assert units.search(action.help or ""), (action.dest, action.help)


def test_plan_help_defines_the_walls_and_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--help"]) == 0
    text = capsys.readouterr().out
    for wall in Wall:
        assert re.search(rf"^\s+{wall.value}\s+\S", text, re.M), wall
    for head, _ in glossary.WARNINGS:
        assert head in text
    assert "DeepSeek LLM" in text and "exit status:" in text
    assert set(glossary.WALLS) == {w.value for w in Wall}
    assert glossary.BUBBLE_LIMIT == BUBBLE_WARN and glossary.COMMUNICATION_LIMIT == COMM_WALL


def test_the_readme_defines_the_walls_warnings_and_batch_rule() -> None:
    readme = (ROOT / "README.md").read_text()
    for wall in Wall:
        assert re.search(rf"^\| `{wall.value}` \| \w", readme, re.M), wall
    for head, _ in glossary.WARNINGS:
        assert head in readme, head
    assert "0.2920" in readme and "Hoffmann" in readme and "--train-tokens" in readme


def _help_texts() -> str:
    out = [build_parser().format_help()]
    out += [p.format_help() for p in _subparsers().values()]
    return "\n".join(out)


def _answers() -> str:
    """Text the planner writes to users: warnings, reasons, violations, notes, batch rules."""
    texts: list[str] = []
    reqs = [
        {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 4096}},  # past the DP cap
        {"model": {"preset": "llama3-405b"}, "cluster": {"num_gpus": 64}},  # infeasible
        {"model": {"preset": "llama2-70b"}, "cluster": {"num_gpus": 16}, "search": {"pp": 8}},
    ]
    for r in reqs:
        res = plan(PlanRequest.model_validate(r))
        texts += res.warnings + ([res.explanation.reason] if res.explanation else [])
        texts += [res.batch.reason] if res.batch else []
    ev = {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"num_gpus": 8},
        "training": {"framework": "KEMPNERFORGE", "precision": "FP8", "seq_len": 4096},
        "config": {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "micro_batch_size": 1},
    }
    res = evaluate(EvaluateRequest.model_validate(ev))
    texts += res.violations + res.warnings + res.notes
    return "\n".join(texts)


def test_no_internal_references_in_user_facing_text() -> None:
    sources = {
        "README.md": (ROOT / "README.md").read_text(),
        **{f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))},
        "--help": _help_texts(),
        "answers": _answers(),
        "schema": json.dumps([m.model_json_schema() for m in (PlanRequest, EvaluateRequest)]),
    }
    found = {k: INTERNAL.findall(v) for k, v in sources.items()}
    assert not any(found.values()), found


def test_labels_name_their_source_not_an_internal_text() -> None:
    """Calibration sources and run ids, benchmark instances and activation forms are printed by
    the benchmarks and `calibrate`: none is named after an internal text by its number."""
    forms = {r.activations for p in PROFILES.values() for r in (p.bf16, p.fp8_recipe)}
    labels = [*SOURCES, *(r.id for r in load_all()), *(i.name for i in LATENCY_SUITE)]
    labels += [*forms, *TEXTBOOK]
    assert not [x for x in labels if re.search(r"seed[ _-]?\d", x, re.I)]


def test_every_command_is_registered_once_and_loads_lazily() -> None:
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names))
    assert {"plan", "evaluate", "catalog", "serve", "batch", "sweep", "ladder"} <= set(names)
    ap = build_parser(None)  # `meshplan --help`: no command's flags, no command module
    assert "plan" in ap.format_help()
