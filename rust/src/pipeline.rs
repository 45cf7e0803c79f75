//! The pipeline's stages 2 and 3 end to end (stage 1 ran in Python and chose `kept`): plan the
//! results, measure every kept message from lengths alone, pick the survivors from the newest
//! end, and build text only for them.

use crate::budget::{fit, frame_len, Fit, CLOSE, OPEN};
use crate::config::Config;
use crate::session::Session;
use crate::text::{count_chars, cut_head_tail, head_tail_sizes};
use crate::tiers::{plan_results, Counts};
use crate::transcript::{body, head, head_len, result_count, Count, Write};

/// The context and its numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    pub context: String,
    pub final_count: usize,
    pub total_chars: usize,
    pub counts: Counts,
    pub removed_messages: usize,
    pub hard_capped: bool,
}

/// Render the kept messages (indexes into the session, all in range).
pub fn run(session: &Session, kept: &[usize], config: &Config) -> Rendered {
    let (plans, counts) = plan_results(session, kept, config);
    let messages: Vec<_> = kept
        .iter()
        .filter_map(|&m| session.messages.get(m))
        .collect();
    if messages.is_empty() {
        return Rendered {
            counts,
            ..Rendered::default()
        };
    }
    // Each message's slice of the result plans.
    let mut ranges = Vec::with_capacity(messages.len());
    let mut at = 0;
    for message in &messages {
        let n = result_count(session.parts_of(message));
        ranges.push(at..at + n);
        at += n;
    }
    let results = |m: usize| {
        ranges
            .get(m)
            .and_then(|r| plans.get(r.clone()))
            .unwrap_or(&[])
    };
    let sizes: Vec<usize> = messages
        .iter()
        .enumerate()
        .map(|(m, message)| {
            let mut count = Count::default();
            body(session, message, results(m), config, &mut count);
            head_len(message) + count.0
        })
        .collect();
    let last = messages.len() - 1;
    let last_head = messages.get(last).map_or(0, |m| head_len(m));
    let plan = fit(
        &sizes,
        last_head,
        config.char_budget,
        config.char_no_removal,
    );
    let mut context = String::new();
    let (final_count, removed, hard_capped) = match plan {
        Fit::From(first) => {
            let bytes_hint = frame_len() + sizes.get(first..).map_or(0, |s| s.iter().sum());
            context.reserve(bytes_hint);
            context.push_str(OPEN);
            for m in first..messages.len() {
                if let Some(message) = messages.get(m) {
                    context.push_str(&head(message));
                    body(
                        session,
                        message,
                        results(m),
                        config,
                        &mut Write(&mut context),
                    );
                }
            }
            context.push_str(CLOSE);
            (messages.len() - first, first, false)
        }
        Fit::HardCap { limit } => {
            let mut text = String::new();
            if let Some(message) = messages.get(last) {
                body(
                    session,
                    message,
                    results(last),
                    config,
                    &mut Write(&mut text),
                );
            }
            context.push_str(OPEN);
            if let Some(message) = messages.get(last) {
                context.push_str(&head(message));
            }
            let chars = count_chars(&text);
            if chars > limit {
                let (h, t) = head_tail_sizes(limit, config.head_ratio, config.tail_ratio);
                cut_head_tail(&text, chars, h, t, &mut context);
            } else {
                context.push_str(&text);
            }
            context.push_str(CLOSE);
            (1, messages.len() - 1, true)
        }
    };
    let total_chars = count_chars(&context);
    Rendered {
        context,
        final_count,
        total_chars,
        counts,
        removed_messages: removed,
        hard_capped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::json::JsonReader;
    use crate::json::scan::scan;
    use crate::session::{Message, Part, Source, Span, SpanKind};

    fn session(texts: &[&str]) -> Session {
        let mut arena = String::new();
        let mut messages = Vec::new();
        let mut parts = Vec::new();
        for (n, text) in texts.iter().enumerate() {
            let start = arena.len();
            arena.push_str(text);
            let span = Span::new(start, arena.len(), count_chars(text), SpanKind::Plain);
            parts.push(Part::Text(span));
            messages.push(Message {
                role: Some(if n % 2 == 0 { "user" } else { "assistant" }.into()),
                parts: n..n + 1,
                ..Message::default()
            });
        }
        Session {
            source: Source::Objects {
                owned: arena,
                strings: Vec::new(),
            },
            messages,
            parts,
        }
    }

    /// A session read from JSON text by the JSON front end.
    fn from_json(doc: &str) -> Session {
        let mut reader = JsonReader::new(doc);
        assert_eq!(scan(doc, &mut reader), Ok(true));
        assert!(reader.error.is_none());
        Session {
            source: Source::Objects {
                owned: doc.to_owned(),
                strings: Vec::new(),
            },
            messages: reader.messages,
            parts: reader.parts,
        }
    }

    #[test]
    fn oldest_messages_go_first() {
        let s = session(&["a".repeat(50).as_str(), "😀".repeat(30).as_str(), "b"]);
        let config = Config {
            char_budget: 40 + 38 + 8,
            char_no_removal: 0,
            ..Config::default()
        };
        let out = run(&s, &[0, 1, 2], &config);
        assert_eq!(out.removed_messages, 1);
        assert_eq!(out.final_count, 2);
        assert_eq!(
            out.context,
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
        let out = run(&s, &[0], &config);
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
        assert_eq!(out.context, want);
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
        let out = run(&s, &[0], &config);
        let first = format!("{{\"a\":\"{}", &long[..94]);
        let second = format!("{{\"b\":\"{}\"}}", long);
        assert_eq!(
            out.context,
            format!(
                "<inherited_context>\nAgent:\n[Tool: read] {first}...\n[Tool result]\nout\n\
                 [Tool: grep] {second}\n</inherited_context>"
            )
        );
    }

    #[test]
    fn no_messages_no_context() {
        let s = session(&[]);
        let out = run(&s, &[], &Config::default());
        assert_eq!(out.context, "");
        assert_eq!(out.final_count, 0);
    }
}
