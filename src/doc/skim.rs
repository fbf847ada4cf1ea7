//! A checking skim over a stored item's JSON text: finds the text of some top-level
//! properties without building any value, and checks the rest as strictly as `serde_json`'s
//! parser does when it builds a `serde_json::Value` (UTF-8, control characters, escapes
//! including lone surrogates, number syntax, literals, nesting at most
//! [`MAX_DEPTH`], nothing after the item).
//!
//! It may refuse text the parser would accept (numbers with an exponent or hundreds of digits
//! are handed to the parser to decide), never the other way round: the caller
//! ([`stored::parse_fields`](super::stored::parse_fields)) takes a refusal as "ask the parser".
//! Strings are scanned eight bytes at a time while they hold nothing but printable ASCII.

use super::precheck::MAX_DEPTH;

/// The skim could not vouch for the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused;

type Res<T> = Result<T, Refused>;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Bytes of `x` that are zero get their high bit set (and possibly bytes above such a byte:
/// a false alarm only sends the scan to its careful byte-at-a-time path).
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGH
}

/// Calls `found(i, text)` for each top-level property of the object in `bytes` whose name is
/// `wanted[i]` (in text order; a repeated name is reported each time), `text` being the
/// property's value as it stands in `bytes`.
///
/// `doc`: the text is a document item as the document layer wrote it (record flag `DOC`: one
/// object serialized from a map, so valid and without repeated names). The skim then returns
/// as soon as every wanted name was found, leaving the rest of the text unread: nothing after
/// it could add a property or make the text one the parser refuses.
///
/// # Errors
/// [`Refused`] if the text read is not one JSON object the skim can vouch for.
pub(crate) fn fields<'a>(
    bytes: &'a [u8],
    wanted: &[String],
    doc: bool,
    mut found: impl FnMut(usize, &'a [u8]),
) -> Res<()> {
    // Bit `i` for each wanted name not met yet; early return only for a document item and
    // at most 64 names (beyond that the whole text is read).
    let early = doc && wanted.len() <= 64;
    let mut missing: u64 = match wanted.len() {
        64.. => u64::MAX,
        n => (1 << n) - 1,
    };
    let mut p = Skim { b: bytes, i: 0 };
    p.ws();
    p.expect(b'{')?;
    if early && missing == 0 {
        return Ok(()); // nothing wanted
    }
    p.ws();
    if p.peek() == Some(b'}') {
        p.i += 1;
    } else {
        loop {
            let start = p.i;
            let escaped = p.string()?;
            let quoted = bytes.get(start..p.i).ok_or(Refused)?;
            p.ws();
            p.expect(b':')?;
            p.ws();
            let at = p.i;
            p.value(1)?;
            let text = bytes.get(at..p.i).ok_or(Refused)?;
            let hit = if escaped {
                let name: String = serde_json::from_slice(quoted).map_err(|_| Refused)?;
                wanted.iter().position(|w| *w == name)
            } else {
                let name = quoted.get(1..quoted.len() - 1).ok_or(Refused)?;
                wanted.iter().position(|w| w.as_bytes() == name)
            };
            if let Some(i) = hit {
                found(i, text);
                missing &= !1u64
                    .checked_shl(u32::try_from(i).unwrap_or(u32::MAX))
                    .unwrap_or(0);
                if early && missing == 0 {
                    return Ok(());
                }
            }
            p.ws();
            match p.next()? {
                b',' => p.ws(),
                b'}' => break,
                _ => return Err(Refused),
            }
        }
    }
    p.ws();
    if p.i == bytes.len() {
        Ok(())
    } else {
        Err(Refused)
    }
}

struct Skim<'a> {
    b: &'a [u8],
    i: usize,
}

impl Skim<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Res<u8> {
        let c = self.peek().ok_or(Refused)?;
        self.i += 1;
        Ok(c)
    }

    fn expect(&mut self, want: u8) -> Res<()> {
        if self.next()? == want {
            Ok(())
        } else {
            Err(Refused)
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.i += 1;
        }
    }

    /// A string starting at its quote; true if it holds an escape.
    fn string(&mut self) -> Res<bool> {
        self.expect(b'"')?;
        let start = self.i;
        let (mut ascii, mut escaped) = (true, false);
        loop {
            // Plain printable ASCII eight bytes at a time, landing on the first other byte
            // (the lowest flagged byte is always a real one: false alarms sit above it).
            while let Some(chunk) = self.b.get(self.i..self.i + 8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                let x = u64::from_le_bytes(word);
                let special = zero_bytes(x ^ (ONES * u64::from(b'"')))
                    | zero_bytes(x ^ (ONES * u64::from(b'\\')))
                    | x.wrapping_sub(ONES * 0x20) & !x & HIGH
                    | x & HIGH;
                if special != 0 {
                    self.i += (special.trailing_zeros() / 8) as usize;
                    break;
                }
                self.i += 8;
            }
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    match self.next()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => match self.hex4()? {
                            0xDC00..=0xDFFF => return Err(Refused),
                            0xD800..=0xDBFF => {
                                self.expect(b'\\')?;
                                self.expect(b'u')?;
                                if !(0xDC00..=0xDFFF).contains(&self.hex4()?) {
                                    return Err(Refused);
                                }
                            }
                            _ => {}
                        },
                        _ => return Err(Refused),
                    }
                }
                0..=0x1F => return Err(Refused),
                0x80..=0xFF => ascii = false,
                _ => {}
            }
        }
        if !ascii {
            let body = self.b.get(start..self.i - 1).ok_or(Refused)?;
            std::str::from_utf8(body).map_err(|_| Refused)?;
        }
        Ok(escaped)
    }

    fn hex4(&mut self) -> Res<u32> {
        let mut n = 0;
        for _ in 0..4 {
            let d = char::from(self.next()?).to_digit(16).ok_or(Refused)?;
            n = n * 16 + d;
        }
        Ok(n)
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Res<()> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let int = match self.peek() {
            Some(b'0') => {
                self.i += 1;
                1
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Refused),
        };
        let mut frac = 0;
        if self.peek() == Some(b'.') {
            self.i += 1;
            frac = self.digits();
            if frac == 0 {
                return Err(Refused);
            }
        }
        let mut exponent = false;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            exponent = true;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(Refused);
            }
        }
        if exponent || int > 300 || frac > 300 {
            // Could be out of range: the parser decides.
            let text = self.b.get(start..self.i).ok_or(Refused)?;
            serde_json::from_slice::<serde_json::Value>(text).map_err(|_| Refused)?;
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Res<()> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Refused)
        }
    }

    /// One value (whitespace before it already skipped) inside `depth` open containers.
    /// Iterative: `objects` has bit `d` set when the container at depth `outer + d + 1` is an
    /// object.
    fn value(&mut self, outer: usize) -> Res<()> {
        let mut objects: u128 = 0;
        let mut open = 0usize;
        loop {
            // A value.
            match self.peek().ok_or(Refused)? {
                c @ (b'{' | b'[') => {
                    if outer + open + 1 > MAX_DEPTH {
                        return Err(Refused);
                    }
                    self.i += 1;
                    let is_object = c == b'{';
                    if is_object {
                        objects |= 1 << open;
                    } else {
                        objects &= !(1 << open);
                    }
                    open += 1;
                    self.ws();
                    let close = if is_object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                        open -= 1;
                    } else {
                        if is_object {
                            self.member_name()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return Err(Refused),
            }
            // After a value: close containers, or move to the next element.
            loop {
                if open == 0 {
                    return Ok(());
                }
                let is_object = objects & (1 << (open - 1)) != 0;
                self.ws();
                match (is_object, self.next()?) {
                    (_, b',') => {
                        self.ws();
                        if is_object {
                            self.member_name()?;
                        }
                        break;
                    }
                    (true, b'}') | (false, b']') => open -= 1,
                    _ => return Err(Refused),
                }
            }
        }
    }

    /// `"name" :` and the whitespace after it.
    fn member_name(&mut self) -> Res<()> {
        self.string()?;
        self.ws();
        self.expect(b':')?;
        self.ws();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_string()).collect()
    }

    fn found(text: &str, wanted: &[&str]) -> Res<Vec<(usize, String)>> {
        found_in(text, wanted, false)
    }

    fn found_in(text: &str, wanted: &[&str], doc: bool) -> Res<Vec<(usize, String)>> {
        let mut out = Vec::new();
        fields(text.as_bytes(), &names(wanted), doc, |i, t| {
            out.push((i, String::from_utf8_lossy(t).into_owned()));
        })?;
        Ok(out)
    }

    #[test]
    fn a_document_is_read_only_until_every_wanted_name_is_found() {
        // The text after the last wanted property is not read: damage there goes unseen
        // for a document (which cannot have any) and is refused otherwise.
        let cut = r#"{"a":1,"b":[2,{"c":3}],"d":tru"#;
        let both = vec![(1, "1".to_string()), (0, r#"[2,{"c":3}]"#.to_string())];
        assert_eq!(found_in(cut, &["b", "a"], true), Ok(both));
        assert_eq!(found_in(cut, &["b", "a"], false), Err(Refused));
        // A name not present: the whole text is read, and checked.
        assert_eq!(found_in(cut, &["a", "zz"], true), Err(Refused));
        assert_eq!(
            found_in(r#"{"a":1}"#, &["a", "zz"], true),
            Ok(vec![(0, "1".to_string())])
        );
        // Nothing wanted: only the opening brace.
        assert_eq!(found_in(r#"{"a":"#, &[], true), Ok(vec![]));
        assert_eq!(found_in(r#"{"a":"#, &[], false), Err(Refused));
        // More names than the early return tracks: read to the end, no overflow.
        let mut many: Vec<String> = (0..70).map(|i| format!("n{i}")).collect();
        many[68] = "a".to_string();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(found_in(cut, &many, true), Err(Refused));
        assert_eq!(
            found_in(r#"{"a":1}"#, &many, true),
            Ok(vec![(68, "1".to_string())])
        );
        // Every one of 64 and of 65 names present before the damage: 64 are tracked (the
        // early return holds for a document only), 65 are not (the damage is always seen).
        let names: Vec<String> = (0..65).map(|i| format!("n{i:02}")).collect();
        let mut text = String::from("{");
        for n in &names {
            text.push_str(&format!(r#""{n}":0,"#));
        }
        text.push_str(r#""zz":tru"#);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let first = |n: usize| Ok((0..n).map(|i| (i, "0".to_string())).collect::<Vec<_>>());
        assert_eq!(found_in(&text, &names[..64], true), first(64));
        assert_eq!(found_in(&text, &names[..64], false), Err(Refused));
        assert_eq!(found_in(&text, &names, true), Err(Refused));
        assert_eq!(found_in(&text, &names, false), Err(Refused));
    }

    #[test]
    fn finds_top_level_properties_only() {
        let text = r#" { "a" : {"b": [1, -2.5e3, "x\"y"], "c": null} , "b":true,"c\u0041" :"z" } "#;
        assert_eq!(
            found(text, &["b", "a", "cA"]).expect("skim"),
            vec![
                (1, r#"{"b": [1, -2.5e3, "x\"y"], "c": null}"#.to_string()),
                (0, "true".to_string()),
                (2, r#""z""#.to_string()),
            ]
        );
        assert_eq!(found("{}", &["a"]).expect("skim"), vec![]);
    }

    #[test]
    fn refuses_what_the_parser_refuses() {
        for bad in [
            "",
            "{",
            r#"{"a"}"#,
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":-}"#,
            r#"{"a":1e}"#,
            r#"{"a":1e400}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"a":"\u12"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":1} 2"#,
            r#"{"a":[1}"#,
            r#"{"a":{"b":1]}"#,
            r#"{"a" 1}"#,
        ] {
            assert!(
                serde_json::from_str::<serde_json::Value>(bad).is_err(),
                "{bad} (the parser)"
            );
            assert_eq!(found(bad, &["a"]), Err(Refused), "{bad}");
        }
        // Not an object: valid JSON, but not an item the skim reads (the parser decides).
        assert_eq!(found("[1]", &["a"]), Err(Refused));
        let bad_utf8 = b"{\"a\": \"\xc3\x28 long enough for a word\"}";
        assert!(fields(bad_utf8, &[], false, |_, _| {}).is_err());
        let good_utf8 = "{\"a\": \"caf\u{e9} \u{1F600} long enough for a word\"}";
        assert!(found(good_utf8, &[]).is_ok());
    }

    #[test]
    fn nesting_is_bounded_like_stored_items() {
        let nested = |d: usize| format!(r#"{{"a":{}{}}}"#, "[".repeat(d), "]".repeat(d));
        assert!(found(&nested(MAX_DEPTH - 1), &["a"]).is_ok());
        assert_eq!(found(&nested(MAX_DEPTH), &["a"]), Err(Refused));
    }
}
