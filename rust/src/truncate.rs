//! Stage 2: tool results numbered from the newest over the kept messages, tiered, cleared
//! results passed through, long results cut head-only or head+tail. All lengths are code
//! points; cuts never split one. Lengths are computed from char counts, without building text.

use crate::render::Config;
use crate::session::{Part, Session, Span};

/// The first `n` chars of `s` (all of it when shorter).
pub fn char_prefix(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((at, _)) => s.get(..at).unwrap_or(s),
        None => s,
    }
}

/// The last `n` chars of `s` (all of it when shorter).
pub fn char_suffix(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((at, _)) => s.get(at..).unwrap_or(s),
        None => s,
    }
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

pub fn head_only_marker(dropped: usize) -> String {
    format!("\n...[truncated {dropped} chars]...")
}

pub fn head_tail_marker(dropped: usize) -> String {
    format!("\n...[truncated {dropped} chars]...\n")
}

/// `text[:limit] + marker`; `chars` is `len(text)`, more than `limit`.
pub fn cut_head_only(text: &str, chars: usize, limit: usize, out: &mut String) {
    out.push_str(char_prefix(text, limit));
    out.push_str(&head_only_marker(chars.saturating_sub(limit)));
}

/// `text[:head] + marker + text[len-tail:]`; `chars` is `len(text)`.
pub fn cut_head_tail(text: &str, chars: usize, head: usize, tail: usize, out: &mut String) {
    out.push_str(char_prefix(text, head));
    out.push_str(&head_tail_marker(chars.saturating_sub(head + tail)));
    out.push_str(char_suffix(text, tail));
}

/// Length of `cut_head_only` output.
pub fn head_only_len(chars: usize, limit: usize) -> usize {
    limit + head_only_marker(chars.saturating_sub(limit)).len()
}

/// Length of `cut_head_tail` output.
pub fn head_tail_len(chars: usize, head: usize, tail: usize) -> usize {
    head + tail + head_tail_marker(chars.saturating_sub(head + tail)).len()
}

/// How a result renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// the text as it is
    Full,
    /// the configured cleared marker (a compacted tool part)
    Marker,
    HeadOnly {
        limit: usize,
    },
    HeadTail {
        head: usize,
        tail: usize,
    },
}

/// One tool result of the kept messages.
#[derive(Debug, Clone, Copy)]
pub struct ResultPlan {
    pub text: Span,
    pub tier: u8,
    pub cut: Cut,
    /// len of the original text
    pub chars: usize,
    /// len of the rendered text
    pub len: usize,
}

/// Stage 2 counters over every kept message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub truncated: usize,
    pub head_tail: usize,
    pub tier1: usize,
    pub tier2: usize,
    pub tier3: usize,
    pub compacted: usize,
}

/// The result of a part, if it has one: its text, compacted flag, tool name and error status.
fn part_result(part: &Part) -> Option<(Span, bool, &str, bool)> {
    match part {
        Part::Tool(call) => call
            .result
            .map(|text| (text, call.compacted, call.name.as_str(), call.status_error)),
        Part::ToolResult { name, text } => Some((*text, false, name.as_str(), false)),
        Part::Text(_) => None,
    }
}

/// Every result of the kept messages, in order, with its tier and cut.
pub fn plan_results(
    session: &Session,
    kept: &[usize],
    config: &Config,
) -> (Vec<ResultPlan>, Counts) {
    let messages = || {
        kept.iter()
            .filter_map(|&m| session.messages.get(m))
            .flat_map(|message| message.parts.iter())
            .filter_map(part_result)
    };
    let total = messages().count();
    let mut counts = Counts::default();
    let mut plans = Vec::with_capacity(total);
    let marker = config.cleared_marker.as_str();
    let marker_len = marker.chars().count();
    for (position, (span, compacted, name, status_error)) in messages().enumerate() {
        let tier = config.tier_of(total - 1 - position);
        if compacted {
            counts.compacted += 1;
            plans.push(ResultPlan {
                text: span,
                tier,
                cut: Cut::Marker,
                chars: marker_len,
                len: marker_len,
            });
            continue;
        }
        let text = session.text(span);
        let chars = text.chars().count();
        let mut plan = ResultPlan {
            text: span,
            tier,
            cut: Cut::Full,
            chars,
            len: chars,
        };
        if text.contains(marker) {
            counts.compacted += 1;
            plans.push(plan);
            continue;
        }
        match tier {
            1 => counts.tier1 += 1,
            2 => counts.tier2 += 1,
            _ => counts.tier3 += 1,
        }
        if let Some(limit) = config.result_limit(tier) {
            if chars > limit {
                counts.truncated += 1;
                let head_tail = config
                    .head_tail_keywords
                    .iter()
                    .any(|k| name.contains(k.as_str()))
                    || status_error
                    || config
                        .error_patterns
                        .iter()
                        .any(|p| text.contains(p.as_str()));
                if head_tail {
                    counts.head_tail += 1;
                    let (head, tail) = head_tail_sizes(limit, config.head_ratio, config.tail_ratio);
                    plan.cut = Cut::HeadTail { head, tail };
                    plan.len = head_tail_len(chars, head, tail);
                } else {
                    plan.cut = Cut::HeadOnly { limit };
                    plan.len = head_only_len(chars, limit);
                }
            }
        }
        plans.push(plan);
    }
    (plans, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_suffixes_count_code_points() {
        let s = "a😀漢e\u{301}z";
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
        cut_head_only(&text, 20, 5, &mut out);
        assert_eq!(out, "😀😀😀😀😀\n...[truncated 15 chars]...");
        assert_eq!(out.chars().count(), head_only_len(20, 5));
        let (h, t) = head_tail_sizes(10, 0.8, 0.2);
        assert_eq!((h, t), (8, 2));
        let mut out = String::new();
        cut_head_tail(&text, 20, h, t, &mut out);
        assert_eq!(
            out,
            format!("{}\n...[truncated 10 chars]...\n漢漢", "😀".repeat(8))
        );
        assert_eq!(out.chars().count(), head_tail_len(20, h, t));
        assert_eq!(head_tail_sizes(7, 0.8, 0.2), (5, 1));
        assert_eq!(head_tail_sizes(0, 0.8, 0.2), (0, 0));
    }

    #[test]
    fn combining_marks_count_as_their_own_code_points() {
        let text = "e\u{301}".repeat(5);
        let mut out = String::new();
        cut_head_only(&text, 10, 3, &mut out);
        assert_eq!(out, "e\u{301}e\n...[truncated 7 chars]...");
    }
}
