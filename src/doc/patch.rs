//! Partial document update: [`PatchOp`] and how a list of them changes an item.
//!
//! Operations follow Azure Cosmos DB's patch API (itself modelled on JSON Patch, RFC 6902):
//! `add`, `set`, `replace`, `remove`, `incr` and `move`, on JSON Pointer paths (RFC 6901:
//! `~1` is `/` and `~0` is `~` inside a name, `-` names the position after an array's last
//! element). At most [`MAX_PATCH_OPS`] per patch. Rules (every violation is a 400 and nothing
//! is written, `docs/contract.md` §8):
//! - `add`: a missing property is added, an existing one replaced; an array index inserts
//!   (index = length or `-` appends, past the end is a 400);
//! - `set`: as `add`, except that an array index replaces the element there;
//! - `replace`: the target must exist;
//! - `remove`: the target must exist; array elements after it shift down;
//! - `incr`: adds a number to a number, or creates the property with that number;
//! - `move`: removes `from` (which must exist) and adds its value at `path`; `from` may not
//!   be a prefix of `path`;
//! - the parent of every target must exist; `id`, the partition key (and any path leading to
//!   it or through it) and the system properties cannot be patched; `ttl` can.
//!
//! Invariant: [`apply`] works on the caller's copy and either applies every op or returns the
//! first error, so a failing patch leaves the stored item untouched.

use serde_json::{Map, Number, Value};

use super::container::{etag_of, finish, Container, ItemOptions};
use super::partition::{self, PartitionKey};
use super::query::Predicate;
use super::stored;
use super::validate::SYSTEM_PROPERTIES;
use crate::error::{Error, Result};
use crate::ttl::ItemTtl;

/// Most operations one patch may carry (Azure Cosmos DB's limit).
pub const MAX_PATCH_OPS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    Set,
    Replace,
    Remove,
    Incr,
    Move,
}

/// One operation of a partial document update (see [`Container::patch_item`]).
///
/// ```
/// use ebbdb::PatchOp;
/// let ops = [PatchOp::set("/status", "shipped"), PatchOp::incr("/n", 1), PatchOp::add("/tags/-", "x")];
/// assert_eq!(ops[1].op(), "incr");
/// ```
///
/// [`Container::patch_item`]: crate::Container::patch_item
#[derive(Debug, Clone, PartialEq)]
pub struct PatchOp {
    kind: Kind,
    path: String,
    from: Option<String>,
    value: Option<Value>,
}

impl PatchOp {
    fn new(kind: Kind, path: &str, from: Option<&str>, value: Option<Value>) -> Self {
        Self {
            kind,
            path: path.to_string(),
            from: from.map(str::to_string),
            value,
        }
    }

    /// Adds `value` at `path` (replacing a property that exists; inserting into an array).
    #[must_use]
    pub fn add(path: &str, value: impl Into<Value>) -> Self {
        Self::new(Kind::Add, path, None, Some(value.into()))
    }

    /// Sets `path` to `value` (as `add`, but an array index replaces the element).
    #[must_use]
    pub fn set(path: &str, value: impl Into<Value>) -> Self {
        Self::new(Kind::Set, path, None, Some(value.into()))
    }

    /// Replaces the existing value at `path` (400 if there is none).
    #[must_use]
    pub fn replace(path: &str, value: impl Into<Value>) -> Self {
        Self::new(Kind::Replace, path, None, Some(value.into()))
    }

    /// Removes the value at `path` (400 if there is none).
    #[must_use]
    pub fn remove(path: &str) -> Self {
        Self::new(Kind::Remove, path, None, None)
    }

    /// Adds the number `by` to the number at `path`, or creates it with `by` (400 if `by` or
    /// the existing value is not a number).
    #[must_use]
    pub fn incr(path: &str, by: impl Into<Value>) -> Self {
        Self::new(Kind::Incr, path, None, Some(by.into()))
    }

    /// Moves the value at `from` to `path` (Cosmos's `PatchOperation.Move(from, path)`).
    #[must_use]
    pub fn move_from(from: &str, path: &str) -> Self {
        Self::new(Kind::Move, path, Some(from), None)
    }

    /// The operation's name as in the Cosmos REST API: `add`, `set`, `replace`, `remove`,
    /// `incr` or `move`.
    #[must_use]
    pub fn op(&self) -> &'static str {
        match self.kind {
            Kind::Add => "add",
            Kind::Set => "set",
            Kind::Replace => "replace",
            Kind::Remove => "remove",
            Kind::Incr => "incr",
            Kind::Move => "move",
        }
    }

    /// The target path.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The source path of a `move`.
    #[must_use]
    pub fn from(&self) -> Option<&str> {
        self.from.as_deref()
    }

    /// The value of `add`, `set`, `replace` and `incr`.
    #[must_use]
    pub fn value(&self) -> Option<&Value> {
        self.value.as_ref()
    }

    /// The operation in the Cosmos REST shape: `{"op": "incr", "path": "/n", "value": 1}`
    /// (`"from"` for a move).
    #[must_use]
    pub fn to_json_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("op".into(), Value::from(self.op()));
        if let Some(from) = &self.from {
            m.insert("from".into(), Value::from(from.as_str()));
        }
        m.insert("path".into(), Value::from(self.path.as_str()));
        if let Some(v) = &self.value {
            m.insert("value".into(), v.clone());
        }
        Value::Object(m)
    }

    /// Reads an operation in the Cosmos REST shape (see [`PatchOp::to_json_value`]).
    ///
    /// # Errors
    /// 400 for an unknown `op`, a missing `path`, a missing `value` (add, set, replace, incr)
    /// or `from` (move).
    pub fn from_json_value(v: &Value) -> Result<Self> {
        let field = |name: &str| v.get(name).and_then(Value::as_str);
        let path = field("path").ok_or_else(|| bad("a patch operation needs a string 'path'"))?;
        let value = || {
            v.get("value")
                .cloned()
                .ok_or_else(|| bad(format!("patch operation at '{path}' needs a 'value'")))
        };
        Ok(match field("op") {
            Some("add") => Self::add(path, value()?),
            Some("set") => Self::set(path, value()?),
            Some("replace") => Self::replace(path, value()?),
            Some("remove") => Self::remove(path),
            Some("incr") => Self::incr(path, value()?),
            Some("move") => Self::move_from(
                field("from").ok_or_else(|| bad("a move needs a string 'from'"))?,
                path,
            ),
            other => {
                return Err(bad(format!(
                    "unknown patch operation {}",
                    other.map_or_else(|| "(none)".to_string(), |o| format!("'{o}'"))
                )))
            }
        })
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadRequest(msg.into())
}

/// A JSON Pointer split into unescaped segments; 400 unless it starts with `/` and every `~`
/// is `~0` or `~1`. The root (`""` or `"/"` alone) cannot be patched.
fn parse_pointer(path: &str) -> Result<Vec<String>> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad(format!(
            "patch path '{path}' is not a JSON Pointer (it must start with '/')"
        )));
    };
    if rest.is_empty() {
        return Err(bad("the document root cannot be patched"));
    }
    rest.split('/')
        .map(|seg| {
            let mut out = String::with_capacity(seg.len());
            let mut chars = seg.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(bad(format!(
                                "patch path '{path}' has '~' not followed by 0 or 1"
                            )))
                        }
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

/// A patch checked and parsed before anything is read: paths split, protected paths refused.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    ops: Vec<Step>,
}

/// One compiled op: kind, target segments, `from` segments (move), value.
type Step = (Kind, Vec<String>, Option<Vec<String>>, Option<Value>);

/// Checks `ops` against the limits and the protected paths (`pk_path` is the container's
/// partition key path), 400 on the first problem.
pub(crate) fn compile(ops: &[PatchOp], pk_path: &str) -> Result<Compiled> {
    if ops.is_empty() {
        return Err(bad("a patch needs at least one operation"));
    }
    if ops.len() > MAX_PATCH_OPS {
        return Err(bad(format!(
            "a patch may carry at most {MAX_PATCH_OPS} operations; this one has {}",
            ops.len()
        )));
    }
    let pk: Vec<String> = parse_pointer(pk_path)?;
    let protected = |path: &str, segs: &[String]| -> Result<()> {
        let first = segs.first().map_or("", String::as_str);
        if first == "id" || SYSTEM_PROPERTIES.contains(&first) {
            return Err(bad(format!(
                "'{path}' cannot be patched: 'id' and system properties are read-only"
            )));
        }
        let n = segs.len().min(pk.len());
        if segs.get(..n) == pk.get(..n) {
            return Err(bad(format!(
                "'{path}' cannot be patched: it leads to or through the partition key '{pk_path}'"
            )));
        }
        Ok(())
    };
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let segs = parse_pointer(&op.path)?;
        protected(&op.path, &segs)?;
        let from = match (&op.from, op.kind) {
            (Some(f), Kind::Move) => {
                let fsegs = parse_pointer(f)?;
                protected(f, &fsegs)?;
                if segs.len() > fsegs.len() && segs.get(..fsegs.len()) == Some(&fsegs[..]) {
                    return Err(bad(format!(
                        "cannot move '{f}' into its own child '{}'",
                        op.path
                    )));
                }
                Some(fsegs)
            }
            _ => None,
        };
        if op.kind == Kind::Incr && !op.value.as_ref().is_some_and(Value::is_number) {
            return Err(bad(format!(
                "incr at '{}' needs a number, not {}",
                op.path,
                op.value
                    .as_ref()
                    .map_or("nothing", super::validate::json_kind)
            )));
        }
        out.push((op.kind, segs, from, op.value.clone()));
    }
    Ok(Compiled { ops: out })
}

/// An array index segment: digits without a leading zero (RFC 6901), or `None`.
fn index(seg: &str) -> Option<usize> {
    if seg.is_empty() || (seg.len() > 1 && seg.starts_with('0')) {
        return None;
    }
    if !seg.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seg.parse().ok()
}

fn shown(segs: &[String]) -> String {
    segs.iter()
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// The container holding the target of `segs` (every segment but the last must exist).
fn parent_mut<'a, 's>(doc: &'a mut Value, segs: &'s [String]) -> Result<(&'a mut Value, &'s str)> {
    let Some((last, init)) = segs.split_last() else {
        return Err(bad("the document root cannot be patched"));
    };
    let mut cur = doc;
    for (i, seg) in init.iter().enumerate() {
        let missing = || {
            bad(format!(
                "patch path '{}' does not exist",
                shown(&segs[..=i])
            ))
        };
        cur = match cur {
            Value::Object(m) => m.get_mut(seg).ok_or_else(missing)?,
            Value::Array(a) => {
                let at = index(seg).ok_or_else(missing)?;
                a.get_mut(at).ok_or_else(missing)?
            }
            _ => return Err(missing()),
        };
    }
    Ok((cur, last.as_str()))
}

fn not_found(segs: &[String]) -> Error {
    bad(format!("patch path '{}' does not exist", shown(segs)))
}

fn not_container(segs: &[String]) -> Error {
    bad(format!(
        "patch path '{}': its parent is neither an object nor an array",
        shown(segs)
    ))
}

/// Adds (`insert`: array indexes insert) or sets (array indexes replace) `value` at `segs`.
fn put(doc: &mut Value, segs: &[String], value: Value, insert: bool) -> Result<()> {
    let (parent, last) = parent_mut(doc, segs)?;
    match parent {
        Value::Object(m) => {
            m.insert(last.to_string(), value);
            Ok(())
        }
        Value::Array(a) => {
            let at = if last == "-" {
                a.len()
            } else {
                index(last).ok_or_else(|| {
                    bad(format!(
                        "patch path '{}': '{last}' is not an array index",
                        shown(segs)
                    ))
                })?
            };
            if at > a.len() {
                return Err(bad(format!(
                    "patch path '{}': index {at} is past the end of an array of {}",
                    shown(segs),
                    a.len()
                )));
            }
            if at == a.len() {
                a.push(value);
            } else if insert {
                a.insert(at, value);
            } else if let Some(slot) = a.get_mut(at) {
                *slot = value;
            }
            Ok(())
        }
        _ => Err(not_container(segs)),
    }
}

/// The existing value at `segs`, mutably.
fn existing_mut<'a>(doc: &'a mut Value, segs: &[String]) -> Result<&'a mut Value> {
    let (parent, last) = parent_mut(doc, segs)?;
    match parent {
        Value::Object(m) => m.get_mut(last).ok_or_else(|| not_found(segs)),
        Value::Array(a) => index(last)
            .and_then(|i| a.get_mut(i))
            .ok_or_else(|| not_found(segs)),
        _ => Err(not_container(segs)),
    }
}

/// Removes and returns the existing value at `segs`.
fn take(doc: &mut Value, segs: &[String]) -> Result<Value> {
    let (parent, last) = parent_mut(doc, segs)?;
    match parent {
        Value::Object(m) => m.remove(last).ok_or_else(|| not_found(segs)),
        Value::Array(a) => match index(last) {
            Some(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(not_found(segs)),
        },
        _ => Err(not_container(segs)),
    }
}

/// `a + b` for JSON numbers: exact for integers (an overflow falls back to a double), a
/// double otherwise; 400 if the result is not finite.
fn add_numbers(a: &Number, b: &Number, segs: &[String]) -> Result<Value> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(s) = x.checked_add(y) {
            return Ok(Value::from(s));
        }
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        if let Some(s) = x.checked_add(y) {
            return Ok(Value::from(s));
        }
    }
    let sum = a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN);
    Number::from_f64(sum).map(Value::Number).ok_or_else(|| {
        bad(format!(
            "incr at '{}' overflows: the result is not a finite number",
            shown(segs)
        ))
    })
}

/// Applies every op of `patch` to `doc` in order, or returns the first error (400).
pub(crate) fn apply(doc: &mut Value, patch: &Compiled) -> Result<()> {
    for (kind, segs, from, value) in &patch.ops {
        let value = || value.clone().unwrap_or(Value::Null);
        match kind {
            Kind::Add => put(doc, segs, value(), true)?,
            Kind::Set => put(doc, segs, value(), false)?,
            Kind::Replace => *existing_mut(doc, segs)? = value(),
            Kind::Remove => {
                take(doc, segs)?;
            }
            Kind::Incr => {
                let by = match value() {
                    Value::Number(n) => n,
                    other => {
                        return Err(bad(format!(
                            "incr needs a number, not {}",
                            super::validate::json_kind(&other)
                        )))
                    }
                };
                match existing_mut(doc, segs) {
                    Ok(slot) => {
                        let sum = match &*slot {
                            Value::Number(n) => add_numbers(n, &by, segs)?,
                            other => {
                                return Err(bad(format!(
                                    "incr at '{}': the value there is {}, not a number",
                                    shown(segs),
                                    super::validate::json_kind(other)
                                )))
                            }
                        };
                        *slot = sum;
                    }
                    // Missing: created with the increment (its parent must exist).
                    Err(_) => put(doc, segs, Value::Number(by), false)?,
                }
            }
            Kind::Move => {
                let Some(from) = from else {
                    return Err(bad("move needs a 'from' path"));
                };
                if from == segs {
                    existing_mut(doc, segs)?;
                    continue;
                }
                let moved = take(doc, from)?;
                put(doc, segs, moved, true)?;
            }
        }
    }
    if !doc.is_object() {
        return Err(bad("a patch must leave the item a JSON object"));
    }
    Ok(())
}

/// The item's own properties after a patch (system properties are re-stamped by the write).
pub(crate) fn into_map(doc: Value) -> Map<String, Value> {
    match doc {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Patches `current` (the live item, `None` if missing or expired) for a write at `now_ms`:
/// 404 without an item, 412 when `if_match` or the filter predicate does not hold, 400 for an
/// op that cannot apply, then the checks of every write ([`finish`]).
pub(super) fn patch_doc(
    current: Option<Value>,
    id: &str,
    patch: &Compiled,
    opts: &ItemOptions,
    predicate: Option<&Predicate>,
    now_ms: u64,
    limit: usize,
) -> Result<(Vec<u8>, ItemTtl, Value)> {
    let Some(mut doc) = current else {
        return Err(Error::NotFound(format!("item '{id}'")));
    };
    if let Some(want) = &opts.if_match {
        if etag_of(&doc) != Some(want.as_str()) {
            return Err(Error::PreconditionFailed(format!(
                "item '{id}' has changed (etag does not match)"
            )));
        }
    }
    if predicate.is_some_and(|p| !p.matches(&doc)) {
        return Err(Error::PreconditionFailed(format!(
            "item '{id}' does not match the filter predicate"
        )));
    }
    apply(&mut doc, patch)?;
    finish(into_map(doc), id, now_ms, limit)
}

/// Refuses (400) to patch a stored value whose partition key (at `pk_path`) is not `pk`, the
/// partition it is stored under: a value put there through the key-value API, which a patch
/// would otherwise turn into a document item contradicting its own key (queries rely on a
/// document item's key naming its partition: `Prepared::within_partition`).
pub(super) fn check_home(
    current: Option<&Value>,
    pk: &PartitionKey,
    pk_path: &str,
    id: &str,
) -> Result<()> {
    match current {
        Some(doc) if partition::extract(doc, pk_path).ok().as_ref() != Some(pk) => {
            Err(Error::BadRequest(format!(
                "item '{id}' cannot be patched: its partition key at '{pk_path}' is not that of \
                 the partition it is stored under (it was not written as an item); replace it \
                 instead"
            )))
        }
        _ => Ok(()),
    }
}

/// Parses a stored item for a read-modify-write.
pub(super) fn parse_current(bytes: Option<Vec<u8>>) -> Result<Option<Value>> {
    bytes
        .map(|b| {
            stored::parse(&b)
                .map_err(|e| Error::BadRequest(format!("stored item is not JSON: {e}")))
        })
        .transpose()
}

impl Container {
    /// Applies `ops` to a live item, atomically (`docs/contract.md` §8): all of them or, on
    /// the first that cannot apply, none. A patch is a write: `_ts` and `_etag` are renewed
    /// and the TTL countdown restarts. Returns the item as stored.
    ///
    /// ```
    /// use ebbdb::{ContainerProperties, Database, PatchOp};
    /// use serde_json::json;
    /// let dir = tempfile::tempdir()?;
    /// let db = Database::open(dir.path())?;
    /// let c = db.create_container(ContainerProperties::new("orders", "/customer"))?;
    /// c.create_item(&json!({"id": "1", "customer": "ann", "n": 1, "tags": []}))?;
    /// let v = c.patch_item("ann", "1", &[PatchOp::incr("/n", 2), PatchOp::add("/tags/-", "x")])?;
    /// assert_eq!((v["n"].clone(), v["tags"].clone()), (json!(3), json!(["x"])));
    /// # Ok::<(), ebbdb::Error>(())
    /// ```
    ///
    /// # Errors
    /// 400 for more than 10 ops, a bad path, a protected path (`id`, the partition key,
    /// system properties), an op whose target or parent is missing, an invalid `ttl`; 404 if
    /// the item is missing or expired; 413 if the result is too large.
    pub fn patch_item(
        &self,
        pk: impl Into<PartitionKey>,
        id: &str,
        ops: &[PatchOp],
    ) -> Result<Value> {
        self.patch_item_with(pk, id, ops, &ItemOptions::default())
    }

    /// Patch with options: `if_match` (412 on another etag) and `filter_predicate`
    /// (`FROM c WHERE …` in the query dialect; 412 when the live item does not match).
    ///
    /// # Errors
    /// As [`Container::patch_item`], plus 412, and 400 for a predicate that does not parse.
    pub fn patch_item_with(
        &self,
        pk: impl Into<PartitionKey>,
        id: &str,
        ops: &[PatchOp],
        opts: &ItemOptions,
    ) -> Result<Value> {
        let patch = compile(ops, &self.props.partition_key_path)?;
        let predicate = opts
            .filter_predicate
            .as_deref()
            .map(Predicate::parse)
            .transpose()?;
        let pk = pk.into();
        let key = partition::encode_key(&pk, id);
        let limit = self.db.max_item_size();
        let mut out = None;
        let mut stage = self.db.indexes().stage(&self.ks);
        let done = self.write_items(|view| {
            let current = parse_current(view.get(&key)?)?;
            check_home(current.as_ref(), &pk, &self.props.partition_key_path, id)?;
            let (bytes, ttl, stored) = patch_doc(
                current,
                id,
                &patch,
                opts,
                predicate.as_ref(),
                view.now_ms(),
                limit,
            )?;
            stage.put(&key, Some(&stored));
            out = Some(stored);
            Ok(vec![(key.clone(), Some((bytes, ttl)))])
        });
        stage.finish(&done);
        done?;
        self.db.notify_change();
        out.ok_or_else(|| Error::NotFound(format!("item '{id}'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, ops: &[PatchOp]) -> Result<Value> {
        let mut doc = doc;
        apply(&mut doc, &compile(ops, "/pk")?)?;
        Ok(doc)
    }

    #[test]
    fn pointer_escapes() {
        assert_eq!(
            parse_pointer("/a~1b/c~0d/~01").ok(),
            Some(vec!["a/b".to_string(), "c~d".into(), "~1".into()])
        );
        assert!(parse_pointer("a").is_err());
        assert!(parse_pointer("/").is_err());
        assert!(parse_pointer("/a~2").is_err());
        assert!(parse_pointer("/a~").is_err());
    }

    #[test]
    fn rest_shape_round_trips() -> Result<()> {
        let ops = [
            PatchOp::add("/a", 1),
            PatchOp::set("/b", json!({"x": [1]})),
            PatchOp::replace("/c", "s"),
            PatchOp::remove("/d"),
            PatchOp::incr("/e", -2.5),
            PatchOp::move_from("/f", "/g"),
        ];
        for op in ops {
            assert_eq!(PatchOp::from_json_value(&op.to_json_value())?, op);
        }
        assert_eq!(
            PatchOp::move_from("/f", "/g").to_json_value(),
            json!({"op": "move", "from": "/f", "path": "/g"})
        );
        for bad in [
            json!({"op": "copy", "path": "/a"}),
            json!({"op": "add", "path": "/a"}),
            json!({"op": "move", "path": "/a"}),
            json!({"op": "remove"}),
        ] {
            assert!(PatchOp::from_json_value(&bad).is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn array_indexes_are_strict() {
        assert_eq!(index("0"), Some(0));
        assert_eq!(index("12"), Some(12));
        assert_eq!(index("01"), None);
        assert_eq!(index("-1"), None);
        assert_eq!(index(""), None);
        assert_eq!(index("1a"), None);
    }

    #[test]
    fn add_inserts_set_overwrites_in_arrays() -> Result<()> {
        let d = json!({"a": [1, 2, 3]});
        assert_eq!(
            run(d.clone(), &[PatchOp::add("/a/1", 9)])?,
            json!({"a": [1, 9, 2, 3]})
        );
        assert_eq!(
            run(d.clone(), &[PatchOp::set("/a/1", 9)])?,
            json!({"a": [1, 9, 3]})
        );
        assert_eq!(
            run(d.clone(), &[PatchOp::add("/a/3", 9)])?,
            json!({"a": [1, 2, 3, 9]})
        );
        assert!(run(d, &[PatchOp::add("/a/4", 9)]).is_err());
        Ok(())
    }

    #[test]
    fn incr_keeps_integers_exact_and_falls_back_on_overflow() -> Result<()> {
        let d = json!({"n": i64::MAX - 1});
        assert_eq!(
            run(d.clone(), &[PatchOp::incr("/n", 1)])?,
            json!({"n": i64::MAX})
        );
        // Past i64 but within u64: still an exact integer.
        let big = run(d, &[PatchOp::incr("/n", 5)])?;
        assert_eq!(big["n"].as_u64(), Some(i64::MAX as u64 + 4));
        let under = run(json!({"n": i64::MIN + 1}), &[PatchOp::incr("/n", -5)])?;
        assert!(under["n"].is_f64());
        assert_eq!(
            run(json!({"n": 1.5}), &[PatchOp::incr("/n", 1)])?,
            json!({"n": 2.5})
        );
        assert!(run(json!({"n": f64::MAX}), &[PatchOp::incr("/n", f64::MAX)]).is_err());
        Ok(())
    }
}
