//! The index planner: which top-level `AND` term of the WHERE clause a secondary index can
//! answer (DESIGN.md §"Secondary indexes", planner rules).
//!
//! A term qualifies when one side is `c.<indexed path>` (property names from the FROM alias)
//! and the other a literal or a bound parameter: `=` with a scalar, `IN` with scalars,
//! `<`/`<=`/`>`/`>=` and `BETWEEN` with a scalar bound, `STARTSWITH(c.p, 'x')` (case-sensitive).
//! Preference: equality/`IN`, then `STARTSWITH` and two-sided ranges, then one-sided ranges;
//! the first such term wins. The probe only chooses which items are read: the whole WHERE
//! still runs on each, so a probe may return more than matches, never less.

use serde_json::Value;

use super::ast::{AggFn, BinOp, Expr, Projection};
use super::{conjuncts, is_path, Prepared};
use crate::doc::index::{encode, Probe};

/// A probe chosen for a query: the path's position in the index set, the probe, and whether
/// the probe alone decides the WHERE (then `COUNT` needs no item read, see `IndexSet::count`).
pub(crate) struct Chosen {
    pub(crate) path: usize,
    pub(crate) probe: Probe,
    pub(crate) exact: bool,
}

impl Prepared<'_> {
    fn constant(&self, e: &Expr) -> Option<Value> {
        match e {
            Expr::Lit(Some(v)) => Some(v.clone()),
            Expr::Param(p) => self.params.get(p).cloned(),
            _ => None,
        }
    }

    fn scalar(&self, e: &Expr) -> Option<Value> {
        self.constant(e).filter(|v| encode::tag(v).is_some())
    }

    /// Which indexed path (position in `paths`) `e` is.
    fn which(e: &Expr, paths: &[Vec<String>]) -> Option<usize> {
        paths.iter().position(|p| !p.is_empty() && is_path(e, p))
    }

    /// One term as (path, probe, rank, exact); lower rank is preferred.
    fn term(&self, t: &Expr, paths: &[Vec<String>]) -> Option<(usize, Probe, u8, bool)> {
        match t {
            Expr::Binary(op, a, b) => {
                let (path, v, op) = match (Self::which(a, paths), Self::which(b, paths)) {
                    (Some(p), _) => (p, self.scalar(b)?, *op),
                    (None, Some(p)) => (p, self.scalar(a)?, flip(*op)?),
                    (None, None) => return None,
                };
                let (probe, rank, exact) = match op {
                    BinOp::Eq => (Probe::Values(vec![v]), 0, true),
                    BinOp::Gt => (
                        Probe::Range {
                            lo: Some(v),
                            hi: None,
                        },
                        3,
                        false,
                    ),
                    BinOp::Ge => (
                        Probe::Range {
                            lo: Some(v),
                            hi: None,
                        },
                        3,
                        true,
                    ),
                    BinOp::Lt => (
                        Probe::Range {
                            lo: None,
                            hi: Some(v),
                        },
                        3,
                        false,
                    ),
                    BinOp::Le => (
                        Probe::Range {
                            lo: None,
                            hi: Some(v),
                        },
                        3,
                        true,
                    ),
                    _ => return None,
                };
                Some((path, probe, rank, exact))
            }
            Expr::In(e, list, false) => {
                let path = Self::which(e, paths)?;
                let values = list
                    .iter()
                    .map(|x| self.scalar(x))
                    .collect::<Option<Vec<Value>>>()?;
                Some((path, Probe::Values(values), 0, true))
            }
            Expr::Between(e, lo, hi, false) => {
                let path = Self::which(e, paths)?;
                let (lo, hi) = (self.scalar(lo)?, self.scalar(hi)?);
                let same = encode::tag(&lo).map(class) == encode::tag(&hi).map(class);
                let probe = Probe::Range {
                    lo: Some(lo),
                    hi: Some(hi),
                };
                Some((path, probe, 1, same))
            }
            Expr::Call(name, args) if name == "STARTSWITH" => {
                let (e, p) = match args.as_slice() {
                    [e, p] => (e, p),
                    [e, p, ci] if self.constant(ci) == Some(Value::Bool(false)) => (e, p),
                    _ => return None,
                };
                let path = Self::which(e, paths)?;
                let Some(Value::String(p)) = self.constant(p) else {
                    return None;
                };
                Some((path, Probe::Prefix(p), 1, true))
            }
            _ => None,
        }
    }

    /// The index probe for this query over an index set of `paths`, if a WHERE term allows.
    pub(crate) fn index_probe(&self, paths: &[Vec<String>]) -> Option<Chosen> {
        let filter = self.select.filter.as_ref()?;
        let mut terms = Vec::new();
        conjuncts(filter, &mut terms);
        let single = terms.len() == 1;
        let found: Vec<(usize, Probe, u8, bool)> =
            terms.iter().filter_map(|t| self.term(t, paths)).collect();
        // One-sided ranges on one path (`c.n >= 5 AND c.n < 9`) make one two-sided range when
        // their bounds are of one type class; it is exact only if both terms were.
        let mut merged = Vec::new();
        for (i, (p, a, _, ex_a)) in found.iter().enumerate() {
            for (q, b, _, ex_b) in &found[i + 1..] {
                if p != q {
                    continue;
                }
                if let (
                    Probe::Range {
                        lo: Some(lo),
                        hi: None,
                    },
                    Probe::Range {
                        lo: None,
                        hi: Some(hi),
                    },
                )
                | (
                    Probe::Range {
                        lo: None,
                        hi: Some(hi),
                    },
                    Probe::Range {
                        lo: Some(lo),
                        hi: None,
                    },
                ) = (a, b)
                {
                    if encode::tag(lo).map(class) == encode::tag(hi).map(class) {
                        let probe = Probe::Range {
                            lo: Some(lo.clone()),
                            hi: Some(hi.clone()),
                        };
                        merged.push((*p, probe, 1, *ex_a && *ex_b));
                    }
                }
            }
        }
        let single = single || (terms.len() == 2 && !merged.is_empty());
        let mut best: Option<(usize, Probe, u8, bool)> = None;
        for c in found.into_iter().chain(merged) {
            if best.as_ref().is_none_or(|b| c.2 < b.2) {
                best = Some(c);
            }
        }
        best.map(|(path, probe, _, exact)| Chosen {
            path,
            probe,
            exact: exact && single,
        })
    }

    /// True for exactly `SELECT VALUE COUNT(<literal>) FROM c WHERE …` with no other clause.
    pub(crate) fn is_filtered_count(&self) -> bool {
        let q = &self.select;
        matches!(&q.projection, Projection::Value(Expr::Agg(AggFn::Count, arg))
            if matches!(arg.as_ref(), Expr::Lit(Some(_))))
            && q.filter.is_some()
            && q.joins.is_empty()
            && q.group_by.is_empty()
            && q.order_by.is_empty()
            && q.top.is_none()
            && q.offset_limit.is_none()
            && !q.distinct
    }
}

/// Booleans compare with each other; every other type only with itself.
fn class(t: u8) -> u8 {
    if t == encode::TRUE {
        encode::FALSE
    } else {
        t
    }
}

/// `a op b` as `b op' a`.
fn flip(op: BinOp) -> Option<BinOp> {
    Some(match op {
        BinOp::Eq => BinOp::Eq,
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        _ => return None,
    })
}
