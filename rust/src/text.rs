//! Text helpers on code points (Python's "characters"): counting, slicing by code points and
//! the head/tail cuts with their markers. A cut never counts or copies more than it keeps.

use crate::output::Output;

/// Code points in `s`: its bytes minus the UTF-8 continuation bytes, no decoding. Byte
/// counters per 255-byte block, so the compiler vectorizes the loop over whole registers.
pub fn count_chars(s: &str) -> usize {
    let continuation: usize = s.as_bytes().chunks(255).map(continuation_bytes).sum();
    s.len() - continuation
}

/// Byte offset of the end of the first `n` code points of `s` (`s.len()` when shorter).
pub fn prefix_end(s: &str, n: usize) -> usize {
    if n >= s.len() {
        return s.len();
    }
    let bytes = s.as_bytes();
    if bytes.get(..n).is_some_and(<[u8]>::is_ascii) {
        return n;
    }
    // Skip whole blocks by their counts, then find the code point's first byte.
    let mut at = 0;
    let mut left = n;
    while let Some(block) = bytes.get(at..at + BLOCK) {
        let starts = BLOCK - continuation_bytes(block);
        if starts > left {
            break;
        }
        left -= starts;
        at += BLOCK;
    }
    let rest = bytes.get(at..).unwrap_or(&[]);
    rest.iter()
        .enumerate()
        .filter(|&(_, &b)| !is_continuation(b))
        .nth(left)
        .map_or(s.len(), |(k, _)| at + k)
}

/// Byte offset where the last `n` code points of `s` start (0 when shorter).
pub fn suffix_start(s: &str, n: usize) -> usize {
    if n == 0 {
        return s.len();
    }
    let bytes = s.as_bytes();
    if let Some(start) = s.len().checked_sub(n) {
        if bytes.get(start..).is_some_and(<[u8]>::is_ascii) {
            return start;
        }
    }
    // From the end: skip whole blocks by their counts, then find the code point's first byte.
    let mut end = bytes.len();
    let mut left = n;
    while let Some(block) = end.checked_sub(BLOCK).and_then(|from| bytes.get(from..end)) {
        let starts = BLOCK - continuation_bytes(block);
        if starts >= left {
            break;
        }
        left -= starts;
        end -= BLOCK;
    }
    let rest = bytes.get(..end).unwrap_or(&[]);
    rest.iter()
        .enumerate()
        .rev()
        .filter(|&(_, &b)| !is_continuation(b))
        .nth(left - 1)
        .map_or(0, |(k, _)| k)
}

/// Bytes per block when skipping by counts.
const BLOCK: usize = 64;

fn is_continuation(b: u8) -> bool {
    (b as i8) < -64
}

/// UTF-8 continuation bytes in `bytes` (at most 255 bytes: one byte counter, vectorized).
fn continuation_bytes(bytes: &[u8]) -> usize {
    usize::from(
        bytes
            .iter()
            .fold(0u8, |n, &b| n.wrapping_add(u8::from(is_continuation(b)))),
    )
}

/// The first `n` code points of `s`.
pub fn char_prefix(s: &str, n: usize) -> &str {
    s.get(..prefix_end(s, n)).unwrap_or(s)
}

/// The last `n` code points of `s`.
pub fn char_suffix(s: &str, n: usize) -> &str {
    s.get(suffix_start(s, n)..).unwrap_or("")
}

/// `floor(L * head_ratio)` and `floor(L * tail_ratio)`, as Python's `int(limit * ratio)`.
pub fn head_tail_sizes(limit: usize, head_ratio: f64, tail_ratio: f64) -> (usize, usize) {
    let size = |ratio: f64| {
        let value = (limit as f64) * ratio;
        if value.is_finite() && value > 0.0 {
            value as usize
        } else {
            0
        }
    };
    (size(head_ratio), size(tail_ratio))
}

/// Decimal digits of `n` (the marker's number), without formatting it.
fn digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

const HEAD_ONLY_FRAME: usize = "\n...[truncated  chars]...".len();
const HEAD_TAIL_FRAME: usize = "\n...[truncated  chars]...\n".len();

/// `"\n...[truncated {dropped} chars]..."`, appended.
pub fn push_head_only_marker<'s>(dropped: usize, out: &mut impl Output<'s>) {
    out.push_str("\n...[truncated ");
    out.push_str(&dropped.to_string());
    out.push_str(" chars]...");
}

/// `"\n...[truncated {dropped} chars]...\n"`, appended.
pub fn push_head_tail_marker<'s>(dropped: usize, out: &mut impl Output<'s>) {
    push_head_only_marker(dropped, out);
    out.push_str("\n");
}

/// Length in code points of `text[:limit] + marker` for a text of `chars` code points.
pub fn head_only_len(chars: usize, limit: usize) -> usize {
    limit + HEAD_ONLY_FRAME + digits(chars.saturating_sub(limit))
}

/// Length in code points of `text[:head] + marker + text[-tail:]`.
pub fn head_tail_len(chars: usize, head: usize, tail: usize) -> usize {
    head + tail + HEAD_TAIL_FRAME + digits(chars.saturating_sub(head + tail))
}

/// A text that can be cut: its first or last `n` code points, appended. A `str`; the render
/// also cuts escaped JSON literals and Python strings in their own layout (`transcript.rs`).
pub trait Cuttable<'s> {
    fn push_prefix(&self, n: usize, out: &mut impl Output<'s>);
    fn push_suffix(&self, n: usize, out: &mut impl Output<'s>);
}

impl<'s> Cuttable<'s> for str {
    fn push_prefix(&self, n: usize, out: &mut impl Output<'s>) {
        out.push_str(char_prefix(self, n));
    }
    fn push_suffix(&self, n: usize, out: &mut impl Output<'s>) {
        out.push_str(char_suffix(self, n));
    }
}

/// `text[:limit] + marker`; `chars` is `len(text)`, more than `limit`.
pub fn cut_head_only<'s, T: Cuttable<'s> + ?Sized>(
    text: &T,
    chars: usize,
    limit: usize,
    out: &mut impl Output<'s>,
) {
    text.push_prefix(limit, out);
    push_head_only_marker(chars.saturating_sub(limit), out);
}

/// `text[:head] + marker + text[len-tail:]`; `chars` is `len(text)`.
pub fn cut_head_tail<'s, T: Cuttable<'s> + ?Sized>(
    text: &T,
    chars: usize,
    head: usize,
    tail: usize,
    out: &mut impl Output<'s>,
) {
    text.push_prefix(head, out);
    push_head_tail_marker(chars.saturating_sub(head + tail), out);
    text.push_suffix(tail, out);
}

/// `[Error: {name}] {message}`; an empty or absent name is `Error`, an empty message is left out.
pub fn error_line(name: Option<&str>, message: Option<&str>) -> String {
    let name = name.filter(|n| !n.is_empty()).unwrap_or("Error");
    match message.filter(|m| !m.is_empty()) {
        Some(message) => format!("[Error: {name}] {message}"),
        None => format!("[Error: {name}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_skips_agree_with_char_indices() {
        let mut s = String::new();
        for k in 0..300 {
            s.push_str(["a", "é", "漢", "😀", "e\u{301}"][k % 5]);
            if k % 7 == 0 {
                s.push_str("plain ascii run ");
            }
        }
        let total = s.chars().count();
        assert_eq!(count_chars(&s), total);
        for n in 0..=total + 2 {
            let want = s.char_indices().nth(n).map_or(s.len(), |(at, _)| at);
            assert_eq!(prefix_end(&s, n), want, "prefix {n}");
            let want = if n == 0 {
                s.len()
            } else {
                s.char_indices().rev().nth(n - 1).map_or(0, |(at, _)| at)
            };
            assert_eq!(suffix_start(&s, n), want, "suffix {n}");
        }
    }

    #[test]
    fn prefixes_and_suffixes_count_code_points() {
        let s = "a😀漢e\u{301}z";
        assert_eq!(count_chars(s), 6);
        assert_eq!(char_prefix(s, 2), "a😀");
        assert_eq!(char_prefix(s, 4), "a😀漢e");
        assert_eq!(char_prefix(s, 100), s);
        assert_eq!(char_suffix(s, 2), "\u{301}z");
        assert_eq!(char_suffix(s, 0), "");
        assert_eq!(char_suffix(s, 100), s);
    }

    #[test]
    fn cuts_match_the_contract() {
        let text: String = "😀".repeat(10) + &"漢".repeat(10);
        let mut out = String::new();
        cut_head_only(text.as_str(), 20, 5, &mut out);
        assert_eq!(out, "😀😀😀😀😀\n...[truncated 15 chars]...");
        assert_eq!(count_chars(&out), head_only_len(20, 5));
        let (h, t) = head_tail_sizes(10, 0.8, 0.2);
        assert_eq!((h, t), (8, 2));
        let mut out = String::new();
        cut_head_tail(text.as_str(), 20, h, t, &mut out);
        assert_eq!(
            out,
            format!("{}\n...[truncated 10 chars]...\n漢漢", "😀".repeat(8))
        );
        assert_eq!(count_chars(&out), head_tail_len(20, h, t));
        assert_eq!(head_tail_sizes(7, 0.8, 0.2), (5, 1));
        assert_eq!(head_tail_sizes(0, 0.8, 0.2), (0, 0));
        assert_eq!(head_only_len(100_000, 500), 500 + 25 + 5);
    }

    #[test]
    fn combining_marks_count_as_their_own_code_points() {
        let text = "e\u{301}".repeat(5);
        let mut out = String::new();
        cut_head_only(text.as_str(), 10, 3, &mut out);
        assert_eq!(out, "e\u{301}e\n...[truncated 7 chars]...");
    }

    #[test]
    fn error_lines() {
        assert_eq!(error_line(None, None), "[Error: Error]");
        assert_eq!(error_line(Some(""), Some("")), "[Error: Error]");
        assert_eq!(
            error_line(Some("APIError"), Some("boom")),
            "[Error: APIError] boom"
        );
    }
}
