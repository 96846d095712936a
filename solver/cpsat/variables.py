"""One-hot Booleans per axis, channelled to the layout rows, with small query methods."""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from meshplan.solver.costmodel import Point
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.space import Space


class Axes:
    """The decision variables: which layout row, which (pp, v), (dp, b, M), (tp, ep, etp), r, z."""

    def __init__(self, m: cp_model.CpModel, sp: Space, tables: Tables) -> None:
        self.m, self.sp, self.tables = m, sp, tables
        self.lay = {r: m.new_bool_var(f"lay{i}") for i, r in enumerate(sp.layouts)}
        self.vals: dict[str, dict[object, cp_model.IntVar]] = {
            "pv": {k: m.new_bool_var(f"pv{k}") for k in sp.pv},
            "db": {k: m.new_bool_var(f"db{k}") for k in sp.db},
            "te": {k: m.new_bool_var(f"te{k}") for k in sp.te},
            "r": {k: m.new_bool_var(f"r{k.value}") for k in sp.rs},
            "z": {k: m.new_bool_var(f"z{k}") for k in sp.zs},
        }
        m.add_exactly_one(self.lay.values())
        for d in self.vals.values():
            m.add_exactly_one(d.values())
        self._channel()
        self._keys: dict[tuple[str, object], cp_model.IntVar | bool] = {}

    def _rows(self, key) -> dict[object, list[cp_model.IntVar]]:  # noqa: ANN001
        out: dict[object, list[cp_model.IntVar]] = defaultdict(list)
        for r, y in self.lay.items():
            out[key(r)].append(y)
        return out

    def _channel(self) -> None:
        """A composite axis picks the component its layout row has (sum over one = the row's)."""
        m = self.m
        for comp, axis, idx in (("pp", "pv", 0), ("dp", "db", 0), ("tp", "te", 0)):
            rows = self._rows(lambda r, c=comp: getattr(r, c))
            groups: dict[object, list[cp_model.IntVar]] = defaultdict(list)
            for k, b in self.vals[axis].items():
                groups[k[idx]].append(b)
            for val in set(rows) | set(groups):
                m.add(sum(groups.get(val, [])) == sum(rows.get(val, [])))
        # The expert group and the ZeRO stage agree with the chosen row (Space.compatible).
        for axis in ("te", "z"):
            ok: dict[object, list[cp_model.IntVar]] = defaultdict(list)
            for r, y in self.lay.items():
                for k in self.sp.compatible(axis, r):
                    ok[k].append(y)
            for k, b in self.vals[axis].items():
                if len(ok[k]) < len(self.lay):
                    m.add(b <= sum(ok[k]))
        # Interleaving with a micro-batch count the schedule cannot run: not both (one
        # constraint per pp, since the chosen (pp, v) carries the row's pp).
        for pp in sorted({p for p, _ in self.vals["pv"]}):
            bad_pv = [b for (p, v), b in self.vals["pv"].items() if p == pp and v > 1]
            bad_db = [
                b for d, b in self.vals["db"].items() if not self.sp.pipeline_fits_batch((pp, 2), d)
            ]
            if bad_pv and bad_db:
                m.add(sum(bad_pv) + sum(bad_db) <= 1)

    def key_literal(self, axis: str, key, keyval: object) -> cp_model.IntVar | bool:  # noqa: ANN001
        """A literal true iff the axis value maps to `keyval` under `key`."""
        return self.any_of(axis, [k for k in self.vals[axis] if key(k) == keyval])

    def any_of(self, axis: str, keys: list[object]) -> cp_model.IntVar | bool:
        """A literal true iff the axis takes one of `keys` (True when that is every value)."""
        cache = (axis, "any", frozenset(keys))
        if cache not in self._keys:
            d = self.vals[axis]
            if len(keys) == len(d):
                self._keys[cache] = True
            elif len(keys) == 1:
                self._keys[cache] = d[keys[0]]
            else:
                lit = self.m.new_bool_var(f"{axis}_in")
                self.m.add(lit == sum(d[k] for k in keys))
                self._keys[cache] = lit
        return self._keys[cache]

    def key_values(self, axis: str, key) -> list[object]:  # noqa: ANN001
        return sorted({key(k) for k in self.vals[axis]}, key=repr)

    def hint(self, p: Point) -> None:
        for r, y in self.lay.items():
            self.m.add_hint(y, r == p.lay)
        for axis, d in self.vals.items():
            want = p.axis(axis)
            for k, b in d.items():
                self.m.add_hint(b, k == want)

    def chosen(self, solver: cp_model.CpSolver) -> Point:
        lay = next(r for r, y in self.lay.items() if solver.boolean_value(y))
        pick = {
            a: next(k for k, b in d.items() if solver.boolean_value(b))
            for a, d in self.vals.items()
        }
        (_, v), (_, b, mm), (_, e, et) = pick["pv"], pick["db"], pick["te"]
        return Point(lay, v, b, mm, e, et, pick["r"], pick["z"])

    def point_literals(self, p: Point) -> list[cp_model.IntVar] | None:
        """The Booleans that fix a point's layout and batch shape (None: not in this model)."""
        keys = [(a, p.axis(a)) for a in ("pv", "db", "te")]
        if p.lay not in self.lay or any(k not in self.vals[a] for a, k in keys):
            return None
        return [self.lay[p.lay], *(self.vals[a][k] for a, k in keys)]

    def size(self) -> int:
        return len(self.lay) + sum(len(d) for d in self.vals.values())
