//! The pipeline's stages 2 and 3 end to end (stage 1 ran in Python and chose `kept`): plan
//! the results of every kept message, measure the messages from the newest until the budget is
//! sure to drop the older ones (those are never measured, their parameters never dumped), pick
//! the survivors, and build text only for them.

use std::ops::Range;

use crate::budget::{fit, frame_len, Fit, CLOSE, OPEN};
use crate::config::Config;
use crate::errors::{Failure, InputError};
use crate::output::{Context, Output, Piece};
#[cfg(test)]
use crate::params::NoObjects;
use crate::params::{DumpInput, Params};
use crate::session::{Message, Session};
use crate::surrogates::check_written;
use crate::text::{count_chars, cut_head_tail, head_tail_sizes};
use crate::tiers::{plan_results, Counts, ResultPlan};
use crate::transcript::{body, head_len, push_head, result_count, Count, Write};

/// The context and its numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered<'s> {
    pub context: Context<'s>,
    pub final_count: usize,
    pub total_chars: usize,
    pub counts: Counts,
    pub removed_messages: usize,
    pub hard_capped: bool,
}

/// Stage 2 over the kept messages (indexes into the session, all in range).
pub struct Planned<'s> {
    messages: Vec<&'s Message>,
    /// every result of `messages`, in order
    plans: Vec<ResultPlan>,
    counts: Counts,
}

/// Stage 2: the kept messages and their result plans.
pub fn plan<'s>(session: &'s Session, kept: &[usize], config: &Config) -> Planned<'s> {
    let (plans, counts) = plan_results(session, kept, config);
    let messages = kept
        .iter()
        .filter_map(|&m| session.messages.get(m))
        .collect();
    Planned {
        messages,
        plans,
        counts,
    }
}

/// For walked objects, the lone surrogate check of what the context writes (the bodies of the
/// survivors of `kept`, in context order; the one a hard cap cuts as it was before the cut),
/// before anything is written (`surrogates.rs`).
pub fn check_shown(
    session: &Session,
    kept: &[usize],
    planned: &Planned<'_>,
    measured: &Measured,
    config: &Config,
) -> Result<(), InputError> {
    let shown = match measured.fit {
        Fit::From(first) => planned.messages.len().saturating_sub(first),
        Fit::HardCap { .. } => 1,
    };
    let last = kept.len().saturating_sub(1);
    let bodies = (0..shown).rev().filter_map(|k| {
        let (message, results) = survivor(planned, measured, k)?;
        Some((*kept.get(last.checked_sub(k)?)?, message, results))
    });
    check_written(session, bodies, config)
}

/// Which messages survive, from their sizes (measured from the newest only as far as needed).
pub struct Measured {
    fit: Fit,
    /// the sizes measured, newest first
    sizes: Vec<usize>,
    /// the range of `Planned::plans` holding each measured message's results, newest first
    results: Vec<Range<usize>>,
    params: Params,
}

impl Measured {
    /// Whether the newest message alone is shown, cut (`Fit::HardCap`).
    pub fn hard_capped(&self) -> bool {
        matches!(self.fit, Fit::HardCap { .. })
    }
}

/// Measure the messages from the newest; dump the parameters of each before measuring it.
pub fn measure(
    session: &Session,
    planned: &Planned<'_>,
    config: &Config,
    dumper: &mut dyn DumpInput,
) -> Result<Measured, Failure> {
    let mut params = Params::default();
    let mut sizes = Vec::new();
    let mut ranges = Vec::new();
    let mut end = planned.plans.len();
    let mut size = frame_len();
    for message in planned.messages.iter().rev() {
        let n = result_count(session.parts_of(message));
        let start = end.saturating_sub(n);
        let results = planned.plans.get(start..end).unwrap_or(&[]);
        ranges.push(start..end);
        end = start;
        let mut count = Count {
            chars: 0,
            params: &mut params,
            dumper: &mut *dumper,
            failure: None,
        };
        body(session, message, results, config, &mut count);
        if let Some(failure) = count.failure {
            return Err(failure);
        }
        let this = head_len(session, message) + count.chars;
        sizes.push(this);
        size = size.saturating_add(this);
        if must_remove(size, config) {
            break;
        }
    }
    let last_head = planned.messages.last().map_or(0, |m| head_len(session, m));
    let fit = fit(
        &sizes,
        planned.messages.len(),
        last_head,
        config.char_budget,
        config.char_no_removal,
    );
    Ok(Measured {
        fit,
        sizes,
        results: ranges,
        params,
    })
}

/// Whether a context that is already this long (frame included) will lose its oldest messages.
fn must_remove(size: usize, config: &Config) -> bool {
    size > config.char_no_removal && size > config.char_budget
}

/// The `k`-th newest of the planned messages and its results (every survivor was measured).
fn survivor<'p>(
    planned: &'p Planned<'_>,
    measured: &'p Measured,
    k: usize,
) -> Option<(&'p Message, &'p [ResultPlan])> {
    let message = planned
        .messages
        .len()
        .checked_sub(k + 1)
        .and_then(|at| planned.messages.get(at))?;
    let results = measured
        .results
        .get(k)
        .and_then(|range| planned.plans.get(range.clone()))
        .unwrap_or(&[]);
    Some((message, results))
}

/// The body of the `k`-th newest of the planned messages.
fn write_body<'s>(
    session: &'s Session,
    planned: &Planned<'_>,
    measured: &Measured,
    config: &Config,
    k: usize,
    out: &mut impl Output<'s>,
) {
    let Some((message, results)) = survivor(planned, measured, k) else {
        return;
    };
    let mut out = Write {
        out,
        params: &measured.params,
    };
    body(session, message, results, config, &mut out);
}

/// Code points of a context.
fn context_chars(context: &Context<'_>) -> usize {
    context
        .pieces()
        .map(|piece| match piece {
            Piece::Text(text) => count_chars(text),
            Piece::Units(units) => units.len(),
        })
        .sum()
}

/// Build the context of the survivors.
pub fn write<'s>(
    session: &'s Session,
    planned: &Planned<'_>,
    measured: &Measured,
    config: &Config,
) -> Rendered<'s> {
    let messages = &planned.messages;
    let counts = planned.counts;
    let Some(last) = messages.len().checked_sub(1) else {
        return Rendered {
            counts,
            ..Rendered::default()
        };
    };
    // the survivors' text (their units stand apart): at most as many bytes as characters
    // unless it is not ASCII, so one allocation for most contexts, and no copy as it grows
    // (a hint, bounded: a longer context grows as it is written)
    let room = match measured.fit {
        Fit::From(first) => measured.sizes.iter().take(messages.len() - first).sum(),
        Fit::HardCap { limit } => limit,
    };
    let mut context = Context::with_capacity(frame_len().saturating_add(room).min(1 << 26));
    let (final_count, removed, hard_capped, total_chars) = match measured.fit {
        Fit::From(first) => {
            let kept = messages.len() - first;
            context.push_str(OPEN);
            for k in (0..kept).rev() {
                if let Some(message) = messages.get(last - k) {
                    push_head(session, message, &mut context);
                }
                write_body(session, planned, measured, config, k, &mut context);
            }
            context.push_str(CLOSE);
            // the survivors' sizes are known: the context's length without a count
            let body: usize = measured.sizes.iter().take(kept).sum();
            (kept, first, false, frame_len() + body)
        }
        Fit::HardCap { limit } => {
            let mut text = String::new();
            write_body(session, planned, measured, config, 0, &mut text);
            context.push_str(OPEN);
            if let Some(message) = messages.get(last) {
                push_head(session, message, &mut context);
            }
            let chars = count_chars(&text);
            if chars > limit {
                let (h, t) = head_tail_sizes(limit, config.head_ratio, config.tail_ratio);
                cut_head_tail(text.as_str(), chars, h, t, &mut context);
            } else {
                context.push_str(&text);
            }
            context.push_str(CLOSE);
            (1, messages.len() - 1, true, context_chars(&context))
        }
    };
    debug_assert_eq!(total_chars, context_chars(&context));
    Rendered {
        context,
        final_count,
        total_chars,
        counts,
        removed_messages: removed,
        hard_capped,
    }
}

/// Render the kept messages of a session read from JSON (no Python objects to dump).
#[cfg(test)]
pub fn run<'s>(
    session: &'s Session,
    kept: &[usize],
    config: &Config,
) -> Result<Rendered<'s>, Failure> {
    let planned = plan(session, kept, config);
    let measured = measure(session, &planned, config, &mut NoObjects)?;
    check_shown(session, kept, &planned, &measured, config)?;
    Ok(write(session, &planned, &measured, config))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::input::json::JsonReader;
    use crate::json::scan::scan;
    use crate::session::{Message, Part, Shorts, Source, Span, SpanKind};

    fn session(texts: &[&str]) -> Session {
        let mut arena = String::new();
        let mut messages = Vec::new();
        let mut parts = Vec::new();
        let mut shorts = Shorts::default();
        for (n, text) in texts.iter().enumerate() {
            let start = arena.len();
            arena.push_str(text);
            let span = Span::new(start, arena.len(), count_chars(text), SpanKind::Plain);
            parts.push(Part::Text(span));
            messages.push(Message {
                role: Some(shorts.push(if n % 2 == 0 { "user" } else { "assistant" })),
                parts: n..n + 1,
                ..Message::default()
            });
        }
        Session {
            source: Source::Objects {
                owned: arena,
                strings: Vec::new(),
                wide: Vec::new(),
                unchecked: Vec::new(),
                inputs: Vec::new(),
            },
            messages,
            parts,
            shorts,
        }
    }

    /// A session read from JSON text by the JSON front end (also for other modules' tests).
    pub(crate) fn from_json(doc: &str) -> Session {
        let mut reader = JsonReader::new(doc);
        assert_eq!(scan(doc, &mut reader), Ok(true));
        assert!(reader.error.is_none());
        Session {
            source: Source::Objects {
                owned: doc.to_owned(),
                strings: Vec::new(),
                wide: Vec::new(),
                unchecked: Vec::new(),
                inputs: Vec::new(),
            },
            messages: reader.messages,
            parts: reader.parts,
            shorts: reader.shorts,
        }
    }

    fn run_ok<'s>(session: &'s Session, kept: &[usize], config: &Config) -> Rendered<'s> {
        run(session, kept, config).unwrap_or_default()
    }

    #[test]
    fn oldest_messages_go_first() {
        let s = session(&["a".repeat(50).as_str(), "😀".repeat(30).as_str(), "b"]);
        let config = Config {
            char_budget: 40 + 38 + 8,
            char_no_removal: 0,
            ..Config::default()
        };
        let out = run_ok(&s, &[0, 1, 2], &config);
        assert_eq!(out.removed_messages, 1);
        assert_eq!(out.final_count, 2);
        assert_eq!(
            out.context.to_utf8(),
            format!(
                "<inherited_context>\nAgent:\n{}\nUser:\nb\n</inherited_context>",
                "😀".repeat(30)
            )
        );
        assert_eq!(out.total_chars, config.char_budget);
    }

    #[test]
    fn hard_cap_cuts_the_newest_body_on_code_points() {
        let s = session(&["漢".repeat(500).as_str()]);
        let config = Config {
            char_budget: 150,
            char_no_removal: 0,
            ..Config::default()
        };
        let out = run_ok(&s, &[0], &config);
        assert!(out.hard_capped);
        assert!(out.total_chars <= 150);
        // limit = 150 - (40 + 6) - 36 = 68: head 54, tail 13
        let body = format!("\n{}", "漢".repeat(500));
        let want = format!(
            "<inherited_context>\nUser:{}\n...[truncated {} chars]...\n{}\n</inherited_context>",
            body.chars().take(54).collect::<String>(),
            501 - 54 - 13,
            "漢".repeat(13)
        );
        assert_eq!(out.context.to_utf8(), want);
    }

    #[test]
    fn legacy_call_takes_the_tier_of_the_next_tool_result() {
        let long = "x".repeat(300);
        let doc = format!(
            r#"[{{"info":{{"role":"assistant"}},"parts":[
                {{"type":"tool","tool":"read","state":{{"input":{{"a":"{long}"}}}}}},
                {{"type":"tool_result","text":"out"}},
                {{"type":"tool","tool":"grep","state":{{"input":{{"b":"{long}"}}}}}}]}}]"#
        );
        let s = from_json(&doc);
        let config = Config {
            tier1_count: 0,
            tier2_count: 0,
            ..Config::default()
        };
        let out = run_ok(&s, &[0], &config);
        let first = format!("{{\"a\":\"{}", &long[..94]);
        let second = format!("{{\"b\":\"{}\"}}", long);
        assert_eq!(
            out.context.to_utf8(),
            format!(
                "<inherited_context>\nAgent:\n[Tool: read] {first}...\n[Tool result]\nout\n\
                 [Tool: grep] {second}\n</inherited_context>"
            )
        );
    }

    #[test]
    fn a_message_kept_twice_shows_each_preview_at_its_own_tier() {
        // Measured from the newest: the newer copy (tier 1, 5 characters) is dumped first,
        // the older one (tier 3, 20 characters) needs more of the same input.
        let doc = r#"[{"info":{"role":"assistant"},"parts":[
            {"type":"tool","tool":"read","state":{"status":"completed",
             "input":{"path":"abcdefghijklmnopqrstuvwxyz"},"output":"ok"}}]}]"#;
        let s = from_json(doc);
        let config = Config {
            tier1_count: 1,
            tier2_count: 0,
            params_tier1: 5,
            params_tier3: 20,
            ..Config::default()
        };
        let out = run_ok(&s, &[0, 0], &config);
        let message =
            |preview: &str| format!("\nAgent:\n[Tool: read] {preview}\n[Tool result]\nok");
        assert_eq!(
            out.context.to_utf8(),
            format!(
                "<inherited_context>{}{}\n</inherited_context>",
                message(r#"{"path":"abcdefghijk..."#),
                message(r#"{"pat..."#)
            )
        );
        assert_eq!(out.total_chars, out.context.to_utf8().chars().count());
    }

    #[test]
    fn no_messages_no_context() {
        let s = session(&[]);
        let out = run_ok(&s, &[], &Config::default());
        assert_eq!(out.context.to_utf8(), "");
        assert_eq!(out.final_count, 0);
    }
}
