"""The decision variables: one Boolean per combination of a layout row, a micro-batch shape
(dp, b, M), an expert group (tp, ep, etp), a recomputation and a ZeRO stage that the row allows
and whose bound does not exceed the best objective known, and one-hot Booleans over the
pipeline (pp, v) values, channelled to the chosen row's pp. Literals of axis values are sums of
combinations, made when a constraint needs one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
from ortools.sat.python import cp_model

from meshplan.solver.costmodel import Point
from meshplan.solver.costmodel.factors import Factor
from meshplan.solver.cpsat.tables import Tables

Literal = cp_model.IntVar | bool


class Axes:
    """The combinations (row, db, te, r, z), the pipeline values, and literals of axis values."""

    def __init__(
        self, m: cp_model.CpModel, tb: Tables, rows: Sequence[int], cap: float | None
    ) -> None:
        self.m, self.tb = m, tb
        cols: dict[str, list[np.ndarray]] = {k: [] for k in ("lay", "db", "te", "r", "z", "lb")}
        tb.refine(list(rows), np.inf if cap is None else cap)  # the rows' fine bounds at once
        for r in rows:
            f = tb.fine(r, np.inf if cap is None else cap)
            ok = np.isfinite(f.by_rz) if cap is None else f.by_rz <= cap
            c, ri, zi = np.nonzero(ok)
            for k, v in zip(
                ("lay", "db", "te", "r", "z", "lb"),
                (np.full(len(c), r), f.db[c], f.te[c], ri, zi, f.by_rz[c, ri, zi]),
                strict=True,
            ):
                cols[k].append(v)
        self.col = {
            k: np.concatenate(v).astype(float if k == "lb" else np.int64) for k, v in cols.items()
        }
        self.lb = self.col.pop("lb")
        self.k = len(self.lb)
        self.combo = [m.new_bool_var(f"c{i}") for i in range(self.k)]
        m.add_exactly_one(self.combo)
        sp = tb.sp
        pps = sorted({sp.layouts[r].pp for r in set(self.col["lay"].tolist())})
        self.pv = {
            i: m.new_bool_var(f"pv{v}") for i, v in enumerate(sp.pv) if v[0] in pps
        }  # position in sp.pv -> Boolean
        m.add_exactly_one(self.pv.values())
        self._lits: dict[tuple[str, frozenset[int]], Literal] = {}
        self._masks: dict[tuple, list[tuple[object, np.ndarray]]] = {}
        self._values: dict[str, list[int]] = {}
        self._by_frac: dict[tuple[str, Factor], dict[Fraction, list[int]]] = {}
        self._channel(pps)

    def _channel(self, pps: list[int]) -> None:
        """The pipeline's pp is the chosen row's; interleaving only with a micro-batch count the
        schedule can run (not both, one constraint per pp)."""
        m, sp = self.m, self.tb.sp
        row_pp = np.array([sp.layouts[r].pp for r in self.col["lay"].tolist()], dtype=np.int64)
        for pp in pps:
            pvs = [b for i, b in self.pv.items() if sp.pv[i][0] == pp]
            if len(pps) > 1:
                m.add(sum(pvs) == self.sum_where(row_pp == pp))
            bad_pv = [b for i, b in self.pv.items() if sp.pv[i][0] == pp and sp.pv[i][1] > 1]
            dbs = self.values("db")
            bad_db = [d for d in dbs if not sp.pipeline_fits_batch((pp, 2), sp.db[d])]
            if bad_pv and bad_db:
                m.add(sum(bad_pv) + self.sum_where(self.among("db", bad_db)) <= 1)

    def among(self, axis: str, keys: Sequence[int]) -> np.ndarray:
        """Which combinations take one of the axis values at these positions (a lookup table
        over the positions: np.isin costs ~50 us a call on these small arrays, ~0.3 ms a plan)."""
        col = self.col[axis]
        hit = np.zeros(int(col.max(initial=-1)) + 1, dtype=bool)
        keys = [k for k in keys if k < len(hit)]
        hit[keys] = True
        return hit[col]

    def sum_where(self, mask: np.ndarray) -> cp_model.LinearExprT:
        return cp_model.LinearExpr.sum([self.combo[i] for i in np.flatnonzero(mask).tolist()])

    def values(self, axis: str) -> list[int]:
        """Positions of the axis values in the model (rows for "lay")."""
        if axis == "pv":
            return list(self.pv)
        if axis not in self._values:
            self._values[axis] = np.unique(self.col[axis]).tolist()
        return self._values[axis]

    def any_of(self, axis: str, keys: Sequence[int]) -> Literal:
        """A literal true iff the axis takes one of the values at these positions (True when
        the model holds no other)."""
        k = (axis, frozenset(keys))
        if k not in self._lits:
            if axis == "pv":
                if len(keys) == len(self.pv):
                    self._lits[k] = True
                elif len(keys) == 1:
                    self._lits[k] = self.pv[keys[0]]
                else:
                    lit = self.m.new_bool_var("pv_in")
                    self.m.add(lit == sum(self.pv[i] for i in keys))
                    self._lits[k] = lit
            else:
                mask = self.among(axis, keys)
                if mask.all():
                    self._lits[k] = True
                elif mask.sum() == 1:
                    self._lits[k] = self.combo[int(np.flatnonzero(mask)[0])]
                else:
                    lit = self.m.new_bool_var(f"{axis}_in")
                    self.m.add(lit == self.sum_where(mask))
                    self._lits[k] = lit
        return self._lits[k]

    def by_factor(self, axis: str, fn: Factor) -> dict[Fraction, list[int]]:
        """The positions of the axis values in the model, by their factor `fn` (made once per
        axis and factor: groups share factors)."""
        k = (axis, fn)
        got = self._by_frac.get(k)
        if got is None:
            fr, dom = self.tb.sp.cm.fracs, self.tb.domain[axis]
            got = {}
            for i in self.values(axis):
                got.setdefault(fr(fn, dom[i]), []).append(i)
            self._by_frac[k] = got
        return got

    def key_positions(self, axis: str, key: Callable[[object], object]) -> dict[object, list[int]]:
        """The positions of the axis values in the model, by their key."""
        dom = self.tb.domain[axis]
        out: dict[object, list[int]] = {}
        for i in self.values(axis):
            out.setdefault(key(dom[i]), []).append(i)
        return out

    def key_masks(
        self, axis: str, key: Callable[[object], object]
    ) -> list[tuple[object, np.ndarray]]:
        """Per key of the axis values in the model: which combinations take one of its values
        (made once per axis and key function)."""
        k = (axis, key)
        if k not in self._masks:
            self._masks[k] = [
                (kv, self.among(axis, keys)) for kv, keys in self.key_positions(axis, key).items()
            ]
        return self._masks[k]

    # -- points -------------------------------------------------------------------------
    def _find(self, p: Point) -> tuple[int, int] | None:
        """(combination, pipeline position) of a point, None when the model does not hold it."""
        tb = self.tb
        row = tb.index.get(p.lay)
        pos = tb.pos
        try:
            want = {
                "lay": row,
                "db": pos["db"][p.axis("db")],
                "te": pos["te"][p.axis("te")],
                "r": pos["r"][p.r],
                "z": pos["z"][p.z],
            }
            pv = pos["pv"][p.axis("pv")]
        except KeyError:
            return None
        if row is None or pv not in self.pv:
            return None
        hit = np.ones(self.k, dtype=bool)
        for a, v in want.items():
            hit &= self.col[a] == v
        found = np.flatnonzero(hit)
        return (int(found[0]), pv) if len(found) else None

    def holds(self, p: Point) -> bool:
        return self._find(p) is not None

    def hint(self, p: Point) -> None:
        at = self._find(p)
        if at is None:
            return
        for i, b in enumerate(self.combo):
            self.m.add_hint(b, i == at[0])
        for i, b in self.pv.items():
            self.m.add_hint(b, i == at[1])

    def chosen(self, solver: cp_model.CpSolver) -> Point:
        k = next(i for i, b in enumerate(self.combo) if solver.boolean_value(b))
        pv = next(i for i, b in self.pv.items() if solver.boolean_value(b))
        sp = self.tb.sp
        c = {a: int(v[k]) for a, v in self.col.items()}
        (_, b, mm), (_, e, et) = sp.db[c["db"]], sp.te[c["te"]]
        return Point(sp.layouts[c["lay"]], sp.pv[pv][1], b, mm, e, et, sp.rs[c["r"]], sp.zs[c["z"]])

    def point_literals(self, p: Point) -> list[Literal] | None:
        """Literals that fix a point's layout and batch shape (None: not in this model)."""
        tb = self.tb
        row = tb.index.get(p.lay)
        try:
            keys = [("db", tb.pos["db"][p.axis("db")]), ("te", tb.pos["te"][p.axis("te")])]
            pv = tb.pos["pv"][p.axis("pv")]
        except KeyError:
            return None
        if row is None or pv not in self.pv or row not in self.col["lay"]:
            return None
        if any(v not in self.col[a] for a, v in keys):
            return None
        return [self.any_of("lay", [row]), self.pv[pv], *(self.any_of(a, [v]) for a, v in keys)]
