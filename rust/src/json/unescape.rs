//! The inside of a JSON string literal (already validated by the scanner): decoding all of it,
//! or only a prefix or suffix of it in code points, and telling whether a byte offset of the
//! literal falls inside an escape sequence (so raw searches can skip false matches).

use crate::text::count_chars;

/// The value of the four hex digits `bytes` starts with (`None` when it does not).
pub fn hex4(bytes: &[u8]) -> Option<u32> {
    let digits = bytes.get(..4)?;
    let mut value = 0u32;
    for &d in digits {
        value = value * 16 + char::from(d).to_digit(16)?;
    }
    Some(value)
}

/// Decode one escape starting at the backslash `bytes[0]`; returns the char and the bytes used.
fn decode_escape(bytes: &[u8]) -> (char, usize) {
    match bytes.get(1) {
        Some(b'n') => ('\n', 2),
        Some(b't') => ('\t', 2),
        Some(b'r') => ('\r', 2),
        Some(b'b') => ('\u{8}', 2),
        Some(b'f') => ('\u{c}', 2),
        Some(b'u') => {
            let first = hex4(bytes.get(2..).unwrap_or(&[])).unwrap_or(0xfffd);
            if (0xd800..0xdc00).contains(&first)
                && bytes.get(6) == Some(&b'\\')
                && bytes.get(7) == Some(&b'u')
            {
                if let Some(second) = hex4(bytes.get(8..).unwrap_or(&[])) {
                    if (0xdc00..0xe000).contains(&second) {
                        let code = 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00);
                        return (char::from_u32(code).unwrap_or('\u{fffd}'), 12);
                    }
                }
            }
            (char::from_u32(first).unwrap_or('\u{fffd}'), 6)
        }
        Some(&other) => (char::from(other), 2),
        None => ('\\', 1),
    }
}

/// Decode `raw[from..]` into `out`, stopping after `limit` code points; returns the raw byte
/// offset where it stopped.
fn decode_into(raw: &str, from: usize, limit: usize, out: &mut String) -> usize {
    let bytes = raw.as_bytes();
    let mut taken = 0;
    let mut i = from;
    while i < bytes.len() && taken < limit {
        match memchr::memchr(b'\\', bytes.get(i..).unwrap_or(&[])) {
            Some(0) => {
                let (c, used) = decode_escape(bytes.get(i..).unwrap_or(&[]));
                out.push(c);
                taken += 1;
                i += used;
            }
            found => {
                let run_end = found.map_or(bytes.len(), |k| i + k);
                let run = raw.get(i..run_end).unwrap_or("");
                let end = crate::text::prefix_end(run, limit - taken);
                let piece = run.get(..end).unwrap_or("");
                out.push_str(piece);
                taken += count_chars(piece);
                i += end;
            }
        }
    }
    i
}

/// The text of the inside of a JSON string literal.
pub fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    decode_into(raw, 0, usize::MAX, &mut out);
    out
}

/// The last `n` code points of the decoded literal, appended to `out`.
pub fn push_suffix(raw: &str, n: usize, out: &mut String) {
    decode_into(raw, suffix_start(raw, n), usize::MAX, out);
}

/// The first `n` code points of the decoded literal, appended to `out`.
pub fn push_prefix(raw: &str, n: usize, out: &mut String) {
    decode_into(raw, 0, n, out);
}

/// The decoded literal from code point `skip` on, appended to `out`.
pub fn push_from(raw: &str, skip: usize, out: &mut String) {
    let bytes = raw.as_bytes();
    let mut i = 0;
    let mut passed = 0;
    // Walk escapes with memchr, counting the plain runs between them without decoding.
    while i < bytes.len() && passed < skip {
        match memchr::memchr(b'\\', bytes.get(i..).unwrap_or(&[])) {
            Some(0) => {
                let (_, used) = decode_escape(bytes.get(i..).unwrap_or(&[]));
                passed += 1;
                i += used;
            }
            found => {
                let run_end = found.map_or(bytes.len(), |k| i + k);
                let run = raw.get(i..run_end).unwrap_or("");
                let chars = count_chars(run);
                if passed + chars <= skip {
                    passed += chars;
                    i = run_end;
                } else {
                    i += crate::text::prefix_end(run, skip - passed);
                    passed = skip;
                }
            }
        }
    }
    decode_into(raw, i, usize::MAX, out);
}

/// Where the escape sequence covering byte `pos` of a literal starts (its backslash), when
/// `pos` lies inside one (after its backslash).
fn escape_start(raw: &[u8], pos: usize) -> Option<usize> {
    for back in 1..=5usize {
        let k = pos.checked_sub(back)?;
        if raw.get(k) != Some(&b'\\') {
            continue;
        }
        // The backslash at k starts an escape when the run of backslashes ending there is odd.
        let run = raw
            .get(..=k)
            .unwrap_or(&[])
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if run % 2 == 1 {
            let len = if raw.get(k + 1) == Some(&b'u') { 6 } else { 2 };
            return (pos < k + len).then_some(k);
        }
        // k is the second half of `\\`: nothing before it can cover pos.
        return None;
    }
    None
}

/// Whether byte `pos` of a literal lies inside an escape sequence (after its backslash).
pub fn inside_escape(raw: &[u8], pos: usize) -> bool {
    escape_start(raw, pos).is_some()
}

/// Byte offset in a literal where its last `n` decoded code points start, found walking back
/// from the end (a cut's tail costs what it keeps, not the whole text).
pub fn suffix_start(raw: &str, n: usize) -> usize {
    let bytes = raw.as_bytes();
    let mut pos = bytes.len();
    for _ in 0..n {
        let Some(last) = pos.checked_sub(1) else {
            return 0;
        };
        pos = match escape_start(bytes, last) {
            Some(k) => {
                // A low surrogate escape and the high one before it are one code point.
                let low = bytes.get(k + 1) == Some(&b'u')
                    && matches!(
                        hex4(bytes.get(k + 2..).unwrap_or(&[])),
                        Some(0xdc00..=0xdfff)
                    );
                match k.checked_sub(6) {
                    Some(high) if low && escape_start(bytes, high + 1) == Some(high) => high,
                    _ => k,
                }
            }
            None => {
                let mut at = last;
                while at > 0 && bytes.get(at).is_some_and(|&b| b & 0xc0 == 0x80) {
                    at -= 1;
                }
                at
            }
        };
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_json_strings() {
        let raw = r#"a\n\"b\\\/\u00e9\ud83d\ude00\t"#;
        assert_eq!(unescape(raw), "a\n\"b\\/é😀\t");
        for n in 0..12 {
            let mut head = String::new();
            push_prefix(raw, n, &mut head);
            let want: String = unescape(raw).chars().take(n).collect();
            assert_eq!(head, want);
            let mut tail = String::new();
            push_from(raw, n, &mut tail);
            let want: String = unescape(raw).chars().skip(n).collect();
            assert_eq!(tail, want, "{n}");
        }
    }

    #[test]
    fn suffixes_walk_back_over_escapes() {
        let raw = r#"a\n\"b\\\/\u00e9\ud83d\ude00\t漢"#;
        let text = unescape(raw);
        let total = text.chars().count();
        for n in 0..=total + 1 {
            let mut tail = String::new();
            push_suffix(raw, n, &mut tail);
            let want: String = text.chars().skip(total.saturating_sub(n)).collect();
            assert_eq!(tail, want, "{n}");
        }
    }

    #[test]
    fn escape_bodies_are_recognized() {
        let raw = br#"a\nb\\c\u0041d"#;
        assert!(!inside_escape(raw, 1));
        assert!(inside_escape(raw, 2));
        assert!(!inside_escape(raw, 3));
        assert!(inside_escape(raw, 5));
        assert!(!inside_escape(raw, 6));
        assert!(inside_escape(raw, 12));
        assert!(!inside_escape(raw, 13));
    }
}
