//! Stages 2 and 3 end to end: plan the results, measure every kept message, pick the survivors
//! from the newest end, and build text only for them.

use crate::budget::{fit, frame_len, Fit, CLOSE, OPEN};
use crate::session::Session;
use crate::transcript::{body, head, head_len, result_count, Count, Write};
use crate::truncate::{cut_head_tail, head_tail_sizes, plan_results, Counts};

/// The `ForkConfig` fields, read once.
#[derive(Debug, Clone)]
pub struct Config {
    pub char_budget: usize,
    pub char_no_removal: usize,
    pub tier1_count: usize,
    pub tier2_count: usize,
    pub tier2_limit: usize,
    pub tier3_limit: usize,
    pub params_tier1: usize,
    pub params_tier2: usize,
    pub params_tier3: usize,
    pub head_ratio: f64,
    pub tail_ratio: f64,
    pub error_patterns: Vec<String>,
    pub head_tail_keywords: Vec<String>,
    pub cleared_marker: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            char_budget: 200_000,
            char_no_removal: 120_000,
            tier1_count: 5,
            tier2_count: 10,
            tier2_limit: 3000,
            tier3_limit: 500,
            params_tier1: 500,
            params_tier2: 200,
            params_tier3: 100,
            head_ratio: 0.8,
            tail_ratio: 0.2,
            error_patterns: [
                "error",
                "Error",
                "ERROR",
                "failed",
                "FAILED",
                "exception",
                "traceback",
            ]
            .map(String::from)
            .to_vec(),
            head_tail_keywords: ["bash", "pty", "exec"].map(String::from).to_vec(),
            cleared_marker: "[Old tool result content cleared]".to_owned(),
        }
    }
}

impl Config {
    /// Tier (1, 2, 3) of the result numbered `index` from the newest.
    pub fn tier_of(&self, index: usize) -> u8 {
        if index < self.tier1_count {
            1
        } else if index < self.tier1_count.saturating_add(self.tier2_count) {
            2
        } else {
            3
        }
    }

    pub fn result_limit(&self, tier: u8) -> Option<usize> {
        match tier {
            1 => None,
            2 => Some(self.tier2_limit),
            _ => Some(self.tier3_limit),
        }
    }

    pub fn params_limit(&self, tier: u8) -> usize {
        match tier {
            1 => self.params_tier1,
            2 => self.params_tier2,
            _ => self.params_tier3,
        }
    }
}

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
pub fn render(session: &Session, kept: &[usize], config: &Config) -> Rendered {
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
        let n = result_count(message);
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
            let chars = text.chars().count();
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
    let total_chars = context.chars().count();
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
    use crate::session::{Message, Part, Source, Span, SpanKind};

    fn session(texts: &[&str]) -> Session {
        let mut arena = String::new();
        let mut messages = Vec::new();
        for (n, text) in texts.iter().enumerate() {
            let start = arena.len();
            arena.push_str(text);
            let span = Span::new(start, arena.len(), SpanKind::Plain);
            messages.push(Message {
                role: Some(if n % 2 == 0 { "user" } else { "assistant" }.into()),
                parts: vec![Part::Text(span)],
                ..Message::default()
            });
        }
        Session {
            source: Source::Objects {
                owned: arena,
                strings: Vec::new(),
            },
            messages,
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
        let out = render(&s, &[0, 1, 2], &config);
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
        let out = render(&s, &[0], &config);
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
        let messages = crate::parse_json::parse_document(&doc).unwrap();
        let s = Session {
            source: Source::Objects {
                owned: doc.clone(),
                strings: Vec::new(),
            },
            messages,
        };
        let config = Config {
            tier1_count: 0,
            tier2_count: 0,
            ..Config::default()
        };
        let out = render(&s, &[0], &config);
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
        let out = render(&s, &[], &Config::default());
        assert_eq!(out.context, "");
        assert_eq!(out.final_count, 0);
    }
}
