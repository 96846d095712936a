"""One-hot Booleans per axis, channelled to the layout rows, with small query methods."""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.costmodel import Layout, Point
from solver.space import Space


class Axes:
    """The decision variables: which layout row, which (pp, v), (dp, b, M), (tp, ep), r, z."""

    def __init__(self, m: cp_model.CpModel, sp: Space) -> None:
        self.m, self.sp = m, sp
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
        self._compat: dict[tuple[str, Layout], list[object]] = {}

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
        # ep must divide dp·cp of the chosen row.
        for (t, e), b in self.vals["te"].items():
            ok = [y for r, y in self.lay.items() if r.tp == t and (r.dp * r.cp) % e == 0]
            m.add(b <= sum(ok))

    def compatible(self, axis: str, row: Layout) -> list[object]:
        """Values of a composite axis that agree with a layout row."""
        key = (axis, row)
        if key not in self._compat:
            vals = self.vals[axis]
            if axis == "pv":
                out = [k for k in vals if k[0] == row.pp]
            elif axis == "db":
                out = [k for k in vals if k[0] == row.dp]
            else:
                out = [k for k in vals if k[0] == row.tp and (row.dp * row.cp) % k[1] == 0]
            self._compat[key] = out
        return self._compat[key]

    def key_literal(self, axis: str, key, keyval: object) -> cp_model.IntVar | bool:  # noqa: ANN001
        """A literal true iff the axis value maps to `keyval` under `key`."""
        cache = (axis, id(key), keyval)
        if cache not in self._keys:
            members = [b for k, b in self.vals[axis].items() if key(k) == keyval]
            if len(members) == len(self.vals[axis]):
                self._keys[cache] = True
            elif len(members) == 1:
                self._keys[cache] = members[0]
            else:
                lit = self.m.new_bool_var(f"{axis}_key")
                self.m.add(lit == sum(members))
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
        (_, v), (_, b, mm), (_, e) = pick["pv"], pick["db"], pick["te"]
        return Point(lay, v, b, mm, e, pick["r"], pick["z"])

    def point_literals(self, p: Point) -> list[cp_model.IntVar]:
        """The Booleans that fix a point's layout and batch shape (for no-good cuts)."""
        return [
            self.lay[p.lay],
            self.vals["pv"][p.axis("pv")],
            self.vals["db"][p.axis("db")],
            self.vals["te"][p.axis("te")],
        ]

    def size(self) -> int:
        return len(self.lay) + sum(len(d) for d in self.vals.values())
