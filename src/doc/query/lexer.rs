//! Tokens of the query language, each with the byte offset where it starts (for 400 messages).

use crate::error::{Error, Result};

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// An identifier or keyword as written (keywords are matched case-insensitively).
    Ident(String),
    /// `@name`.
    Param(String),
    Number(f64),
    Str(String),
    /// Punctuation and operators: `. , ( ) [ ] { } : * + - / % = != <> < <= > >= || ?? ?`.
    Sym(&'static str),
    End,
}

/// A token and its byte offset.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spanned {
    pub(crate) tok: Tok,
    pub(crate) at: usize,
}

pub(crate) fn syntax(at: usize, what: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("syntax error at position {at}: {what}"))
}

const SYMBOLS: [&str; 24] = [
    "!=", "<>", "<=", ">=", "||", "??", ".", ",", "(", ")", "[", "]", "{", "}", ":", "*", "+", "-",
    "/", "%", "=", "<", ">", "?",
];

/// Splits `text` into tokens; the last is [`Tok::End`].
pub(crate) fn lex(text: &str) -> Result<Vec<Spanned>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && bytes.get(i + 1) == Some(&b'-') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let at = i;
        if c.is_ascii_alphabetic() || c == b'_' || c == b'@' {
            let start = if c == b'@' { i + 1 } else { i };
            i = start;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = text.get(start..i).unwrap_or_default().to_string();
            if c == b'@' {
                if word.is_empty() {
                    return Err(syntax(at, "'@' must be followed by a parameter name"));
                }
                out.push(Spanned {
                    tok: Tok::Param(word),
                    at,
                });
            } else {
                out.push(Spanned {
                    tok: Tok::Ident(word),
                    at,
                });
            }
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if matches!(bytes.get(i), Some(b'e' | b'E')) {
                let mut j = i + 1;
                if matches!(bytes.get(j), Some(b'+' | b'-')) {
                    j += 1;
                }
                if bytes.get(j).is_some_and(u8::is_ascii_digit) {
                    i = j;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let lit = text.get(at..i).unwrap_or_default();
            let n: f64 = lit
                .parse()
                .map_err(|_| syntax(at, format!("bad number '{lit}'")))?;
            if !n.is_finite() {
                return Err(syntax(at, format!("number '{lit}' does not fit a double")));
            }
            out.push(Spanned {
                tok: Tok::Number(n),
                at,
            });
            continue;
        }
        if c == b'\'' || c == b'"' {
            let (s, end) = string(text, i)?;
            i = end;
            out.push(Spanned {
                tok: Tok::Str(s),
                at,
            });
            continue;
        }
        let rest = text.get(i..).unwrap_or_default();
        let Some(sym) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) else {
            let ch = rest.chars().next().unwrap_or(' ');
            return Err(syntax(at, format!("unexpected character '{ch}'")));
        };
        i += sym.len();
        out.push(Spanned {
            tok: Tok::Sym(sym),
            at,
        });
    }
    out.push(Spanned {
        tok: Tok::End,
        at: text.len(),
    });
    Ok(out)
}

/// A quoted string starting at `start`; returns it unescaped and the offset after it.
fn string(text: &str, start: usize) -> Result<(String, usize)> {
    let quote = text.as_bytes()[start] as char;
    let mut out = String::new();
    let mut chars = text.get(start + 1..).unwrap_or_default().char_indices();
    while let Some((off, ch)) = chars.next() {
        let pos = start + 1 + off;
        if ch == quote {
            return Ok((out, pos + 1));
        }
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        let Some((_, e)) = chars.next() else { break };
        match e {
            '\\' | '\'' | '"' | '/' => out.push(e),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let bad = |hex: &str| syntax(pos, format!("bad escape '\\u{hex}'"));
                let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                let unit = u32::from_str_radix(&hex, 16).map_err(|_| bad(&hex))?;
                let code = if (0xD800..0xDC00).contains(&unit) {
                    // A high surrogate must be followed by `\u` and a low one: a pair.
                    let rest: String = chars.by_ref().take(6).map(|(_, c)| c).collect();
                    let low = rest
                        .strip_prefix("\\u")
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .filter(|l| (0xDC00..0xE000).contains(l))
                        .ok_or_else(|| bad(&hex))?;
                    0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                } else {
                    unit
                };
                out.push(char::from_u32(code).ok_or_else(|| bad(&hex))?);
            }
            other => return Err(syntax(pos, format!("bad escape '\\{other}'"))),
        }
    }
    Err(syntax(start, "unterminated string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_with_positions() {
        let t =
            lex("SELECT c.a FROM c WHERE c.n >= 1.5e2 AND c.s != 'x\\'y' -- note").expect("lex");
        let toks: Vec<Tok> = t.iter().map(|s| s.tok.clone()).collect();
        assert!(toks.contains(&Tok::Number(150.0)));
        assert!(toks.contains(&Tok::Str("x'y".into())));
        assert!(toks.contains(&Tok::Sym(">=")));
        assert_eq!(t.last().map(|s| &s.tok), Some(&Tok::End));
        assert_eq!(t.get(1).map(|s| s.at), Some(7));
    }

    #[test]
    fn errors_name_the_position() {
        let e = lex("SELECT # FROM c").expect_err("bad char");
        assert!(e.to_string().contains("position 7"), "{e}");
        assert!(lex("SELECT 'open").is_err());
        assert!(lex("SELECT 1e400").is_err());
    }
}
