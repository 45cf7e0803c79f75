//! Stage 2: tool results numbered from the newest over the kept messages, tiered, cleared
//! results passed through, long results cut head-only or head+tail. Every decision comes from
//! lengths known since reading (code points, counted by the scanner or by Python), one search
//! for the cleared marker per result, and one multi-pattern search for the error words, only in
//! the results that are cut and whose tool name or status does not already decide the cut.

use std::borrow::Cow;
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

/// The bytes to search in a span's text, and whether matches starting inside an escape must
/// be skipped. Escaped literals are searched raw (skipping matches that start inside an
/// escape) unless the needles could be hidden by escapes: then the decoded text is searched.
fn haystack(session: &Session, span: Span, needles_escapable: bool) -> (Cow<'_, [u8]>, bool) {
    let raw = session.raw(span);
    if !span.is_escaped() {
        return (Cow::Borrowed(raw.as_bytes()), false);
    }
    if needles_escapable || span.kind == SpanKind::EscapedUnicode {
        return (Cow::Owned(unescape(raw).into_bytes()), false);
    }
    (Cow::Borrowed(raw.as_bytes()), true)
}

/// A search: the first match `(start, pattern)` in a haystack at or after an offset.
type Find<'f> = &'f dyn Fn(&[u8], usize) -> Option<(usize, usize)>;

/// The first match `(start, pattern)` of `find` at or after `from` that is a match of the text.
fn next_match(
    hay: &[u8],
    skip_escapes: bool,
    mut from: usize,
    find: Find<'_>,
) -> Option<(usize, usize)> {
    loop {
        let found = find(hay, from)?;
        if !skip_escapes || !inside_escape(hay, found.0) {
            return Some(found);
        }
        from = found.0 + 1;
    }
}

/// What the searches found in one result.
#[derive(Debug, Clone, Copy, Default)]
struct Found {
    cleared: bool,
    error: bool,
}

/// The searches of stage 2, built once per render (the automatons only when needed).
struct Needles<'c> {
    config: &'c Config,
    marker: memmem::Finder<'c>,
    marker_chars: usize,
    marker_escapable: bool,
    errors: OnceCell<Option<Arc<AhoCorasick>>>,
    errors_escapable: bool,
    /// the cleared marker (pattern 0) and the error patterns, and their automaton
    both: OnceCell<(Vec<String>, Option<Arc<AhoCorasick>>)>,
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
            both: OnceCell::new(),
        }
    }

    fn find_marker(&self, hay: &[u8], from: usize) -> Option<(usize, usize)> {
        self.marker
            .find(hay.get(from..).unwrap_or(&[]))
            .map(|at| (at + from, 0))
    }

    /// Search one result for the cleared marker (unless it is too short to hold it) and, when
    /// `errors`, for an error pattern: in one pass when both are searched.
    fn search(&self, session: &Session, span: Span, errors: bool) -> Found {
        let marker = span.chars >= self.marker_chars;
        match (marker, errors) {
            (false, false) => Found::default(),
            (true, false) => {
                let (hay, skip) = haystack(session, span, self.marker_escapable);
                let find = |hay: &[u8], from| self.find_marker(hay, from);
                Found {
                    cleared: next_match(&hay, skip, 0, &find).is_some(),
                    error: false,
                }
            }
            (false, true) => {
                let (hay, skip) = haystack(session, span, self.errors_escapable);
                let automaton = self
                    .errors
                    .get_or_init(|| automaton(&self.config.error_patterns));
                let find =
                    |hay: &[u8], from| find_any(automaton, &self.config.error_patterns, hay, from);
                Found {
                    cleared: false,
                    error: next_match(&hay, skip, 0, &find).is_some(),
                }
            }
            (true, true) => {
                let escapable = self.marker_escapable || self.errors_escapable;
                let (hay, skip) = haystack(session, span, escapable);
                let (patterns, automaton) = self.both.get_or_init(|| {
                    let patterns = self.both_patterns();
                    let automaton = automaton(&patterns);
                    (patterns, automaton)
                });
                let find = |hay: &[u8], from| find_any(automaton, patterns, hay, from);
                match next_match(&hay, skip, 0, &find) {
                    None => Found::default(),
                    // Leftmost-first: a marker starting where an error word does wins.
                    Some((_, 0)) => Found {
                        cleared: true,
                        error: false,
                    },
                    Some((at, _)) => {
                        let find = |hay: &[u8], from| self.find_marker(hay, from);
                        Found {
                            cleared: next_match(&hay, skip, at + 1, &find).is_some(),
                            error: true,
                        }
                    }
                }
            }
        }
    }

    fn both_patterns(&self) -> Vec<String> {
        let mut patterns = Vec::with_capacity(self.config.error_patterns.len() + 1);
        patterns.push(self.config.cleared_marker.clone());
        patterns.extend(self.config.error_patterns.iter().cloned());
        patterns
    }
}

/// The first match `(start, pattern index)` at or after `from`.
fn find_any(
    automaton: &Option<Arc<AhoCorasick>>,
    patterns: &[String],
    hay: &[u8],
    from: usize,
) -> Option<(usize, usize)> {
    match automaton {
        Some(ac) => ac
            .find(aho_corasick::Input::new(hay).range(from.min(hay.len())..))
            .map(|m| (m.start(), m.pattern().as_usize())),
        // The automaton could not be built (never for a few short words): search each.
        None => patterns
            .iter()
            .enumerate()
            .filter_map(|(n, p)| {
                memmem::find(hay.get(from..).unwrap_or(&[]), p.as_bytes()).map(|at| (at + from, n))
            })
            .min(),
    }
}

/// The automatons of the last pattern lists, kept between renders (building one costs more
/// than a small session's whole render).
static AUTOMATONS: Mutex<Vec<(Vec<String>, Arc<AhoCorasick>)>> = Mutex::new(Vec::new());

/// A leftmost-first automaton (so its SIMD prefilter, Teddy, runs; only the first match
/// matters), contiguous NFA (built in microseconds; the prefilter does the searching).
fn automaton(patterns: &[String]) -> Option<Arc<AhoCorasick>> {
    let mut cache = AUTOMATONS.lock().ok();
    if let Some(cache) = cache.as_deref() {
        if let Some((_, automaton)) = cache.iter().find(|(p, _)| p.as_slice() == patterns) {
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
    if let Some(cache) = cache.as_deref_mut() {
        // the two lists of the last config (errors; marker and errors), and one more
        if cache.len() >= 3 {
            cache.remove(0);
        }
        cache.push((patterns.to_vec(), Arc::clone(&automaton)));
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
        let limit = config.result_limit(tier).filter(|&limit| chars > limit);
        // the tool name or the status decides the cut without a search
        let decided = status_error
            || config
                .head_tail_keywords
                .iter()
                .any(|k| name.contains(k.as_str()));
        let found = needles.search(session, span, limit.is_some() && !decided);
        if found.cleared {
            counts.compacted += 1;
            plans.push(plan);
            continue;
        }
        match tier {
            1 => counts.tier1 += 1,
            2 => counts.tier2 += 1,
            _ => counts.tier3 += 1,
        }
        if let Some(limit) = limit {
            counts.truncated += 1;
            if decided || found.error {
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
