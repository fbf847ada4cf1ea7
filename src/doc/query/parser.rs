//! A hand-written recursive-descent parser (precedence climbing for operators) from tokens to
//! [`Select`]. Every error is a 400 naming the byte position. Nesting is bounded, so no input
//! can exhaust the stack.
//!
//! Precedence, lowest first: `?:`, `??`, `OR`, `AND`, `NOT`, comparisons (`= != <> < <= > >=`,
//! `IN`, `BETWEEN`, `LIKE`), `||`, `+ -`, `* / %`, unary `- +`, then member access and indexing.

use serde_json::Value;

use super::ast::{AggFn, BinOp, Expr, Projection, Select, UnOp};
use super::lexer::{lex, syntax, Spanned, Tok};
use crate::error::Result;

/// Deepest expression nesting accepted (parentheses, NOT, unary minus, constructors).
const MAX_DEPTH: usize = 128;
/// Most binary operators and member accesses in one query: each nests the tree one level
/// (`a AND b AND …` is left-deep), and evaluation and drop recurse over the tree, so this bounds
/// the recursion together with `MAX_DEPTH`.
const MAX_LINKS: usize = 1000;

/// Functions the evaluator implements (upper case), with their allowed argument counts.
pub(crate) const FUNCTIONS: &[(&str, usize, usize)] = &[
    ("IS_DEFINED", 1, 1),
    ("IS_NULL", 1, 1),
    ("IS_NUMBER", 1, 1),
    ("IS_STRING", 1, 1),
    ("IS_BOOL", 1, 1),
    ("IS_ARRAY", 1, 1),
    ("IS_OBJECT", 1, 1),
    ("IS_PRIMITIVE", 1, 1),
    ("STARTSWITH", 2, 3),
    ("ENDSWITH", 2, 3),
    ("CONTAINS", 2, 3),
    ("LOWER", 1, 1),
    ("UPPER", 1, 1),
    ("LENGTH", 1, 1),
    ("SUBSTRING", 3, 3),
    ("CONCAT", 2, 64),
    ("INDEX_OF", 2, 3),
    ("LEFT", 2, 2),
    ("RIGHT", 2, 2),
    ("LTRIM", 1, 1),
    ("RTRIM", 1, 1),
    ("TRIM", 1, 1),
    ("REPLACE", 3, 3),
    ("REVERSE", 1, 1),
    ("TOSTRING", 1, 1),
    ("ARRAY_CONTAINS", 2, 3),
    ("ARRAY_LENGTH", 1, 1),
    ("ABS", 1, 1),
    ("FLOOR", 1, 1),
    ("CEILING", 1, 1),
    ("ROUND", 1, 1),
    ("TRUNC", 1, 1),
    ("SQRT", 1, 1),
    ("POWER", 2, 2),
];

struct Parser {
    toks: Vec<Spanned>,
    pos: usize,
    depth: usize,
    links: usize,
    alias: String,
    joins: Vec<String>,
}

/// Parses a whole query.
pub(crate) fn parse(text: &str) -> Result<Select> {
    let mut p = Parser {
        toks: lex(text)?,
        pos: 0,
        depth: 0,
        links: 0,
        alias: String::new(),
        joins: Vec::new(),
    };
    p.select()
}

/// Parses a filter predicate, `FROM c [WHERE expr]` (the conditional patch's
/// `filter_predicate`): the FROM and WHERE clauses of a query, with the same grammar and
/// positions. `None` when there is no WHERE (every item matches).
pub(crate) fn parse_predicate(text: &str) -> Result<Option<Expr>> {
    let mut p = Parser {
        toks: lex(text)?,
        pos: 0,
        depth: 0,
        links: 0,
        alias: String::new(),
        joins: Vec::new(),
    };
    p.expect_kw("FROM")?;
    p.alias = p.ident()?;
    let filter = if p.eat_kw("WHERE") {
        Some(p.expr()?)
    } else {
        None
    };
    if !matches!(p.peek(), Tok::End) {
        return Err(syntax(
            p.at(),
            format!(
                "a filter predicate is FROM c [WHERE ...]; unexpected {}",
                p.show()
            ),
        ));
    }
    Ok(filter)
}

fn is_kw(tok: &Tok, kw: &str) -> bool {
    matches!(tok, Tok::Ident(w) if w.eq_ignore_ascii_case(kw))
}

const RESERVED: &[&str] = &[
    "SELECT", "FROM", "WHERE", "ORDER", "BY", "ASC", "DESC", "AND", "OR", "NOT", "IN", "BETWEEN",
    "LIKE", "ESCAPE", "TOP", "DISTINCT", "VALUE", "AS", "OFFSET", "LIMIT", "JOIN", "GROUP",
];

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).map_or(&Tok::End, |s| &s.tok)
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(0, |s| s.at)
    }

    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos += 1;
        t
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if is_kw(self.peek(), kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_kw(&mut self, kw: &str) -> Result<()> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(syntax(
                self.at(),
                format!("expected {kw}, found {}", self.show()),
            ))
        }
    }

    fn eat_sym(&mut self, sym: &str) -> bool {
        if matches!(self.peek(), Tok::Sym(s) if *s == sym) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, sym: &str) -> Result<()> {
        if self.eat_sym(sym) {
            Ok(())
        } else {
            Err(syntax(
                self.at(),
                format!("expected '{sym}', found {}", self.show()),
            ))
        }
    }

    fn show(&self) -> String {
        match self.peek() {
            Tok::Ident(w) => format!("'{w}'"),
            Tok::Param(p) => format!("'@{p}'"),
            Tok::Number(n) => format!("'{n}'"),
            Tok::Str(s) => format!("'\"{s}\"'"),
            Tok::Sym(s) => format!("'{s}'"),
            Tok::End => "the end of the query".into(),
        }
    }

    fn ident(&mut self) -> Result<String> {
        match self.peek().clone() {
            Tok::Ident(w) if !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(&w)) => {
                self.pos += 1;
                Ok(w)
            }
            _ => Err(syntax(
                self.at(),
                format!("expected a name, found {}", self.show()),
            )),
        }
    }

    fn select(&mut self) -> Result<Select> {
        self.expect_kw("SELECT")?;
        let distinct = self.eat_kw("DISTINCT");
        let top = if self.eat_kw("TOP") {
            Some(self.count_arg()?)
        } else {
            None
        };
        // The projection refers to the alias, which comes later: parse it after FROM.
        let projection_start = self.pos;
        self.skip_to_from()?;
        self.expect_kw("FROM")?;
        let alias = self.ident()?;
        if self.eat_kw("AS") {
            return Err(syntax(
                self.at(),
                "FROM <container> AS <alias> is not supported; write FROM c",
            ));
        }
        self.alias = alias.clone();
        let mut joins = Vec::new();
        while self.eat_kw("JOIN") {
            let at = self.at();
            let name = self.ident()?;
            if name == alias || self.joins.contains(&name) {
                return Err(syntax(at, format!("the alias '{name}' is used twice")));
            }
            self.expect_kw("IN")?;
            // The array expression sees the aliases before this one.
            let e_at = self.at();
            let e = self.expr()?;
            if e.has_aggregate() {
                return Err(syntax(e_at, "a JOIN cannot iterate an aggregate"));
            }
            self.joins.push(name.clone());
            joins.push((name, e));
        }
        let after_from = self.pos;
        self.pos = projection_start;
        let projection = self.projection()?;
        if !is_kw(self.peek(), "FROM") {
            return Err(syntax(
                self.at(),
                format!("expected FROM, found {}", self.show()),
            ));
        }
        self.pos = after_from;
        let filter = if self.eat_kw("WHERE") {
            Some(self.expr()?)
        } else {
            None
        };
        let mut group_by = Vec::new();
        if self.eat_kw("GROUP") {
            self.expect_kw("BY")?;
            loop {
                let at = self.at();
                let e = self.expr()?;
                if e.has_aggregate() {
                    return Err(syntax(at, "GROUP BY cannot group by an aggregate"));
                }
                group_by.push(e);
                if !self.eat_sym(",") {
                    break;
                }
            }
        }
        let mut order_by = Vec::new();
        if self.eat_kw("ORDER") {
            self.expect_kw("BY")?;
            loop {
                let e = self.expr()?;
                let desc = if self.eat_kw("DESC") {
                    true
                } else {
                    self.eat_kw("ASC");
                    false
                };
                order_by.push((e, desc));
                if !self.eat_sym(",") {
                    break;
                }
            }
        }
        let offset_limit = if self.eat_kw("OFFSET") {
            let off = self.count_arg()?;
            self.expect_kw("LIMIT")?;
            Some((off, self.count_arg()?))
        } else {
            None
        };
        if !matches!(self.peek(), Tok::End) {
            return Err(syntax(self.at(), format!("unexpected {}", self.show())));
        }
        Ok(Select {
            distinct,
            top,
            projection,
            alias,
            joins,
            group_by,
            filter,
            order_by,
            offset_limit,
        })
    }

    /// Moves to the FROM that ends the projection (skipping nested brackets).
    fn skip_to_from(&mut self) -> Result<()> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Tok::End => return Err(syntax(self.at(), "expected FROM")),
                Tok::Sym("(" | "[" | "{") => depth += 1,
                Tok::Sym(")" | "]" | "}") => depth = depth.saturating_sub(1),
                t if depth == 0 && is_kw(t, "FROM") => return Ok(()),
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// A non-negative integer literal or a parameter (TOP, OFFSET, LIMIT).
    fn count_arg(&mut self) -> Result<Expr> {
        let at = self.at();
        match self.bump() {
            Tok::Number(n) if n >= 0.0 && n.fract() == 0.0 => {
                Ok(Expr::Lit(Some(Value::from(n as u64))))
            }
            Tok::Param(p) => Ok(Expr::Param(p)),
            _ => Err(syntax(at, "expected a non-negative integer or a parameter")),
        }
    }

    fn projection(&mut self) -> Result<Projection> {
        if self.eat_sym("*") {
            return Ok(Projection::Star);
        }
        if self.eat_kw("VALUE") {
            return Ok(Projection::Value(self.expr()?));
        }
        let mut fields = Vec::new();
        loop {
            let e = self.expr()?;
            let name = if self.eat_kw("AS") {
                self.ident()?
            } else {
                match &e {
                    Expr::Prop(_, name) => name.clone(),
                    _ => format!("${}", fields.len() + 1),
                }
            };
            fields.push((name, e));
            if !self.eat_sym(",") {
                break;
            }
        }
        Ok(Projection::Fields(fields))
    }

    /// Counts one more binary operator or member access.
    fn link(&mut self, _chain: &mut usize) -> Result<()> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(syntax(
                self.at(),
                format!("more than {MAX_LINKS} operators in one query"),
            ));
        }
        Ok(())
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(syntax(
                self.at(),
                format!("expression nested deeper than {MAX_DEPTH}"),
            ));
        }
        let r = f(self);
        self.depth -= 1;
        r
    }

    pub(crate) fn expr(&mut self) -> Result<Expr> {
        self.nested(Self::ternary)
    }

    fn ternary(&mut self) -> Result<Expr> {
        let cond = self.coalesce()?;
        if self.eat_sym("?") {
            let a = self.expr()?;
            self.expect_sym(":")?;
            let b = self.expr()?;
            return Ok(Expr::Ternary(Box::new(cond), Box::new(a), Box::new(b)));
        }
        Ok(cond)
    }

    fn coalesce(&mut self) -> Result<Expr> {
        let mut left = self.or()?;
        let mut n = 0;
        while self.eat_sym("??") {
            self.link(&mut n)?;
            let right = self.or()?;
            left = Expr::Binary(BinOp::Coalesce, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn or(&mut self) -> Result<Expr> {
        let mut left = self.and()?;
        let mut n = 0;
        while self.eat_kw("OR") {
            self.link(&mut n)?;
            let right = self.and()?;
            left = Expr::Binary(BinOp::Or, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr> {
        let mut left = self.not()?;
        let mut n = 0;
        while self.eat_kw("AND") {
            self.link(&mut n)?;
            let right = self.not()?;
            left = Expr::Binary(BinOp::And, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr> {
        if self.eat_kw("NOT") {
            let e = self.nested(Self::not)?;
            return Ok(Expr::Unary(UnOp::Not, Box::new(e)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr> {
        let left = self.concat()?;
        let negated = is_kw(self.peek(), "NOT")
            && self.toks.get(self.pos + 1).is_some_and(|t| {
                is_kw(&t.tok, "IN") || is_kw(&t.tok, "BETWEEN") || is_kw(&t.tok, "LIKE")
            });
        if negated {
            self.pos += 1;
        }
        if self.eat_kw("IN") {
            self.expect_sym("(")?;
            let mut list = Vec::new();
            if !self.eat_sym(")") {
                loop {
                    list.push(self.expr()?);
                    if self.eat_sym(")") {
                        break;
                    }
                    self.expect_sym(",")?;
                }
            }
            return Ok(Expr::In(Box::new(left), list, negated));
        }
        if self.eat_kw("BETWEEN") {
            let low = self.concat()?;
            self.expect_kw("AND")?;
            let high = self.concat()?;
            return Ok(Expr::Between(
                Box::new(left),
                Box::new(low),
                Box::new(high),
                negated,
            ));
        }
        if self.eat_kw("LIKE") {
            let pattern = self.concat()?;
            let escape = if self.eat_kw("ESCAPE") {
                Some(Box::new(self.concat()?))
            } else {
                None
            };
            return Ok(Expr::Like(
                Box::new(left),
                Box::new(pattern),
                escape,
                negated,
            ));
        }
        let op = match self.peek() {
            Tok::Sym("=") => BinOp::Eq,
            Tok::Sym("!=" | "<>") => BinOp::Ne,
            Tok::Sym("<") => BinOp::Lt,
            Tok::Sym("<=") => BinOp::Le,
            Tok::Sym(">") => BinOp::Gt,
            Tok::Sym(">=") => BinOp::Ge,
            _ => return Ok(left),
        };
        self.pos += 1;
        let right = self.concat()?;
        Ok(Expr::Binary(op, Box::new(left), Box::new(right)))
    }

    fn concat(&mut self) -> Result<Expr> {
        let mut left = self.additive()?;
        let mut n = 0;
        while self.eat_sym("||") {
            self.link(&mut n)?;
            let right = self.additive()?;
            left = Expr::Binary(BinOp::Concat, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn additive(&mut self) -> Result<Expr> {
        let mut left = self.multiplicative()?;
        let mut n = 0;
        loop {
            let op = match self.peek() {
                Tok::Sym("+") => BinOp::Add,
                Tok::Sym("-") => BinOp::Sub,
                _ => return Ok(left),
            };
            self.link(&mut n)?;
            self.pos += 1;
            let right = self.multiplicative()?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
    }

    fn multiplicative(&mut self) -> Result<Expr> {
        let mut left = self.unary()?;
        let mut n = 0;
        loop {
            let op = match self.peek() {
                Tok::Sym("*") => BinOp::Mul,
                Tok::Sym("/") => BinOp::Div,
                Tok::Sym("%") => BinOp::Rem,
                _ => return Ok(left),
            };
            self.link(&mut n)?;
            self.pos += 1;
            let right = self.unary()?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
    }

    fn unary(&mut self) -> Result<Expr> {
        if self.eat_sym("-") {
            let e = self.nested(Self::unary)?;
            if let Expr::Lit(Some(Value::Number(n))) = &e {
                if let Some(f) = n.as_f64() {
                    return Ok(Expr::Lit(Some(num(-f))));
                }
            }
            return Ok(Expr::Unary(UnOp::Neg, Box::new(e)));
        }
        if self.eat_sym("+") {
            let e = self.nested(Self::unary)?;
            return Ok(Expr::Unary(UnOp::Plus, Box::new(e)));
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr> {
        let mut e = self.primary()?;
        let mut n = 0;
        loop {
            if matches!(self.peek(), Tok::Sym("." | "[")) {
                self.link(&mut n)?;
            }
            if self.eat_sym(".") {
                let at = self.at();
                match self.bump() {
                    Tok::Ident(name) => e = Expr::Prop(Box::new(e), name),
                    _ => return Err(syntax(at, "expected a property name after '.'")),
                }
            } else if self.eat_sym("[") {
                let index = self.expr()?;
                self.expect_sym("]")?;
                e = match index {
                    Expr::Lit(Some(Value::String(name))) => Expr::Prop(Box::new(e), name),
                    other => Expr::Index(Box::new(e), Box::new(other)),
                };
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr> {
        let at = self.at();
        match self.bump() {
            Tok::Number(n) => Ok(Expr::Lit(Some(num(n)))),
            Tok::Str(s) => Ok(Expr::Lit(Some(Value::String(s)))),
            Tok::Param(p) => Ok(Expr::Param(p)),
            Tok::Sym("(") => {
                let e = self.expr()?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Tok::Sym("[") => {
                let mut items = Vec::new();
                if !self.eat_sym("]") {
                    loop {
                        items.push(self.expr()?);
                        if self.eat_sym("]") {
                            break;
                        }
                        self.expect_sym(",")?;
                    }
                }
                Ok(Expr::Array(items))
            }
            Tok::Sym("{") => {
                let mut fields = Vec::new();
                if !self.eat_sym("}") {
                    loop {
                        let key_at = self.at();
                        let key = match self.bump() {
                            Tok::Ident(k) | Tok::Str(k) => k,
                            _ => return Err(syntax(key_at, "expected a property name")),
                        };
                        self.expect_sym(":")?;
                        fields.push((key, self.expr()?));
                        if self.eat_sym("}") {
                            break;
                        }
                        self.expect_sym(",")?;
                    }
                }
                Ok(Expr::Object(fields))
            }
            Tok::Ident(w) => self.word(w, at),
            _ => {
                self.pos -= 1;
                Err(syntax(at, format!("unexpected {}", self.show())))
            }
        }
    }

    fn word(&mut self, w: String, at: usize) -> Result<Expr> {
        let upper = w.to_ascii_uppercase();
        match upper.as_str() {
            "TRUE" => return Ok(Expr::Lit(Some(Value::Bool(true)))),
            "FALSE" => return Ok(Expr::Lit(Some(Value::Bool(false)))),
            "NULL" => return Ok(Expr::Lit(Some(Value::Null))),
            "UNDEFINED" => return Ok(Expr::Lit(None)),
            _ => {}
        }
        if self.eat_sym("(") {
            let mut args = Vec::new();
            if !self.eat_sym(")") {
                loop {
                    args.push(self.expr()?);
                    if self.eat_sym(")") {
                        break;
                    }
                    self.expect_sym(",")?;
                }
            }
            let agg = match upper.as_str() {
                "COUNT" => Some(AggFn::Count),
                "SUM" => Some(AggFn::Sum),
                "MIN" => Some(AggFn::Min),
                "MAX" => Some(AggFn::Max),
                "AVG" => Some(AggFn::Avg),
                _ => None,
            };
            if let Some(f) = agg {
                let [arg] = <[Expr; 1]>::try_from(args)
                    .map_err(|_| syntax(at, format!("{upper} takes one argument")))?;
                if arg.has_aggregate() {
                    return Err(syntax(at, "aggregates cannot be nested"));
                }
                return Ok(Expr::Agg(f, Box::new(arg)));
            }
            let Some(&(_, min, max)) = FUNCTIONS.iter().find(|(name, _, _)| *name == upper) else {
                return Err(syntax(at, format!("unknown function '{w}'")));
            };
            if args.len() < min || args.len() > max {
                return Err(syntax(
                    at,
                    format!(
                        "{upper} takes {min}{} arguments, not {}",
                        if max > min {
                            format!(" to {max}")
                        } else {
                            String::new()
                        },
                        args.len()
                    ),
                ));
            }
            return Ok(Expr::Call(upper, args));
        }
        if w == self.alias {
            return Ok(Expr::Root);
        }
        if let Some(i) = self.joins.iter().position(|j| *j == w) {
            return Ok(Expr::Var(i));
        }
        Err(syntax(
            at,
            format!("unknown name '{w}' (the FROM alias is '{}')", self.alias),
        ))
    }
}

/// A JSON number for `f` (integers stay integers).
pub(crate) fn num(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_clauses() {
        let q = parse(
            "SELECT DISTINCT TOP 5 c.id, c.a.b AS x FROM c WHERE c.n > 1 AND NOT c.s IN ('a', 'b') ORDER BY c.n DESC, c.id OFFSET 1 LIMIT 2",
        )
        .expect("parse");
        assert!(q.distinct);
        assert_eq!(q.alias, "c");
        assert!(matches!(q.projection, Projection::Fields(ref f) if f.len() == 2 && f[1].0 == "x"));
        assert_eq!(q.order_by.len(), 2);
        assert!(q.order_by[0].1);
        assert!(q.offset_limit.is_some());
    }

    #[test]
    fn errors_are_positioned_400s() {
        for (text, at) in [
            ("SELECT * FROM c WHERE", 21),
            ("SELECT * FROM c WHERE c.a = = 1", 28),
            ("SELECT NOPE(c.a) FROM c", 7),
            ("SELECT * FROM c ORDER c.a", 22),
            ("SELECT x.a FROM c", 7),
        ] {
            let e = parse(text).expect_err(text);
            assert_eq!(e.status_code(), 400);
            assert!(
                e.to_string().contains(&format!("position {at}")),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!(
            "SELECT VALUE {}1{} FROM c",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert!(parse(&deep).is_err());
        let nots = format!("SELECT * FROM c WHERE {} true", "NOT ".repeat(100_000));
        assert!(parse(&nots).is_err());
        let negs = format!("SELECT VALUE {}1 FROM c", "-".repeat(100_000));
        assert!(parse(&negs).is_err());
        let chain = format!("SELECT VALUE 1{} FROM c", " + 1".repeat(100_000));
        assert!(parse(&chain).is_err());
        let path = format!("SELECT VALUE c{} FROM c", ".a".repeat(100_000));
        assert!(parse(&path).is_err());
        let ands = format!("SELECT * FROM c WHERE true{}", " AND true".repeat(900));
        assert!(parse(&ands).is_ok());
    }
}
