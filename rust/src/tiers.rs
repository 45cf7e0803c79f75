//! Stage 2: tool results numbered from the newest over the kept messages, tiered, cleared
//! results passed through, long results cut head-only or head+tail. Every decision comes from
//! lengths known since reading (code points, counted by the scanner or by Python), one search
//! for the cleared marker per result, and one multi-pattern search for the error words, only in
//! the results that are cut and whose tool name or status does not already decide the cut.

use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};
use std::sync::{Arc, Mutex};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use memchr::memmem;

use crate::config::Config;
use crate::json::unescape::{inside_escape, unescape};
use crate::pair::PairFinder;
use crate::session::{Part, Session, Span, SpanKind};
use crate::text::{count_chars, head_only_len, head_tail_len, head_tail_sizes};
use crate::units::Units;

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

/// Which match starts are matches of the text.
#[derive(Clone, Copy)]
enum Starts {
    All,
    /// not inside a JSON escape (a raw literal)
    OutsideEscapes,
    /// on a unit boundary (a Python string of this many bytes per code point)
    Aligned(usize),
}

/// The first match `(start, pattern)` of `find` at or after `from` that is a match of the text.
fn next_match(
    hay: &[u8],
    starts: Starts,
    mut from: usize,
    find: Find<'_>,
) -> Option<(usize, usize)> {
    loop {
        let found = find(hay, from)?;
        let real = match starts {
            Starts::All => true,
            Starts::OutsideEscapes => !inside_escape(hay, found.0),
            Starts::Aligned(width) => found.0 % width == 0,
        };
        if real {
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

/// The needles written in one encoding of the searched text: UTF-8, or the units of Python
/// strings of one width (a needle with a code point too wide for it cannot occur there).
struct Encoded {
    /// the cleared marker, when it can occur
    marker: Option<PairFinder>,
    /// the error patterns that can occur, and their automaton
    errors: (Vec<Vec<u8>>, Option<Arc<AhoCorasick>>),
    /// the marker (pattern 0, when it can occur) and the error patterns, and their automaton
    both: (Vec<Vec<u8>>, Option<Arc<AhoCorasick>>),
}

impl Encoded {
    fn new(config: &Config, encode: impl Fn(&str) -> Option<Vec<u8>>) -> Self {
        let marker = encode(&config.cleared_marker);
        let errors: Vec<Vec<u8>> = config
            .error_patterns
            .iter()
            .filter_map(|p| encode(p))
            .collect();
        let mut both = Vec::with_capacity(errors.len() + 1);
        both.extend(marker.clone());
        both.extend(errors.iter().cloned());
        let errors_automaton = automaton(&errors);
        let both_automaton = automaton(&both);
        Self {
            marker: marker.map(|m| PairFinder::new(&m)),
            errors: (errors, errors_automaton),
            both: (both, both_automaton),
        }
    }

    fn find_marker(&self, hay: &[u8], from: usize) -> Option<(usize, usize)> {
        let finder = self.marker.as_ref()?;
        finder
            .find(hay.get(from..).unwrap_or(&[]))
            .map(|at| (at + from, 0))
    }

    /// Search for the marker (when `marker`) and an error pattern (when `errors`): in one
    /// pass when both are searched.
    fn search(&self, hay: &[u8], starts: Starts, marker: bool, errors: bool) -> Found {
        let marker = marker && self.marker.is_some();
        let find_marker = |hay: &[u8], from| self.find_marker(hay, from);
        match (marker, errors) {
            (false, false) => Found::default(),
            (true, false) => Found {
                cleared: next_match(hay, starts, 0, &find_marker).is_some(),
                error: false,
            },
            (false, true) => {
                let (patterns, automaton) = &self.errors;
                let find = |hay: &[u8], from| find_any(automaton, patterns, hay, from);
                Found {
                    cleared: false,
                    error: next_match(hay, starts, 0, &find).is_some(),
                }
            }
            (true, true) => {
                let (patterns, automaton) = &self.both;
                let find = |hay: &[u8], from| find_any(automaton, patterns, hay, from);
                match next_match(hay, starts, 0, &find) {
                    None => Found::default(),
                    // Leftmost-first: a marker starting where an error word does wins.
                    Some((_, 0)) => Found {
                        cleared: true,
                        error: false,
                    },
                    Some((at, _)) => Found {
                        cleared: next_match(hay, starts, at + 1, &find_marker).is_some(),
                        error: true,
                    },
                }
            }
        }
    }
}

/// `needle` in the units of a Python string `width` bytes wide (native order), or `None`
/// when one of its code points needs more.
fn encode_units(needle: &str, width: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(needle.len() * width);
    for c in needle.chars() {
        let point = u32::from(c);
        match width {
            1 => out.push(u8::try_from(point).ok()?),
            2 => out.extend(u16::try_from(point).ok()?.to_ne_bytes()),
            _ => out.extend(point.to_ne_bytes()),
        }
    }
    Some(out)
}

/// `units` one byte per code point: ASCII as itself, anything wider as a byte that is not
/// ASCII. An ASCII needle matches there exactly where it matches the text (a vectorized pass,
/// far cheaper than a search for needles padded with zero bytes, which occur everywhere).
fn narrow(units: Units<'_>, out: &mut Vec<u8>) {
    // every byte is written below: only a longer block needs the vector to grow
    out.resize(units.len(), 0);
    match units {
        Units::One(u) => out.copy_from_slice(u),
        Units::Two(u) => narrow_units(u, out),
        Units::Four(u) => narrow_units(u, out),
    }
}

fn narrow_units<T: Copy + Into<u32>>(units: &[T], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { narrow_units_avx2(units, out) };
    }
    narrow_units_body(units, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn narrow_units_avx2<T: Copy + Into<u32>>(units: &[T], out: &mut [u8]) {
    narrow_units_body(units, out)
}

/// One plain loop, which the compiler vectorizes.
#[inline(always)]
fn narrow_units_body<T: Copy + Into<u32>>(units: &[T], out: &mut [u8]) {
    for (byte, &unit) in out.iter_mut().zip(units) {
        let unit: u32 = unit.into();
        *byte = unit.min(0xff) as u8;
    }
}

/// The searches of stage 2, built once per render (each encoding only when needed).
struct Needles<'c> {
    config: &'c Config,
    marker_chars: usize,
    marker_escapable: bool,
    errors_escapable: bool,
    /// every needle is ASCII (the default): Python strings are searched narrowed
    ascii: bool,
    utf8: OnceCell<Encoded>,
    /// for Python strings of 1, 2 and 4 bytes per code point, when a needle is not ASCII
    wide: [OnceCell<Encoded>; 3],
    /// the narrowed units of the Python string being searched (one block)
    narrowed: RefCell<Vec<u8>>,
    /// the longest needle in characters, less one: the overlap of narrowed blocks
    overlap: usize,
}

/// Characters narrowed and searched at a time (the narrowed block stays in the L1/L2 cache).
const NARROW_BLOCK: usize = 32 * 1024;

impl<'c> Needles<'c> {
    fn new(config: &'c Config) -> Self {
        Self {
            config,
            marker_chars: count_chars(&config.cleared_marker),
            marker_escapable: escapable(&config.cleared_marker),
            errors_escapable: config.error_patterns.iter().any(|p| escapable(p)),
            ascii: config.cleared_marker.is_ascii()
                && config.error_patterns.iter().all(|p| p.is_ascii()),
            utf8: OnceCell::new(),
            wide: [OnceCell::new(), OnceCell::new(), OnceCell::new()],
            narrowed: RefCell::new(Vec::new()),
            overlap: std::iter::once(&config.cleared_marker)
                .chain(&config.error_patterns)
                .map(|needle| count_chars(needle))
                .max()
                .unwrap_or(0)
                .saturating_sub(1),
        }
    }

    /// Search one result for the cleared marker (unless it is too short to hold it) and, when
    /// `errors`, for an error pattern.
    fn search(&self, session: &Session, span: Span, errors: bool) -> Found {
        let marker = span.chars >= self.marker_chars;
        if !marker && !errors {
            return Found::default();
        }
        if let Some(wide) = session.wide(span) {
            if self.ascii {
                let encoded = self.utf8();
                if wide.width() == 1 {
                    // Latin-1: its bytes are the code points, only ASCII ones match
                    return encoded.search(wide.bytes(), Starts::All, marker, errors);
                }
                return self.search_narrowed(encoded, wide.units(), marker, errors);
            }
            let width = wide.width();
            let slot = match width {
                1 => 0,
                2 => 1,
                _ => 2,
            };
            let encoded = self.wide[slot]
                .get_or_init(|| Encoded::new(self.config, |n| encode_units(n, width)));
            return encoded.search(wide.bytes(), Starts::Aligned(width), marker, errors);
        }
        let escapable = (marker && self.marker_escapable) || (errors && self.errors_escapable);
        let (hay, skip) = haystack(session, span, escapable);
        let starts = if skip {
            Starts::OutsideEscapes
        } else {
            Starts::All
        };
        self.utf8().search(&hay, starts, marker, errors)
    }

    /// `Encoded::search` over `units` narrowed a block at a time, so the narrowed text stays
    /// in cache; consecutive blocks overlap by a needle's length, less one.
    fn search_narrowed(
        &self,
        encoded: &Encoded,
        units: Units<'_>,
        mut marker: bool,
        mut errors: bool,
    ) -> Found {
        let mut narrowed = self.narrowed.borrow_mut();
        if narrowed.capacity() == 0 {
            // one block's room at once, not a copy each time a longer result comes
            narrowed.reserve(NARROW_BLOCK + self.overlap);
        }
        let mut found = Found::default();
        let total = units.len();
        let mut at = 0;
        while marker || errors {
            let end = total.min(at + NARROW_BLOCK);
            narrow(
                units.slice(at.saturating_sub(self.overlap), end),
                &mut narrowed,
            );
            at = end;
            let here = encoded.search(&narrowed, Starts::All, marker, errors);
            if here.cleared {
                // the text passes through as it is: whether it has an error word is moot
                found = Found {
                    cleared: true,
                    error: false,
                };
                break;
            }
            if here.error {
                found.error = true;
                errors = false;
            }
            if end == total {
                break;
            }
            // a marker too long for what is left cannot start in it
            marker = marker && total - end + self.overlap >= self.marker_chars;
        }
        found
    }

    fn utf8(&self) -> &Encoded {
        self.utf8
            .get_or_init(|| Encoded::new(self.config, |n| Some(n.as_bytes().to_vec())))
    }
}

/// The first match `(start, pattern index)` at or after `from`.
fn find_any(
    automaton: &Option<Arc<AhoCorasick>>,
    patterns: &[Vec<u8>],
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
                memmem::find(hay.get(from..).unwrap_or(&[]), p).map(|at| (at + from, n))
            })
            .min(),
    }
}

/// The automatons of the last pattern lists, kept between renders (building one costs more
/// than a small session's whole render).
type Automatons = Vec<(Vec<Vec<u8>>, Arc<AhoCorasick>)>;
static AUTOMATONS: Mutex<Automatons> = Mutex::new(Vec::new());

/// Pattern lists kept: errors and marker-and-errors, in UTF-8 and in the three widths.
const AUTOMATONS_KEPT: usize = 8;

/// A leftmost-first automaton (so its SIMD prefilter, Teddy, runs; only the first match
/// matters), contiguous NFA (built in microseconds; the prefilter does the searching).
/// `None` for no patterns (nothing to find) or when it cannot be built.
fn automaton(patterns: &[Vec<u8>]) -> Option<Arc<AhoCorasick>> {
    if patterns.is_empty() {
        return None;
    }
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
        if cache.len() >= AUTOMATONS_KEPT {
            cache.remove(0);
        }
        cache.push((patterns.to_vec(), Arc::clone(&automaton)));
    }
    Some(automaton)
}

/// The result of a part, if it has one: its text, compacted flag, tool name and error status.
fn part_result<'s>(session: &'s Session, part: &Part) -> Option<(Span, bool, &'s str, bool)> {
    match part {
        Part::Tool(call) => call.result.map(|text| {
            let name = session.short(call.name);
            (text, call.compacted, name, call.status_error)
        }),
        Part::ToolResult { name, text } => Some((*text, false, session.short(*name), false)),
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
            .filter_map(|part| part_result(session, part))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What `narrow` must give: each code point as itself up to U+00FF, else U+00FF; and
    /// whether one is a surrogate (`Units::has_surrogate`, the check of written texts).
    fn expected<T: Copy + Into<u32>>(units: &[T]) -> (Vec<u8>, bool) {
        let narrowed = units.iter().map(|&u| u.into().min(0xff) as u8).collect();
        let surrogate = units.iter().any(|&u| (0xd800..=0xdfff).contains(&u.into()));
        (narrowed, surrogate)
    }

    fn check<'a, T: Copy + Into<u32>>(units: &'a [T], wrap: fn(&'a [T]) -> Units<'a>) {
        let mut out = Vec::new();
        narrow(wrap(units), &mut out);
        let found = wrap(units).has_surrogate();
        assert_eq!((out, found), expected(units), "{} units", units.len());
        // the portable loop, whatever the CPU
        let mut portable = vec![0; units.len()];
        narrow_units_body(units, &mut portable);
        assert_eq!(portable, expected(units).0);
    }

    #[test]
    fn narrowing_keeps_latin1_flags_wider_and_finds_lone_surrogates() {
        // around the surrogate range, and wide code points whose low bits look like one
        let table = [
            0x41, 0x7f, 0x80, 0xe9, 0xff, 0x100, 0x6f22, 0xd7ff, 0xe000, 0x1_d800, 0x1_dfff,
            0x1_f600, 0x10_ffff,
        ];
        let points: Vec<u32> = (0..700u32)
            .map(|n| {
                if n % 3 == 0 {
                    0x41 + n % 26
                } else {
                    table[n as usize % table.len()]
                }
            })
            .collect();
        for len in [
            0, 1, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 700,
        ] {
            let four = points.get(..len).unwrap_or(&[]);
            let two: Vec<u16> = four
                .iter()
                .map(|&p| u16::try_from(p).unwrap_or(0x3042))
                .collect();
            check(four, Units::Four);
            check(&two, Units::Two);
            let places = [0, 1, len / 2, 255, 256, len.saturating_sub(1)];
            for at in places.into_iter().filter(|&at| at < len) {
                for surrogate in [0xd800u16, 0xdbff, 0xdc00, 0xdfff] {
                    let mut four = four.to_vec();
                    let mut two = two.clone();
                    four[at] = u32::from(surrogate);
                    two[at] = surrogate;
                    check(&four, Units::Four);
                    check(&two, Units::Two);
                }
            }
        }
    }
}
