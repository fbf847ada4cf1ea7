//! Streaming reader of import input: a JSON array of items, or one item per line (NDJSON),
//! told apart by the first non-blank byte. It hands out each item's raw bytes, numbered from 1
//! with the line it starts on, holding one item in memory at a time; an item longer than the
//! cap is skipped over (counted, not kept) and reported as too large.
//!
//! A malformed line of NDJSON is one bad item (the next line is read as usual). Inside a JSON
//! array, an item is delimited by bracket depth outside strings, so an item that is malformed
//! inside (`{"id": }`) is one bad item too; a broken array structure (a missing comma, input
//! that ends inside an item) is fatal, since no later item can be found reliably.

use std::io::{self, BufRead};

/// One item's bytes, or how long it was when it is over the cap.
#[derive(Debug, PartialEq, Eq)]
pub enum Body {
    Json(Vec<u8>),
    TooLarge(u64),
}

/// One item of the input.
#[derive(Debug, PartialEq, Eq)]
pub struct RawItem {
    /// Position in the input, from 1.
    pub number: usize,
    /// Line on which it starts, from 1.
    pub line: usize,
    pub body: Body,
}

/// What the reader found next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Item(RawItem),
    End,
    /// The input cannot be read further: where and why.
    Fatal {
        line: usize,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    ArrayFirst,
    ArrayNext,
    Lines,
    Done,
}

/// The reader. `cap` is the longest item kept, in bytes.
pub struct Reader<R> {
    r: R,
    state: State,
    line: usize,
    number: usize,
    cap: usize,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl<R: BufRead> Reader<R> {
    pub fn new(r: R, cap: usize) -> Self {
        Self {
            r,
            state: State::Start,
            line: 1,
            number: 0,
            cap,
        }
    }

    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(self.r.fill_buf()?.first().copied())
    }

    fn bump(&mut self) {
        if let Ok(Some(b'\n')) = self.peek() {
            self.line += 1;
        }
        self.r.consume(1);
    }

    /// Skips whitespace (and a UTF-8 byte-order mark at the very start).
    fn skip_ws(&mut self) -> io::Result<Option<u8>> {
        loop {
            match self.peek()? {
                Some(b) if is_ws(b) => self.bump(),
                other => return Ok(other),
            }
        }
    }

    fn fatal(&mut self, message: impl Into<String>) -> Next {
        self.state = State::Done;
        Next::Fatal {
            line: self.line,
            message: message.into(),
        }
    }

    /// The next item.
    ///
    /// # Errors
    /// I/O errors reading the input.
    pub fn next_item(&mut self) -> io::Result<Next> {
        loop {
            match self.state {
                State::Done => return Ok(Next::End),
                State::Start => {
                    if self.r.fill_buf()?.starts_with(b"\xEF\xBB\xBF") {
                        self.r.consume(3);
                    }
                    match self.skip_ws()? {
                        Some(b'[') => {
                            self.bump();
                            self.state = State::ArrayFirst;
                        }
                        _ => self.state = State::Lines,
                    }
                }
                State::Lines => return self.next_line(),
                State::ArrayFirst | State::ArrayNext => {
                    let first = self.state == State::ArrayFirst;
                    match self.skip_ws()? {
                        None => return Ok(self.fatal("the input ends inside the JSON array")),
                        Some(b']') if first => return self.close_array(),
                        Some(b',') if !first => {
                            self.bump();
                            if self.skip_ws()? == Some(b']') {
                                return Ok(self.fatal("a comma before the array's closing ']'"));
                            }
                        }
                        Some(b']') => return self.close_array(),
                        Some(b) if !first => {
                            return Ok(self.fatal(format!(
                                "expected ',' or ']' after item {}, found '{}'",
                                self.number,
                                char::from(b).escape_default()
                            )))
                        }
                        Some(_) => {}
                    }
                    self.state = State::ArrayNext;
                    self.number += 1;
                    let line = self.line;
                    return match self.array_value()? {
                        Ok(body) => Ok(Next::Item(RawItem {
                            number: self.number,
                            line,
                            body,
                        })),
                        Err(msg) => Ok(self.fatal(msg)),
                    };
                }
            }
        }
    }

    fn close_array(&mut self) -> io::Result<Next> {
        self.bump();
        self.state = State::Done;
        match self.skip_ws()? {
            None => Ok(Next::End),
            Some(_) => Ok(self.fatal("more input after the array's closing ']'")),
        }
    }

    /// One value of the array, delimited by bracket depth outside strings.
    fn array_value(&mut self) -> io::Result<Result<Body, String>> {
        let (mut depth, mut in_str, mut esc, mut scalar) = (0usize, false, false, false);
        let mut started = false;
        let mut buf = Vec::new();
        let mut len = 0u64;
        loop {
            let chunk = self.r.fill_buf()?;
            if chunk.is_empty() {
                if scalar {
                    break;
                }
                return Ok(Err(format!("the input ends inside item {}", self.number)));
            }
            let mut used = 0;
            let mut finished = false;
            let mut newlines = 0;
            for &b in chunk {
                if scalar && (is_ws(b) || b == b',' || b == b']') {
                    finished = true;
                    break;
                }
                used += 1;
                len += 1;
                if buf.len() < self.cap {
                    buf.push(b);
                }
                if b == b'\n' {
                    newlines += 1;
                }
                if !started {
                    started = true;
                    match b {
                        b'{' | b'[' => depth = 1,
                        b'"' => in_str = true,
                        _ => scalar = true,
                    }
                    continue;
                }
                if scalar {
                    continue;
                }
                if in_str {
                    if esc {
                        esc = false;
                    } else if b == b'\\' {
                        esc = true;
                    } else if b == b'"' {
                        in_str = false;
                        if depth == 0 {
                            finished = true;
                            break;
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            finished = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            self.r.consume(used);
            self.line += newlines;
            if finished {
                break;
            }
        }
        Ok(Ok(if len > self.cap as u64 {
            Body::TooLarge(len)
        } else {
            Body::Json(buf)
        }))
    }

    /// The next non-blank line.
    fn next_line(&mut self) -> io::Result<Next> {
        loop {
            let line = self.line;
            let mut buf = Vec::new();
            let mut len = 0u64;
            let mut eof = true;
            loop {
                let chunk = self.r.fill_buf()?;
                if chunk.is_empty() {
                    break;
                }
                eof = false;
                let (take, newline) = match chunk.iter().position(|&b| b == b'\n') {
                    Some(i) => (i, true),
                    None => (chunk.len(), false),
                };
                let room = self.cap.saturating_sub(buf.len()).min(take);
                buf.extend_from_slice(chunk.get(..room).unwrap_or_default());
                len += take as u64;
                self.r.consume(take + usize::from(newline));
                if newline {
                    self.line += 1;
                    break;
                }
            }
            if eof && len == 0 {
                self.state = State::Done;
                return Ok(Next::End);
            }
            if buf.iter().all(|&b| is_ws(b)) && len <= self.cap as u64 {
                continue;
            }
            self.number += 1;
            let body = if len > self.cap as u64 {
                Body::TooLarge(len)
            } else {
                Body::Json(buf)
            };
            return Ok(Next::Item(RawItem {
                number: self.number,
                line,
                body,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str, cap: usize) -> Vec<Next> {
        let mut r = Reader::new(input.as_bytes(), cap);
        let mut out = Vec::new();
        loop {
            match r.next_item() {
                Ok(Next::End) => break,
                Ok(n @ Next::Fatal { .. }) => {
                    out.push(n);
                    break;
                }
                Ok(n) => out.push(n),
                Err(e) => panic!("{e}"),
            }
        }
        out
    }

    fn item(number: usize, line: usize, s: &str) -> Next {
        Next::Item(RawItem {
            number,
            line,
            body: Body::Json(s.as_bytes().to_vec()),
        })
    }

    #[test]
    fn arrays_split_by_depth_outside_strings() {
        let got = all(
            "[\n {\"a\": \"x]}\\\"\"},\n {\"b\": [1, {}]} , 7, \"s\"\n]\n",
            100,
        );
        assert_eq!(
            got,
            vec![
                item(1, 2, "{\"a\": \"x]}\\\"\"}"),
                item(2, 3, "{\"b\": [1, {}]}"),
                item(3, 3, "7"),
                item(4, 3, "\"s\""),
            ]
        );
        assert_eq!(all("  []  ", 10), vec![]);
    }

    #[test]
    fn broken_arrays_are_fatal_with_a_line() {
        assert!(matches!(
            all("[{\"a\":1}\n{\"b\":2}]", 100).last(),
            Some(Next::Fatal { line: 2, .. })
        ));
        assert!(matches!(
            all("[{\"a\":1},]", 100).last(),
            Some(Next::Fatal { .. })
        ));
        assert!(matches!(
            all("[{\"a\":1", 100).last(),
            Some(Next::Fatal { .. })
        ));
        assert!(matches!(all("[1] x", 100).last(), Some(Next::Fatal { .. })));
    }

    #[test]
    fn lines_skip_blanks_and_cap_long_items() {
        let got = all("{\"a\":1}\n\n  \n{bad\n0123456789abc\n", 10);
        assert_eq!(
            got,
            vec![
                item(1, 1, "{\"a\":1}"),
                item(2, 4, "{bad"),
                Next::Item(RawItem {
                    number: 3,
                    line: 5,
                    body: Body::TooLarge(13)
                }),
            ]
        );
        let got = all("[\"0123456789abc\", 1]", 10);
        assert!(matches!(
            got.first(),
            Some(Next::Item(RawItem {
                body: Body::TooLarge(15),
                ..
            }))
        ));
        assert_eq!(got.len(), 2);
    }
}
