//! Python-compatible compact JSON output (`json.dumps(v, ensure_ascii=False,
//! separators=(",", ":"))`): string escaping, float `repr`, integer digits, and a sink that
//! stops after a number of characters so that previews never serialize more than they show.

use std::borrow::Cow;
use std::collections::HashMap;

use super::literal;

/// The sink is full: the caller can stop producing output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Collects at most `limit` characters (code points); counts them without storing when `out`
/// is `None`.
pub struct Limited<'a> {
    out: Option<&'a mut String>,
    chars: usize,
    limit: usize,
}

impl<'a> Limited<'a> {
    pub fn new(out: Option<&'a mut String>, limit: usize) -> Self {
        Self {
            out,
            chars: 0,
            limit,
        }
    }

    /// Characters taken so far (never more than the limit).
    pub fn chars(&self) -> usize {
        self.chars
    }

    pub fn push_str(&mut self, s: &str) -> Result<(), Full> {
        let room = self.limit - self.chars;
        if s.len() <= room {
            // Fewer bytes than room: every char fits.
            self.chars += s.chars().count();
            if let Some(out) = self.out.as_deref_mut() {
                out.push_str(s);
            }
            return Ok(());
        }
        let mut end = s.len();
        let mut taken = 0;
        for (count, (i, _)) in s.char_indices().enumerate() {
            if count == room {
                end = i;
                break;
            }
            taken = count + 1;
        }
        self.chars += taken;
        if let Some(out) = self.out.as_deref_mut() {
            out.push_str(&s[..end]);
        }
        if self.chars >= self.limit {
            Err(Full)
        } else {
            Ok(())
        }
    }

    /// `push_str` of a string known to be ASCII: one byte a character, nothing to count.
    pub fn push_ascii(&mut self, s: &str) -> Result<(), Full> {
        debug_assert!(s.is_ascii());
        let room = self.limit - self.chars;
        if s.len() <= room {
            self.chars += s.len();
            if let Some(out) = self.out.as_deref_mut() {
                out.push_str(s);
            }
            return Ok(());
        }
        self.chars += room;
        if let Some(out) = self.out.as_deref_mut() {
            out.push_str(s.get(..room).unwrap_or(""));
        }
        Err(Full)
    }

    /// Where the sink is, to go back to with `rewind`.
    pub fn mark(&self) -> (usize, usize) {
        (self.chars, self.out.as_deref().map_or(0, String::len))
    }

    /// Forget what was written since `mark`.
    pub fn rewind(&mut self, (chars, len): (usize, usize)) {
        self.chars = chars;
        if let Some(out) = self.out.as_deref_mut() {
            out.truncate(len);
        }
    }

    pub fn push_char(&mut self, c: char) -> Result<(), Full> {
        if self.chars >= self.limit {
            return Err(Full);
        }
        self.chars += 1;
        if let Some(out) = self.out.as_deref_mut() {
            out.push(c);
        }
        Ok(())
    }
}

/// Something JSON text can be written to: a plain `String` or a `Limited` sink.
pub trait Sink {
    fn put_str(&mut self, s: &str) -> Result<(), Full>;
    /// `put_str` of a string known to be ASCII.
    fn put_ascii(&mut self, s: &str) -> Result<(), Full> {
        self.put_str(s)
    }
    fn put_char(&mut self, c: char) -> Result<(), Full>;
    /// Characters it still takes (`usize::MAX`: no limit).
    fn room(&self) -> usize {
        usize::MAX
    }
}

impl Sink for String {
    fn put_str(&mut self, s: &str) -> Result<(), Full> {
        self.push_str(s);
        Ok(())
    }
    fn put_char(&mut self, c: char) -> Result<(), Full> {
        self.push(c);
        Ok(())
    }
}

impl Sink for Limited<'_> {
    fn put_str(&mut self, s: &str) -> Result<(), Full> {
        self.push_str(s)
    }
    fn put_ascii(&mut self, s: &str) -> Result<(), Full> {
        self.push_ascii(s)
    }
    fn put_char(&mut self, c: char) -> Result<(), Full> {
        self.push_char(c)
    }
    fn room(&self) -> usize {
        self.limit - self.chars
    }
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The first byte of `bytes` at or after `at` that a JSON string escapes (`bytes.len()`:
/// none), eight bytes at a time.
fn next_escape(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // a byte of `x` that is zero sets its high bit here; a false one can only follow a true
    // one (a borrow), so the lowest is exact
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // below 0x20: the subtraction borrows into the high bit of a byte that had it clear
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let hits =
            control | zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\')));
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    bytes
        .get(at..)
        .and_then(|rest| rest.iter().position(|&b| needs_escape(b)))
        .map_or(bytes.len(), |found| at + found)
}

/// `s` as a JSON string literal, escaped exactly as Python's `json.dumps(ensure_ascii=False)`.
/// Reads no further than the sink can take: `n` more characters are at most `4n` bytes of
/// text, so a preview of a long string looks at only what it shows.
pub fn write_string<S: Sink + ?Sized>(s: &str, out: &mut S) -> Result<(), Full> {
    write_literal(s, false, out)
}

/// `write_string` of a string known to be ASCII (its characters are not counted).
pub fn write_ascii_string<S: Sink + ?Sized>(s: &str, out: &mut S) -> Result<(), Full> {
    write_literal(s, true, out)
}

fn write_literal<S: Sink + ?Sized>(s: &str, ascii: bool, out: &mut S) -> Result<(), Full> {
    out.put_char('"')?;
    let mut s = s;
    let readable = if ascii {
        out.room()
    } else {
        out.room().saturating_mul(4)
    };
    if s.len() > readable {
        // Still at least as many characters as the room: the sink fills before the closing
        // quote, with the same characters as from all of `s`.
        let mut end = readable;
        while !s.is_char_boundary(end) {
            end += 1;
        }
        s = s.get(..end).unwrap_or(s);
    }
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        let i = next_escape(bytes, start);
        if start < i {
            let run = s.get(start..i).unwrap_or("");
            if ascii {
                out.put_ascii(run)?;
            } else {
                out.put_str(run)?;
            }
        }
        let Some(&b) = bytes.get(i) else { break };
        match b {
            b'"' => out.put_ascii("\\\"")?,
            b'\\' => out.put_ascii("\\\\")?,
            b'\n' => out.put_ascii("\\n")?,
            b'\r' => out.put_ascii("\\r")?,
            b'\t' => out.put_ascii("\\t")?,
            0x08 => out.put_ascii("\\b")?,
            0x0c => out.put_ascii("\\f")?,
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let esc = [
                    '\\',
                    'u',
                    '0',
                    '0',
                    HEX[usize::from(b >> 4)] as char,
                    HEX[usize::from(b & 0xf)] as char,
                ];
                for c in esc {
                    out.put_char(c)?;
                }
            }
        }
        start = i + 1;
    }
    out.put_char('"')
}

/// Python's `repr(float)` for a finite value, and json.dumps' `NaN`/`Infinity`/`-Infinity`.
pub fn float_repr(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let mut buffer = ryu::Buffer::new();
    let shortest = buffer.format_finite(v);
    let (negative, body) = match shortest.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, shortest),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], body[at + 1..].parse::<i32>().unwrap_or(0)),
        None => (body, 0),
    };
    let int_len = mantissa.find('.').unwrap_or(mantissa.len());
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    // value = 0.DIGITS * 10^decpt
    let mut decpt = i32::try_from(int_len).unwrap_or(0) + exp;
    let leading = digits.iter().take_while(|&&d| d == b'0').count();
    digits.drain(..leading);
    decpt -= i32::try_from(leading).unwrap_or(0);
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    let digits = String::from_utf8(digits).unwrap_or_default();
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    let sci = decpt - 1;
    let ndigits = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    if !(-4..16).contains(&sci) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if sci < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", sci.unsigned_abs()));
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt >= ndigits {
        out.push_str(&digits);
        for _ in 0..(decpt - ndigits) {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        let at = usize::try_from(decpt).unwrap_or(0);
        out.push_str(&digits[..at]);
        out.push('.');
        out.push_str(&digits[at..]);
    }
    out
}

/// A JSON number literal as Python's `json.dumps(json.loads(raw))` writes it: integers keep
/// their digits (`-0` is `0`), anything with a fraction or exponent goes through `float`.
pub fn number_text(raw: &str) -> String {
    if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        float_repr(raw.parse::<f64>().unwrap_or(f64::NAN))
    } else if raw.bytes().all(|b| b == b'-' || b == b'0') {
        "0".to_owned()
    } else {
        raw.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let table: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (-1.0, "-1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (1e-5, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (100000.0, "100000.0"),
            (1e22, "1e+22"),
            (1e100, "1e+100"),
            (1e-100, "1e-100"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (2.71, "2.71"),
            (2.5, "2.5"),
            (123.456, "123.456"),
            (9999999999999998.0, "9999999999999998.0"),
            (0.3, "0.3"),
            (1.0 / 3.0, "0.3333333333333333"),
        ];
        for &(v, want) in table {
            assert_eq!(float_repr(v), want, "{v:e}");
        }
    }

    #[test]
    fn numbers_keep_python_semantics() {
        assert_eq!(number_text("-0"), "0");
        assert_eq!(number_text("0"), "0");
        assert_eq!(
            number_text("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(number_text("1e400"), "Infinity");
        assert_eq!(number_text("-1e400"), "-Infinity");
        assert_eq!(number_text("-0.0"), "-0.0");
        assert_eq!(number_text("1E2"), "100.0");
        assert_eq!(number_text("1e-400"), "0.0");
    }

    #[test]
    fn strings_escape_like_python() {
        let mut out = String::new();
        write_string(
            "a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}é😀\u{2028}/",
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f}é😀\u{2028}/\""
        );
    }

    #[test]
    fn the_next_escape_is_found_at_every_place_of_a_word() {
        // every byte value at every offset of a 17-byte text (two words and a tail), among
        // fillers next to what the word arithmetic compares with (0x20, `"` 0x22, `\` 0x5c)
        // or with the high bit set
        for filler in [b'a', 0x20, 0x21, 0x23, 0x5d, 0x7f, 0x80, 0xff] {
            for at in 0..17 {
                for byte in 0..=255u8 {
                    let mut text = vec![filler; 17];
                    text[at] = byte;
                    let want = text.iter().position(|&b| needs_escape(b)).unwrap_or(17);
                    assert_eq!(next_escape(&text, 0), want, "{filler:#x} {at} {byte:#x}");
                    if let Some(after) = want.checked_add(1).filter(|&n| n <= 17) {
                        let rest = text[after..].iter().position(|&b| needs_escape(b));
                        assert_eq!(next_escape(&text, after), rest.map_or(17, |p| after + p));
                    }
                }
            }
        }
    }

    #[test]
    fn ascii_strings_escape_and_stop_as_any_string() {
        let text = "a\"b\\c\n\u{1}d".repeat(5);
        let mut whole = String::new();
        assert_eq!(write_ascii_string(&text, &mut whole), Ok(()));
        let mut plain = String::new();
        assert_eq!(write_string(&text, &mut plain), Ok(()));
        assert_eq!(whole, plain);
        assert_prefixes(&whole, |sink| write_ascii_string(&text, sink));
    }

    #[test]
    fn limited_sink_stops_on_char_boundaries() {
        let mut out = String::new();
        let mut sink = Limited::new(Some(&mut out), 3);
        assert_eq!(sink.push_str("é😀"), Ok(()));
        assert_eq!(sink.push_str("漢字"), Err(Full));
        assert_eq!(sink.chars(), 3);
        assert_eq!(out, "é😀漢");
        let mut counter = Limited::new(None, 10);
        assert_eq!(write_string("ab\n", &mut counter), Ok(()));
        assert_eq!(counter.chars(), 6);
    }

    #[test]
    fn a_limited_string_is_the_prefix_of_the_whole() {
        let long = format!("{}\"{}\u{1}", "a".repeat(100), "é😀x".repeat(40));
        let texts = [
            "",
            "plain",
            "a\"b\\c\nd\u{7}e\u{1f}",
            "\n\n\n",
            "é😀漢\t字",
            long.as_str(),
        ];
        for text in texts {
            let mut whole = String::new();
            assert_eq!(write_string(text, &mut whole), Ok(()));
            assert_prefixes(&whole, |sink| write_string(text, sink));
        }
    }

    /// `write` into a `Limited` sink of every limit gives that many characters of `whole`
    /// (stored or only counted), and `Full` exactly when `whole` does not fit.
    pub fn assert_prefixes(whole: &str, write: impl Fn(&mut Limited<'_>) -> Result<(), Full>) {
        let total = whole.chars().count();
        for limit in 0..=total + 2 {
            let mut out = String::new();
            let done = write(&mut Limited::new(Some(&mut out), limit));
            let expect: String = whole.chars().take(limit).collect();
            assert_eq!(out, expect, "{whole:?} at {limit}");
            assert_eq!(done.is_ok(), limit >= total, "{whole:?} at {limit}");
            let mut counter = Limited::new(None, limit);
            let _ = write(&mut counter);
            assert_eq!(counter.chars(), limit.min(total), "{whole:?} at {limit}");
        }
    }
}

/// Write a JSON value, given as valid JSON text (a `state.input` slice of the document), the
/// way `json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))` does: duplicate
/// keys keep the first position and the last value. Stops early when the sink is full; only
/// the containers on the path being written are looked into.
pub fn dump_raw<S: Sink + ?Sized>(raw: &str, out: &mut S) -> Result<(), Full> {
    match raw.as_bytes().first() {
        Some(b'"') => {
            let inner = raw.get(1..raw.len().saturating_sub(1)).unwrap_or("");
            if inner.contains('\\') {
                // Only the characters the sink takes are decoded: each decoded character is
                // written as at least one.
                let mut text = String::new();
                super::unescape::push_prefix(inner, out.room(), &mut text);
                write_string(&text, out)
            } else {
                // A literal without escapes has nothing Python would escape.
                out.put_char('"')?;
                out.put_str(inner)?;
                out.put_char('"')
            }
        }
        Some(b'[') => {
            out.put_char('[')?;
            for (n, item) in Members::of(raw).enumerate() {
                if n > 0 {
                    out.put_char(',')?;
                }
                dump_raw(item.value, out)?;
            }
            out.put_char(']')
        }
        Some(b'{') => {
            out.put_char('{')?;
            for (n, (key, value)) in entries(raw).iter().enumerate() {
                if n > 0 {
                    out.put_char(',')?;
                }
                write_string(key, out)?;
                out.put_char(':')?;
                dump_raw(value, out)?;
            }
            out.put_char('}')
        }
        Some(b'-' | b'0'..=b'9') => out.put_str(&number_text(raw)),
        _ => out.put_str(raw),
    }
}

/// The entries of a JSON object, deduplicated like a Python dict built from them: a repeated
/// key keeps its first position and takes the last value.
fn entries(raw: &str) -> Vec<(Cow<'_, str>, &str)> {
    let mut entries: Vec<(Cow<'_, str>, &str)> = Vec::new();
    let mut index: Option<HashMap<Cow<'_, str>, usize>> = None;
    for member in Members::of(raw) {
        let key = member.key.map_or(Cow::Borrowed(""), |(key, escaped)| {
            if escaped {
                Cow::Owned(super::unescape::unescape(key))
            } else {
                Cow::Borrowed(key)
            }
        });
        let found = match &index {
            Some(index) => index.get(&key).copied(),
            None => entries.iter().position(|(k, _)| *k == key),
        };
        if let Some(entry) = found.and_then(|at| entries.get_mut(at)) {
            entry.1 = member.value;
            continue;
        }
        if let Some(index) = &mut index {
            index.insert(key.clone(), entries.len());
        }
        entries.push((key, member.value));
        if index.is_none() && entries.len() > 16 {
            index = Some(
                entries
                    .iter()
                    .enumerate()
                    .map(|(n, (k, _))| (k.clone(), n))
                    .collect(),
            );
        }
    }
    entries
}

/// A member of a JSON array or object: its key (the inside of the literal, and whether it
/// has escapes) for an object, and the text of its value.
struct Member<'a> {
    key: Option<(&'a str, bool)>,
    value: &'a str,
}

/// The members of the array or object `raw`, which the scanner has checked to be JSON. String
/// literals are skipped with the scanner's own literal search (64 bytes at a time), so a long
/// text in a value costs a fast pass, not a parse. On text that is not JSON it stops (never
/// panics, never loops).
struct Members<'a> {
    raw: &'a str,
    at: usize,
    object: bool,
}

impl<'a> Members<'a> {
    fn of(raw: &'a str) -> Self {
        Self {
            raw,
            at: 1,
            object: raw.starts_with('{'),
        }
    }

    fn skip_space(&mut self) {
        let b = self.raw.as_bytes();
        while matches!(b.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The index just past the value that starts at `at`.
    fn value_end(&self, at: usize) -> usize {
        let b = self.raw.as_bytes();
        let past_literal = |start: usize| literal::scan(b, start).map_or(b.len(), |l| l.end + 1);
        match b.get(at) {
            Some(b'"') => past_literal(at + 1),
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                let mut i = at;
                while let Some(&c) = b.get(i) {
                    match c {
                        b'"' => {
                            i = past_literal(i + 1);
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                b.len()
            }
            _ => {
                let mut i = at;
                while b.get(i).is_some_and(|c| {
                    !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    i += 1;
                }
                i
            }
        }
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = Member<'a>;

    fn next(&mut self) -> Option<Member<'a>> {
        let b = self.raw.as_bytes();
        self.skip_space();
        if *b.get(self.at)? == b',' {
            self.at += 1;
            self.skip_space();
        }
        let key = if self.object {
            if *b.get(self.at)? != b'"' {
                return None;
            }
            let literal = literal::scan(b, self.at + 1).ok()?;
            let key = self.raw.get(self.at + 1..literal.end)?;
            self.at = literal.end + 1;
            self.skip_space();
            if *b.get(self.at)? != b':' {
                return None;
            }
            self.at += 1;
            self.skip_space();
            Some((key, literal.escaped))
        } else {
            None
        };
        if matches!(b.get(self.at)?, b']' | b'}') {
            return None;
        }
        let start = self.at;
        let end = self.value_end(start);
        if end <= start {
            return None;
        }
        self.at = end;
        Some(Member {
            key,
            value: self.raw.get(start..end)?,
        })
    }
}

#[cfg(test)]
mod raw_tests {
    use super::*;

    fn dump(raw: &str) -> String {
        let mut out = String::new();
        dump_raw(raw, &mut out).unwrap();
        out
    }

    #[test]
    fn raw_values_dump_like_python() {
        assert_eq!(
            dump(r#"{"a": 1, "b": [1.0, -0, 1e16, true, null], "a": "x\u00e9\n"}"#),
            "{\"a\":\"xé\\n\",\"b\":[1.0,0,1e+16,true,null]}"
        );
        assert_eq!(dump("{}"), "{}");
        assert_eq!(dump("[ ]"), "[]");
        assert_eq!(dump(r#""\/""#), "\"/\"");
    }

    #[test]
    fn raw_dump_stops_early() {
        let mut out = String::new();
        let mut sink = Limited::new(Some(&mut out), 5);
        assert_eq!(dump_raw(r#"{"abc": [1, 2, 3]}"#, &mut sink), Err(Full));
        assert_eq!(out, "{\"abc");
    }

    #[test]
    fn text_that_is_not_json_ends_the_members() {
        // Never given (the scanner checked the document), but it must end, not panic or loop.
        for raw in [
            "{",
            "[",
            "{,",
            "[,,]",
            "{\"a\"",
            "{\"a\":",
            "{\"a\" 1}",
            "{1:2}",
            "[1 2]",
            "{]",
            "[}",
            "[\"unclosed",
            "{\"a\":[{]}",
            "[:]",
            "{\"a\":1,,\"b\":2}",
            "[\"\\u12\"]",
        ] {
            let mut out = String::new();
            let _ = dump_raw(raw, &mut out);
            assert!(out.starts_with(&raw[..1]), "{raw}");
        }
        assert_eq!(dump("[1 2]"), "[1,2]");
    }

    #[test]
    fn a_limited_raw_value_is_the_prefix_of_the_whole() {
        let raws = [
            r#""a\nb\"c\\d\u00e9\ud83d\ude00\/e\u0001f""#,
            r#"{"path": "x\ty", "content": "l1\nl2\nl3 \u6f22\u5b57 \ud83d\ude00 end", "n": 1.5}"#,
            r#"["\n", "plain", "\u00e9\u00e9", {"k": "\\"}]"#,
        ];
        for raw in raws {
            super::tests::assert_prefixes(&dump(raw), |sink| dump_raw(raw, sink));
        }
    }
}
