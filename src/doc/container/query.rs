//! How a container runs a query: the plan (DESIGN.md §"Query planner" and §"Secondary
//! indexes") and the reads each plan makes.
//!
//! In order of preference:
//! 1. `SELECT VALUE COUNT(1) FROM c` over every partition: the key directory's live count.
//! 2. A partition (from the options, or pinned by `c.<pk path> = value`) with `c.id = 'x'`: a
//!    point read.
//! 3. A built secondary index on a path a WHERE term can use (`query/plan.rs`), other than
//!    the pinned partition key: the candidates the index names, within the partition if one is
//!    pinned, read through the key directory with a scan's semantics.
//! 4. A pinned partition: a prefix scan of it.
//! 5. A scan of the container.
//!
//! Every plan runs the WHERE on every item it reads, so plans differ in cost only (a plan
//! reading one partition leaves out the terms that partition makes true for the items the
//! document layer wrote: `Prepared::within_partition`).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Container;
use crate::doc::index::IndexSet;
use crate::doc::partition::{self, PartitionKey};
use crate::doc::query::{
    self, Chosen, Cursor, Ordered, Owned, PageSpec, Prepared, Query, QueryOptions, Rows,
};
use crate::doc::validate::SYSTEM_PROPERTIES;
use crate::error::Result;

/// A query's plan.
enum Plan {
    LiveCount,
    Point(PartitionKey, String),
    /// With the path and direction of an `ORDER BY` the index walk serves.
    Index(
        Arc<IndexSet>,
        Chosen,
        Option<PartitionKey>,
        Option<(Vec<String>, bool)>,
    ),
    Partition(PartitionKey),
    Scan,
}

impl Plan {
    fn describe(&self, set: Option<&IndexSet>) -> String {
        match self {
            Plan::LiveCount => "count".into(),
            Plan::Point(..) => "point".into(),
            Plan::Index(_, c, _, _) => {
                let path = set
                    .and_then(|s| s.paths().get(c.path))
                    .map(|p| p.join("/"))
                    .unwrap_or_default();
                format!("index /{path}")
            }
            Plan::Partition(_) => "partition".into(),
            Plan::Scan => "scan".into(),
        }
    }
}

impl Container {
    fn plan(&self, q: &Prepared<'_>, opts: &QueryOptions, page: &PageSpec) -> Plan {
        let pk = match &opts.partition_key {
            Some(pk) => Some(pk.clone()),
            None => self.pinned_partition(q),
        };
        if pk.is_none() && q.is_plain_count() && page.after.is_none() {
            return Plan::LiveCount;
        }
        if let Some(pk) = &pk {
            if let Some(Value::String(id)) = q.required_value(&["id".to_string()]) {
                return Plan::Point(pk.clone(), id);
            }
        }
        if let Some(set) = self.db.indexes().get(&self.ks).filter(|s| s.is_ready()) {
            let pk_path = pk.as_ref().map(|_| self.pk_segments());
            let usable: Vec<Vec<String>> = set
                .paths()
                .iter()
                .map(|p| match &pk_path {
                    Some(pkp) if pkp == p => Vec::new(), // the partition already narrows it
                    _ => p.clone(),
                })
                .collect();
            if let Some(chosen) = q.index_probe(&usable) {
                // The same path in a lone ORDER BY: walk the index in order.
                let order = q
                    .index_order(page)
                    .filter(|(path, _)| usable.get(chosen.path) == Some(path));
                return Plan::Index(set, chosen, pk, order);
            }
        }
        match pk {
            Some(pk) => Plan::Partition(pk),
            None => Plan::Scan,
        }
    }

    /// Test hook: the plan a query would run with (`count`, `point`, `index /path`,
    /// `partition`, `scan`).
    ///
    /// # Errors
    /// 400 for a query that does not parse or check.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn query_plan(&self, q: &Query) -> Result<String> {
        let prepared = query::prepare(q)?;
        let plan = self.plan(&prepared, &QueryOptions::default(), &PageSpec::default());
        let set = self.db.indexes().get(&self.ks);
        Ok(plan.describe(set.as_deref()))
    }

    /// Test hook: the secondary index entries held (all paths) and item keys tracked.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn index_size(&self) -> Option<(usize, usize)> {
        self.db.indexes().get(&self.ks).map(|s| s.size())
    }

    pub(super) fn run_query(
        &self,
        q: &Query,
        opts: &QueryOptions,
        page: &PageSpec,
    ) -> Result<(Rows, Option<Cursor>)> {
        let prepared = query::prepare(q)?;
        let plan = self.plan(&prepared, opts, page);
        let live_count = || Ok((Rows::values(vec![Value::from(self.ks.len()?)]), None));
        if matches!(plan, Plan::LiveCount) {
            return live_count();
        }
        self.check_exists()?;
        let from = prepared.scan_from(page);
        match plan {
            Plan::LiveCount => live_count(),
            Plan::Point(pk, id) => {
                let key = partition::encode_key(&pk, &id);
                let item = self.ks.get(&key)?.map(|bytes| Ok((key.clone(), bytes)));
                prepared.run(Owned(item.into_iter()), page)
            }
            Plan::Index(set, chosen, pk, order) => {
                let mut prepared = prepared;
                if let Some(pk) = &pk {
                    self.within(&mut prepared, pk);
                }
                let at = IndexedAt {
                    set: &set,
                    chosen: &chosen,
                    pk: pk.as_ref(),
                    from: from.as_deref(),
                    order,
                };
                match run_indexed(prepared, &at, page)? {
                    Indexed::Done(done) => Ok(done),
                    // The set was replaced between the plan and the reader's registration.
                    Indexed::Retired(prepared) => self.run_unindexed(*prepared, pk, from, page),
                }
            }
            Plan::Partition(pk) => self.run_unindexed(prepared, Some(pk), from, page),
            Plan::Scan => self.run_unindexed(prepared, None, from, page),
        }
    }

    /// A partition's prefix scan, or a scan of the container, from the cursor's item if any.
    fn run_unindexed(
        &self,
        prepared: Prepared<'_>,
        pk: Option<PartitionKey>,
        from: Option<Vec<u8>>,
        page: &PageSpec,
    ) -> Result<(Rows, Option<Cursor>)> {
        let mut prepared = prepared;
        match pk {
            Some(pk) => {
                self.within(&mut prepared, &pk);
                let prefix = partition::encode_prefix(&pk);
                match from {
                    // A continued unordered scan seeks to the cursor's item.
                    Some(start) => prepared.run(self.ks.prefix_from(&prefix, &start), page),
                    None => prepared.run(self.ks.prefix(prefix), page),
                }
            }
            None => {
                let scan = match from {
                    Some(start) => self.ks.range(start..),
                    None => self.ks.iter(),
                };
                prepared.run(scan, page)
            }
        }
    }

    fn pk_segments(&self) -> Vec<String> {
        self.props
            .partition_key_path
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect()
    }

    /// The partition a query's WHERE pins with `c.<partition key path> = value`, if any.
    fn pinned_partition(&self, q: &Prepared<'_>) -> Option<PartitionKey> {
        let path = self.pk_segments();
        self.partition_of(&path, q.required_value(&path)?)
    }

    /// The partition of an item holding `value` at the partition key path (`path`, its
    /// segments), if it can hold that value: one definition of how a value maps to a
    /// partition.
    fn partition_of(&self, path: &[String], value: Value) -> Option<PartitionKey> {
        let mut item = value;
        for seg in path.iter().rev() {
            let mut m = Map::new();
            m.insert(seg.clone(), item);
            item = Value::Object(m);
        }
        partition::extract(&item, &self.props.partition_key_path).ok()
    }

    /// Tells `q` that it reads only partition `pk`'s items, so that the WHERE's terms the
    /// partition makes true are not evaluated ([`Prepared::within_partition`]).
    fn within(&self, q: &mut Prepared<'_>, pk: &PartitionKey) {
        let path = self.pk_segments();
        // A system property's value is replaced when an item is written, so an item's key
        // need not name the partition its stored text holds there.
        if path
            .first()
            .is_some_and(|p| SYSTEM_PROPERTIES.contains(&p.as_str()))
        {
            return;
        }
        q.within_partition(&path, |v| {
            self.partition_of(&path, v.clone()).as_ref() == Some(pk)
        });
    }
}

/// What an index plan reads: the probe, the partition and start key that bound it, and the
/// `ORDER BY` it serves, if any.
struct IndexedAt<'p> {
    set: &'p IndexSet,
    chosen: &'p Chosen,
    pk: Option<&'p PartitionKey>,
    from: Option<&'p [u8]>,
    order: Option<(Vec<String>, bool)>,
}

/// What [`run_indexed`] did.
enum Indexed<'q> {
    /// The page and its cursor.
    Done((Rows, Option<Cursor>)),
    /// The set turned out retired once the reader was registered (see
    /// [`IndexSet::is_ready`]): the query, for the caller to scan instead.
    Retired(Box<Prepared<'q>>),
}

/// Runs `q` over the items the index probe names (within partition `pk` and from `from` when
/// given), read through the key directory with a scan's semantics; the whole WHERE runs on
/// each. An exact `COUNT` reads only the items whose index entry might be stale; an `ORDER
/// BY` on the probed path walks the index in order and stops when the page is full.
fn run_indexed<'q>(q: Prepared<'q>, at: &IndexedAt<'_>, page: &PageSpec) -> Result<Indexed<'q>> {
    let (set, chosen, from) = (at.set, at.chosen, at.from);
    let prefix = at.pk.map(partition::encode_prefix);
    let keep =
        |k: &[u8]| prefix.as_ref().is_none_or(|p| k.starts_with(p)) && from.is_none_or(|f| k >= f);
    if chosen.exact && q.is_filtered_count() && page.after.is_none() {
        let (n, mut picked, unsure) = set.count(chosen.path, &chosen.probe, keep);
        if !set.is_ready() {
            return Ok(Indexed::Retired(Box::new(q)));
        }
        picked.set_keys(unsure);
        let (rest, _) = q.run(picked, page)?;
        let more = rest.first_value().and_then(Value::as_u64).unwrap_or(0);
        let total = u64::try_from(n).unwrap_or(u64::MAX).saturating_add(more);
        return Ok(Indexed::Done((
            Rows::values(vec![Value::from(total)]),
            None,
        )));
    }
    if let Some((path, desc)) = &at.order {
        let start = set.ordered(chosen.path, &chosen.probe, *desc, &keep);
        if !set.is_ready() {
            return Ok(Indexed::Retired(Box::new(q)));
        }
        return q
            .run_presorted(Ordered::new(set, start, &keep, path.clone()), page)
            .map(Indexed::Done);
    }
    let (mut picked, keys) = set.candidates(chosen.path, &chosen.probe, keep);
    if !set.is_ready() {
        return Ok(Indexed::Retired(Box::new(q)));
    }
    picked.set_keys(keys);
    q.run(picked, page).map(Indexed::Done)
}
