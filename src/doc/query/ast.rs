//! The typed syntax tree of a query.

use serde_json::Value;

/// A scalar expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// A literal (`undefined` is `None`).
    Lit(Option<Value>),
    /// `@name`, resolved at evaluation.
    Param(String),
    /// The FROM alias itself (`c`).
    Root,
    /// The `i`-th `JOIN x IN …` alias: one element of that array.
    Var(usize),
    /// `e.name` or `e["name"]`.
    Prop(Box<Expr>, String),
    /// `e[i]` with a computed index or name.
    Index(Box<Expr>, Box<Expr>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `e IN (a, b, …)`; `bool` is NOT IN.
    In(Box<Expr>, Vec<Expr>, bool),
    /// `e BETWEEN a AND b`; `bool` is NOT BETWEEN.
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    /// `e LIKE pattern [ESCAPE c]`; `bool` is NOT LIKE.
    Like(Box<Expr>, Box<Expr>, Option<Box<Expr>>, bool),
    /// `cond ? a : b`.
    Ternary(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A system function (upper-case name) and its arguments.
    Call(String, Vec<Expr>),
    /// An aggregate over the rows (`COUNT SUM MIN MAX AVG`).
    Agg(AggFn, Box<Expr>),
    Object(Vec<(String, Expr)>),
    Array(Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnOp {
    Not,
    Neg,
    Plus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    And,
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Concat,
    Coalesce,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AggFn {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// What a query returns per row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Projection {
    /// `SELECT *`: the item.
    Star,
    /// `SELECT VALUE e`.
    Value(Expr),
    /// `SELECT e [AS name], …`: an object of the named values (undefined ones left out).
    Fields(Vec<(String, Expr)>),
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Select {
    pub(crate) distinct: bool,
    pub(crate) top: Option<Expr>,
    pub(crate) projection: Projection,
    /// The FROM alias (`c` in `FROM c`).
    pub(crate) alias: String,
    /// `JOIN x IN e`: each alias and its array expression (which may use earlier aliases).
    pub(crate) joins: Vec<(String, Expr)>,
    /// `GROUP BY e, …`.
    pub(crate) group_by: Vec<Expr>,
    pub(crate) filter: Option<Expr>,
    pub(crate) order_by: Vec<(Expr, bool)>,
    /// `OFFSET n LIMIT m`.
    pub(crate) offset_limit: Option<(Expr, Expr)>,
}

impl Expr {
    /// True if the expression contains an aggregate.
    pub(crate) fn has_aggregate(&self) -> bool {
        match self {
            Expr::Agg(..) => true,
            Expr::Lit(_) | Expr::Param(_) | Expr::Root | Expr::Var(_) => false,
            Expr::Prop(e, _) | Expr::Unary(_, e) => e.has_aggregate(),
            Expr::Index(a, b) | Expr::Binary(_, a, b) => a.has_aggregate() || b.has_aggregate(),
            Expr::In(e, list, _) => e.has_aggregate() || list.iter().any(Expr::has_aggregate),
            Expr::Between(a, b, c, _) | Expr::Ternary(a, b, c) => {
                a.has_aggregate() || b.has_aggregate() || c.has_aggregate()
            }
            Expr::Like(a, b, c, _) => {
                a.has_aggregate()
                    || b.has_aggregate()
                    || c.as_ref().is_some_and(|c| c.has_aggregate())
            }
            Expr::Call(_, args) | Expr::Array(args) => args.iter().any(Expr::has_aggregate),
            Expr::Object(fields) => fields.iter().any(|(_, e)| e.has_aggregate()),
        }
    }
}
