//! Stage 3a: each kept message as a label line and a body. One walker serves two outputs: a
//! counter that measures a message in code points without building it, and a writer that
//! builds the text (only for the messages that survive the budget).

use std::borrow::Cow;

use crate::config::Config;
use crate::errors::Failure;
use crate::json::unescape;
use crate::output::Output;
use crate::params::{DumpInput, Params};
use crate::session::{Message, Part, Session, Span, ToolCall};
use crate::text::{char_prefix, count_chars, cut_head_only, cut_head_tail, Cuttable};
use crate::tiers::{Cut, ResultPlan};
use crate::units::Units;

pub const RESULT_HEADER: &str = "[Tool result]\n";

/// `User`, `Agent`, `Unknown`, or the role with its first code point upper-cased.
pub fn label(role: Option<&str>) -> Cow<'_, str> {
    match role {
        Some("user") => Cow::Borrowed("User"),
        Some("assistant") => Cow::Borrowed("Agent"),
        None | Some("") => Cow::Borrowed("Unknown"),
        Some(role) => {
            let mut chars = role.chars();
            let mut out = String::with_capacity(role.len() + 2);
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
            }
            out.push_str(chars.as_str());
            Cow::Owned(out)
        }
    }
}

/// Write the label line of a message, `"\n" + label + ":"`.
pub fn push_head<'s>(session: &Session, message: &Message, out: &mut impl Output<'s>) {
    let text = out.text();
    text.push('\n');
    text.push_str(&label(session.role(message)));
    text.push(':');
}

/// Length of the label line, without building it for the common roles.
pub fn head_len(session: &Session, message: &Message) -> usize {
    count_chars(&label(session.role(message))) + 2
}

/// Where a message body of session `'s` goes: counted or written.
pub trait Out<'s> {
    fn text(&mut self, s: &str);
    fn span(&mut self, session: &'s Session, span: Span);
    /// A tool call's parameters, cut to `limit` characters and `"..."`.
    fn preview(&mut self, session: &'s Session, input: Span, limit: usize);
    fn result(&mut self, session: &'s Session, plan: &ResultPlan, config: &Config);
}

/// Measures in code points, dumping each preview's parameters on the way (the writer then
/// finds them in `params`).
pub struct Count<'p> {
    pub chars: usize,
    pub params: &'p mut Params,
    pub dumper: &'p mut dyn DumpInput,
    /// the first dump that failed (a value the caller changed since the walk)
    pub failure: Option<Failure>,
}

impl<'s> Out<'s> for Count<'_> {
    fn text(&mut self, s: &str) {
        self.chars += count_chars(s);
    }
    fn span(&mut self, _: &Session, span: Span) {
        self.chars += span.chars;
    }
    fn preview(&mut self, session: &Session, input: Span, limit: usize) {
        if self.failure.is_some() {
            // the measure fails anyway: nothing more to dump or count
            return;
        }
        let wanted = limit.saturating_add(1);
        match self.params.prepare(session, input, wanted, self.dumper) {
            Ok(n) => self.chars += if n > limit { limit + 3 } else { n },
            Err(failure) => self.failure = Some(failure),
        }
    }
    fn result(&mut self, _: &Session, plan: &ResultPlan, _: &Config) {
        self.chars += plan.len;
    }
}

/// Builds the text (into a `String`, or a render's `Context`), with the parameters the
/// measure dumped.
pub struct Write<'a, O> {
    pub out: &'a mut O,
    pub params: &'a Params,
}

impl<'s, O: Output<'s>> Out<'s> for Write<'_, O> {
    fn text(&mut self, s: &str) {
        self.out.push_str(s);
    }
    fn span(&mut self, session: &'s Session, span: Span) {
        Stored::of(session, span).push_all(self.out);
    }
    fn preview(&mut self, _: &'s Session, input: Span, limit: usize) {
        let (text, n) = self.params.get(input);
        if n > limit {
            self.out.push_str(char_prefix(text, limit));
            self.out.push_str("...");
        } else {
            self.out.push_str(text);
        }
    }
    fn result(&mut self, session: &'s Session, plan: &ResultPlan, config: &Config) {
        let text = Stored::of(session, plan.text);
        let chars = plan.text.chars;
        match plan.cut {
            Cut::Full => text.push_all(self.out),
            Cut::Marker => self.out.push_str(&config.cleared_marker),
            Cut::HeadOnly { limit } => cut_head_only(&text, chars, limit, self.out),
            Cut::HeadTail { head, tail } => cut_head_tail(&text, chars, head, tail, self.out),
        }
    }
}

/// A span's text as the session holds it: plain UTF-8, the inside of an escaped JSON
/// literal (decoded straight into the output), or a Python string in its own layout (one unit
/// per code point: its cuts are index ranges).
enum Stored<'a> {
    Plain(&'a str),
    Escaped(&'a str),
    Wide(Units<'a>),
}

impl<'a> Stored<'a> {
    fn of(session: &'a Session, span: Span) -> Self {
        if let Some(wide) = session.wide(span) {
            return Stored::Wide(wide.units());
        }
        let raw = session.raw(span);
        if span.is_escaped() {
            Stored::Escaped(raw)
        } else {
            Stored::Plain(raw)
        }
    }

    fn push_all(&self, out: &mut impl Output<'a>) {
        match self {
            Stored::Plain(text) => out.push_str(text),
            Stored::Escaped(raw) => unescape::push_from(raw, 0, out.text()),
            Stored::Wide(units) => out.push_units(*units),
        }
    }
}

impl<'a> Cuttable<'a> for Stored<'a> {
    fn push_prefix(&self, n: usize, out: &mut impl Output<'a>) {
        match self {
            Stored::Plain(text) => text.push_prefix(n, out),
            Stored::Escaped(raw) => unescape::push_prefix(raw, n, out.text()),
            Stored::Wide(units) => out.push_units(units.slice(0, n)),
        }
    }
    fn push_suffix(&self, n: usize, out: &mut impl Output<'a>) {
        match self {
            Stored::Plain(text) => text.push_suffix(n, out),
            Stored::Escaped(raw) => unescape::push_suffix(raw, n, out.text()),
            Stored::Wide(units) => {
                out.push_units(units.slice(units.len().saturating_sub(n), units.len()))
            }
        }
    }
}

fn tool_line<'s, O: Out<'s>>(session: &'s Session, call: &ToolCall, limit: usize, out: &mut O) {
    out.text("[Tool: ");
    out.text(session.short(call.name));
    out.text("]");
    if let Some(input) = call.input {
        out.text(" ");
        out.preview(session, input, limit);
    }
}

/// Write or measure a message body (every line after the label, each led by `"\n"`).
/// `results` are this message's results, in part order.
pub fn body<'s, O: Out<'s>>(
    session: &'s Session,
    message: &Message,
    results: &[ResultPlan],
    config: &Config,
    out: &mut O,
) {
    let parts = session.parts_of(message);
    let legacy = legacy_tiers(parts, results);
    let mut next = 0;
    for (p, part) in parts.iter().enumerate() {
        match part {
            Part::Text(span) => {
                out.text("\n");
                out.span(session, *span);
            }
            Part::Tool(call) => {
                let result = if call.result.is_some() {
                    let plan = results.get(next);
                    next += 1;
                    plan
                } else {
                    None
                };
                let tier = if !call.legacy {
                    result.map(|r| r.tier)
                } else {
                    legacy
                        .as_ref()
                        .and_then(|tiers| tiers.get(p).copied().flatten())
                };
                out.text("\n");
                tool_line(session, call, config.params_limit(tier.unwrap_or(1)), out);
                if let Some(plan) = result {
                    out.text("\n");
                    out.text(RESULT_HEADER);
                    out.result(session, plan, config);
                }
            }
            Part::ToolResult { .. } => {
                if let Some(plan) = results.get(next) {
                    out.text("\n");
                    out.text(RESULT_HEADER);
                    out.result(session, plan, config);
                }
                next += 1;
            }
        }
    }
    if let Some(line) = &message.error_line {
        out.text("\n");
        out.text(line);
    }
}

/// For each legacy `tool` part (no `state.status`), the tier of the next `tool_result` in its message.
fn legacy_tiers(parts: &[Part], results: &[ResultPlan]) -> Option<Vec<Option<u8>>> {
    let has_legacy = parts
        .iter()
        .any(|part| matches!(part, Part::Tool(call) if call.legacy));
    if !has_legacy {
        return None;
    }
    let mut tiers = vec![None; parts.len()];
    let mut remaining = results.len();
    let mut next_tier = None;
    for (p, part) in parts.iter().enumerate().rev() {
        match part {
            Part::ToolResult { .. } => {
                remaining = remaining.saturating_sub(1);
                next_tier = results.get(remaining).map(|r| r.tier);
            }
            Part::Tool(call) => {
                if call.result.is_some() {
                    remaining = remaining.saturating_sub(1);
                }
                if call.legacy {
                    if let Some(slot) = tiers.get_mut(p) {
                        *slot = next_tier;
                    }
                }
            }
            Part::Text(_) => {}
        }
    }
    Some(tiers)
}

/// How many results a message has.
pub fn result_count(parts: &[Part]) -> usize {
    parts
        .iter()
        .filter(|part| match part {
            Part::Tool(call) => call.result.is_some(),
            Part::ToolResult { .. } => true,
            Part::Text(_) => false,
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(label(Some("user")), "User");
        assert_eq!(label(Some("assistant")), "Agent");
        assert_eq!(label(None), "Unknown");
        assert_eq!(label(Some("")), "Unknown");
        assert_eq!(label(Some("system")), "System");
        assert_eq!(label(Some("ßx")), "SSx");
    }
}
