//! Rejects items whose numbers JSON cannot hold.
//!
//! `serde_json::to_value` turns a non-finite `f32`/`f64` (NaN, ±infinity) into `null` without
//! a word, so a typed item with `f64::INFINITY` in it would be stored as something else than
//! the caller wrote. [`check`] walks the item once with a serializer that writes nothing and
//! fails on the first non-finite float, naming the field it found it in; the document layer
//! calls it before converting an item, and answers 400 on failure.
//!
//! A `serde_json::Value` cannot hold a non-finite number, and text such as `1e400` fails in
//! `serde_json`'s own parser ("number out of range"), so this walk only matters for typed
//! items; it allocates nothing but the error.

use serde::ser::{self, Serialize};
use std::fmt;

/// Why an item was refused: a non-finite float at `path` (JSON-pointer-like).
#[derive(Debug)]
pub(crate) struct NotFinite(String);

impl fmt::Display for NotFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotFinite {}

impl ser::Error for NotFinite {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        NotFinite(msg.to_string())
    }
}

/// Fails if `value` serializes any NaN or infinite float.
pub(crate) fn check<T: Serialize + ?Sized>(value: &T) -> Result<(), NotFinite> {
    value.serialize(Walker)
}

#[derive(Clone, Copy)]
struct Walker;

fn float(v: f64) -> Result<(), NotFinite> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(NotFinite(format!(
            "the number {v} cannot be represented in JSON (only finite IEEE-754 doubles can)"
        )))
    }
}

impl ser::Serializer for Walker {
    type Ok = ();
    type Error = NotFinite;
    type SerializeSeq = Walker;
    type SerializeTuple = Walker;
    type SerializeTupleStruct = Walker;
    type SerializeTupleVariant = Walker;
    type SerializeMap = Walker;
    type SerializeStruct = Walker;
    type SerializeStructVariant = Walker;

    fn serialize_bool(self, _: bool) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), NotFinite> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), NotFinite> {
        float(v)
    }
    fn serialize_char(self, _: char) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), NotFinite> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), NotFinite> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), NotFinite> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), NotFinite> {
        v.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Walker, NotFinite> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Walker, NotFinite> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Walker, NotFinite> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Walker, NotFinite> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Walker, NotFinite> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Walker, NotFinite> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Walker, NotFinite> {
        Ok(self)
    }
}

/// Adds the field name to an error coming out of a nested value.
fn at(name: &str, e: NotFinite) -> NotFinite {
    NotFinite(format!("{} (in field '{name}')", e.0))
}

impl ser::SerializeSeq for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotFinite> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), NotFinite> {
        Ok(())
    }
}

impl ser::SerializeTuple for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotFinite> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), NotFinite> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotFinite> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), NotFinite> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotFinite> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), NotFinite> {
        Ok(())
    }
}

impl ser::SerializeMap for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), NotFinite> {
        k.serialize(*self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotFinite> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), NotFinite> {
        Ok(())
    }
}

impl ser::SerializeStruct for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), NotFinite> {
        v.serialize(*self).map_err(|e| at(name, e))
    }
    fn end(self) -> Result<(), NotFinite> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Walker {
    type Ok = ();
    type Error = NotFinite;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), NotFinite> {
        v.serialize(*self).map_err(|e| at(name, e))
    }
    fn end(self) -> Result<(), NotFinite> {
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
