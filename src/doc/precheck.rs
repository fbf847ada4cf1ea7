//! What an item must satisfy before it is converted to JSON: finite numbers and bounded
//! nesting.
//!
//! [`check`] walks the item once with a serializer that writes nothing, before
//! `serde_json::to_value` (or anything else) touches it, and fails on the first of:
//!
//! - **a non-finite float** (NaN, ±infinity), naming the field: `serde_json::to_value` would
//!   turn it into `null` without a word, so a typed item would be stored as something else than
//!   the caller wrote. A `serde_json::Value` cannot hold one, and text such as `1e400` fails in
//!   `serde_json`'s own parser ("number out of range").
//! - **nesting deeper than [`MAX_DEPTH`]** (128, Azure Cosmos DB's limit for nested objects and
//!   arrays; the item object itself is level 1). The walk follows the item's own `Serialize`
//!   impl, which recurses once per level for a `Value` or a recursive type, so the walker
//!   refuses to *enter* level 129: however deep the caller's item is (10,000 or 1,000,000
//!   levels), the recursion stops after 128 levels, on any thread stack that can hold 128
//!   levels of `serde_json`'s own recursion. Only then do `to_value`, `to_vec` and the reads
//!   (which also recurse per level) see the item, and those stay within 128 levels too.
//!   Levels are counted as `serde_json` writes them: a sequence, tuple, map or struct is one
//!   level, an enum's newtype variant one (`{"V": x}`), a tuple or struct variant two.
//!
//! It allocates nothing but the error.

use serde::ser::{self, Serialize};
use std::fmt;

use crate::error::Error;

/// Deepest nesting of objects and arrays an item may have (Azure Cosmos DB's limit), counting
/// the item object itself as level 1.
pub const MAX_DEPTH: usize = 128;

/// Why an item was refused.
#[derive(Debug)]
pub(crate) enum Refused {
    /// A non-finite float, or another serialization error (the message names the field).
    Invalid(String),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl Refused {
    /// The 400 for this refusal.
    pub(crate) fn into_error(self) -> Error {
        match self {
            Refused::Invalid(m) => Error::BadRequest(format!("item is not valid JSON: {m}")),
            Refused::TooDeep => Error::BadRequest(format!(
                "item is nested more than {MAX_DEPTH} levels deep (objects and arrays); the limit \
                 is {MAX_DEPTH}"
            )),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Invalid(m) => f.write_str(m),
            Refused::TooDeep => write!(f, "nested more than {MAX_DEPTH} levels deep"),
        }
    }
}

impl std::error::Error for Refused {}

impl ser::Error for Refused {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Refused::Invalid(msg.to_string())
    }
}

/// Fails if `value` serializes any NaN or infinite float, or nests objects and arrays deeper
/// than [`MAX_DEPTH`]. Recurses at most [`MAX_DEPTH`] levels, whatever `value` holds.
pub(crate) fn check<T: Serialize + ?Sized>(value: &T) -> Result<(), Refused> {
    value.serialize(Walker { depth: 0 })
}

/// The walker at `depth` open objects and arrays.
#[derive(Clone, Copy)]
struct Walker {
    depth: usize,
}

impl Walker {
    /// Opens `levels` more objects or arrays, refusing to go past [`MAX_DEPTH`].
    fn enter(self, levels: usize) -> Result<Walker, Refused> {
        let depth = self.depth + levels;
        if depth > MAX_DEPTH {
            return Err(Refused::TooDeep);
        }
        Ok(Walker { depth })
    }
}

fn float(v: f64) -> Result<(), Refused> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Refused::Invalid(format!(
            "the number {v} cannot be represented in JSON (only finite IEEE-754 doubles can)"
        )))
    }
}

impl ser::Serializer for Walker {
    type Ok = ();
    type Error = Refused;
    type SerializeSeq = Walker;
    type SerializeTuple = Walker;
    type SerializeTupleStruct = Walker;
    type SerializeTupleVariant = Walker;
    type SerializeMap = Walker;
    type SerializeStruct = Walker;
    type SerializeStructVariant = Walker;

    fn serialize_bool(self, _: bool) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Refused> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Refused> {
        float(v)
    }
    fn serialize_char(self, _: char) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Refused> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Refused> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), Refused> {
        // `{"Variant": v}`
        v.serialize(self.enter(1)?)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Walker, Refused> {
        self.enter(1)
    }
    fn serialize_tuple(self, _: usize) -> Result<Walker, Refused> {
        self.enter(1)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Walker, Refused> {
        self.enter(1)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Walker, Refused> {
        // `{"Variant": [..]}`
        self.enter(2)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Walker, Refused> {
        self.enter(1)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Walker, Refused> {
        self.enter(1)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Walker, Refused> {
        // `{"Variant": {..}}`
        self.enter(2)
    }
}

/// Adds the field name to a non-finite error coming out of a nested value (a depth error
/// stays as it is: it would otherwise name every one of its 128 levels).
fn at(name: &str, e: Refused) -> Refused {
    match e {
        Refused::Invalid(m) => Refused::Invalid(format!("{m} (in field '{name}')")),
        too_deep @ Refused::TooDeep => too_deep,
    }
}

impl ser::SerializeSeq for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Refused> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeTuple for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Refused> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Refused> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Refused> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeMap for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Refused> {
        k.serialize(*self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Refused> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeStruct for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Refused> {
        v.serialize(*self).map_err(|e| at(name, e))
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Walker {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Refused> {
        v.serialize(*self).map_err(|e| at(name, e))
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check;
    use serde::Serialize;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    struct Reading {
        id: String,
        values: Vec<f64>,
        limit: Option<f32>,
    }

    #[test]
    fn finite_items_pass() {
        let r = Reading {
            id: "a".into(),
            values: vec![0.0, -0.0, f64::MAX, f64::MIN_POSITIVE, 5e-324],
            limit: Some(1.5),
        };
        assert!(check(&r).is_ok());
        assert!(check(&serde_json::json!({"a": [1, 2.5, null]})).is_ok());
    }

    #[test]
    fn non_finite_anywhere_fails_and_names_the_field() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let r = Reading {
                id: "a".into(),
                values: vec![1.0, bad],
                limit: None,
            };
            let err = check(&r).expect_err("non-finite must fail");
            assert!(err.to_string().contains("'values'"), "{err}");
        }
        let r = Reading {
            id: "a".into(),
            values: vec![],
            limit: Some(f32::INFINITY),
        };
        assert!(check(&r).is_err());
        let mut m = BTreeMap::new();
        m.insert("x", f64::NAN);
        assert!(check(&m).is_err());
    }
}

#[cfg(test)]
mod depth_tests {
    use super::{check, Refused, MAX_DEPTH};
    use serde::Serialize;
    use serde_json::{json, Value};

    fn nested(depth: usize) -> Value {
        let mut v = json!({});
        for _ in 1..depth {
            v = json!({ "a": v });
        }
        v
    }

    #[test]
    fn depth_is_counted_like_serde_json_writes_it() {
        assert!(check(&nested(MAX_DEPTH)).is_ok());
        assert!(matches!(
            check(&nested(MAX_DEPTH + 1)),
            Err(Refused::TooDeep)
        ));

        #[derive(Serialize)]
        enum E {
            New(Value),
            Tuple(u8, Value),
            Struct { v: Value },
        }
        // `{"New": v}` is one level more than v; tuple and struct variants two.
        assert!(check(&E::New(nested(MAX_DEPTH - 1))).is_ok());
        assert!(check(&E::New(nested(MAX_DEPTH))).is_err());
        assert!(check(&E::Tuple(0, nested(MAX_DEPTH - 2))).is_ok());
        assert!(check(&E::Tuple(0, nested(MAX_DEPTH - 1))).is_err());
        assert!(check(&E::Struct {
            v: nested(MAX_DEPTH - 2)
        })
        .is_ok());
        assert!(check(&E::Struct {
            v: nested(MAX_DEPTH - 1)
        })
        .is_err());
        for (ok, bad) in [
            (
                serde_json::to_value(E::New(nested(MAX_DEPTH - 1))),
                MAX_DEPTH,
            ),
            (
                serde_json::to_value(E::Tuple(0, nested(MAX_DEPTH - 2))),
                MAX_DEPTH,
            ),
        ] {
            assert_eq!(
                ok.map(|v| crate::doc::stored::depth(v.to_string().as_bytes()))
                    .ok(),
                Some(bad)
            );
        }
    }
}
