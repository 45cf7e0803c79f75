//! Stage 2: tool results numbered from the newest over the kept messages, tiered, cleared
//! results passed through, long results cut head-only or head+tail. Every decision comes from
//! lengths known since reading (code points, counted by the scanner or by Python), one search
//! for the cleared marker per result, and one multi-pattern search for the error words, only in
//! the results that are cut and whose tool name or status does not already decide the cut.

use std::cell::OnceCell;
use std::sync::{Arc, Mutex};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use memchr::memmem;

use crate::config::Config;
use crate::json::unescape::{inside_escape, unescape};
use crate::session::{Part, Session, Span, SpanKind};
use crate::text::{count_chars, head_only_len, head_tail_len, head_tail_sizes};

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

/// A string the escapes of a JSON literal can produce, so a raw search could miss it.
fn escapable(needle: &str) -> bool {
    needle
        .bytes()
        .any(|b| matches!(b, b'"' | b'\\' | b'/' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t'))
}

/// Whether the text of `span` contains a match of `find` (a search over bytes from an offset).
/// Escaped literals are searched raw, skipping matches that start inside an escape, unless the
/// needles could be hidden by escapes: then the decoded text is searched.
fn contains(
    session: &Session,
    span: Span,
    find: &dyn Fn(&[u8], usize) -> Option<usize>,
    needles_escapable: bool,
) -> bool {
    let raw = session.raw(span);
    let bytes = raw.as_bytes();
    if !span.is_escaped() {
        return find(bytes, 0).is_some();
    }
    if needles_escapable || span.kind == SpanKind::EscapedUnicode {
        return find(unescape(raw).as_bytes(), 0).is_some();
    }
    let mut from = 0;
    while let Some(at) = find(bytes, from) {
        if !inside_escape(bytes, at) {
            return true;
        }
        from = at + 1;
    }
    false
}

/// The searches of stage 2, built once per render (the error automaton only when needed).
struct Needles<'c> {
    config: &'c Config,
    marker: memmem::Finder<'c>,
    marker_chars: usize,
    marker_escapable: bool,
    errors: OnceCell<Option<Arc<AhoCorasick>>>,
    errors_escapable: bool,
}

impl<'c> Needles<'c> {
    fn new(config: &'c Config) -> Self {
        Self {
            config,
            marker: memmem::Finder::new(config.cleared_marker.as_bytes()),
            marker_chars: count_chars(&config.cleared_marker),
            marker_escapable: escapable(&config.cleared_marker),
            errors: OnceCell::new(),
            errors_escapable: config.error_patterns.iter().any(|p| escapable(p)),
        }
    }

    fn cleared(&self, session: &Session, span: Span) -> bool {
        if span.chars < self.marker_chars {
            return false;
        }
        let find = |hay: &[u8], from: usize| {
            self.marker
                .find(hay.get(from..).unwrap_or(&[]))
                .map(|at| at + from)
        };
        contains(session, span, &find, self.marker_escapable)
    }

    fn looks_like_error(&self, session: &Session, span: Span) -> bool {
        let patterns = &self.config.error_patterns;
        let automaton = self.errors.get_or_init(|| error_automaton(patterns));
        let find = |hay: &[u8], from: usize| match automaton {
            Some(ac) => ac
                .find(aho_corasick::Input::new(hay).range(from.min(hay.len())..))
                .map(|m| m.start()),
            // The automaton could not be built (never for a few short words): search each.
            None => patterns
                .iter()
                .filter_map(|p| {
                    memmem::find(hay.get(from..).unwrap_or(&[]), p.as_bytes()).map(|at| at + from)
                })
                .min(),
        };
        contains(session, span, &find, self.errors_escapable)
    }
}

/// The automaton of the last error pattern list, kept between renders (building one costs more
/// than a small session's whole render).
static LAST_AUTOMATON: Mutex<Option<(Vec<String>, Arc<AhoCorasick>)>> = Mutex::new(None);

/// A leftmost-first automaton (so its SIMD prefilter, Teddy, runs; only whether there is a
/// match matters), contiguous NFA (built in microseconds; the prefilter does the searching).
fn error_automaton(patterns: &[String]) -> Option<Arc<AhoCorasick>> {
    let mut last = LAST_AUTOMATON.lock().ok();
    if let Some(Some((cached, automaton))) = last.as_deref() {
        if cached.as_slice() == patterns {
            return Some(Arc::clone(automaton));
        }
    }
    let automaton = Arc::new(
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .build(patterns)
            .ok()?,
    );
    if let Some(slot) = last.as_deref_mut() {
        *slot = Some((patterns.to_vec(), Arc::clone(&automaton)));
    }
    Some(automaton)
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
    let results = || {
        kept.iter()
            .filter_map(|&m| session.messages.get(m))
            .flat_map(|message| session.parts_of(message).iter())
            .filter_map(part_result)
    };
    let total = results().count();
    let needles = Needles::new(config);
    let mut counts = Counts::default();
    let mut plans = Vec::with_capacity(total);
    for (position, (span, compacted, name, status_error)) in results().enumerate() {
        let tier = config.tier_of(total - 1 - position);
        let chars = span.chars;
        let mut plan = ResultPlan {
            text: span,
            tier,
            cut: Cut::Full,
            len: chars,
        };
        if compacted {
            counts.compacted += 1;
            plan.cut = Cut::Marker;
            plan.len = needles.marker_chars;
            plans.push(plan);
            continue;
        }
        if needles.cleared(session, span) {
            counts.compacted += 1;
            plans.push(plan);
            continue;
        }
        match tier {
            1 => counts.tier1 += 1,
            2 => counts.tier2 += 1,
            _ => counts.tier3 += 1,
        }
        if let Some(limit) = config.result_limit(tier).filter(|&limit| chars > limit) {
            counts.truncated += 1;
            let head_tail = status_error
                || config
                    .head_tail_keywords
                    .iter()
                    .any(|k| name.contains(k.as_str()))
                || needles.looks_like_error(session, span);
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
        plans.push(plan);
    }
    (plans, counts)
}
