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
    /// The direct sub-expressions (the one place that knows the tree's shape; the checks
    /// that walk it build on this).
    pub(crate) fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Lit(_) | Expr::Param(_) | Expr::Root | Expr::Var(_) => Vec::new(),
            Expr::Prop(e, _) | Expr::Unary(_, e) | Expr::Agg(_, e) => vec![e],
            Expr::Index(a, b) | Expr::Binary(_, a, b) => vec![a, b],
            Expr::In(e, list, _) => std::iter::once(e.as_ref()).chain(list).collect(),
            Expr::Between(a, b, c, _) | Expr::Ternary(a, b, c) => vec![a, b, c],
            Expr::Like(a, b, c, _) => [Some(a.as_ref()), Some(b.as_ref()), c.as_deref()]
                .into_iter()
                .flatten()
                .collect(),
            Expr::Call(_, args) | Expr::Array(args) => args.iter().collect(),
            Expr::Object(fields) => fields.iter().map(|(_, e)| e).collect(),
        }
    }

    /// True if the expression contains an aggregate.
    pub(crate) fn has_aggregate(&self) -> bool {
        matches!(self, Expr::Agg(..)) || self.children().into_iter().any(Expr::has_aggregate)
    }
}
