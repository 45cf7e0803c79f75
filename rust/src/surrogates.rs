//! The lone surrogate check of walked objects' long texts, as far as a render writes them.
//!
//! A Python `str` of two or four bytes a code point may hold a lone surrogate, which no UTF-8
//! can carry. Only what the context writes is read for it: the messages it shows (in context
//! order), a text part whole, a result as its tier cut it, and the one message a hard cap
//! cuts as its block was before the cut. A history the budget or compaction drops, and the
//! part of an output a cut drops, are never written and never read here.

use crate::config::Config;
use crate::errors::{InputError, LONE_SURROGATE};
use crate::output::Output;
use crate::params::Params;
use crate::session::{Message, Session, Span, SpanKind};
use crate::tiers::ResultPlan;
use crate::transcript::{body, Out, Write};
use crate::units::Units;

/// The first lone surrogate written by the bodies of `shown` (each a message and its result
/// plans, in context order), reported at the field its text was read from; each body is
/// probed in part order. Only messages that hold a walked string that may hold one are read.
pub fn check_written<'s, 'm>(
    session: &'s Session,
    shown: impl IntoIterator<Item = (usize, &'m Message, &'m [ResultPlan])>,
    config: &Config,
) -> Result<(), InputError> {
    let unchecked = session.unchecked();
    if unchecked.is_empty() {
        return Ok(());
    }
    let mut probe = Probe::default();
    for (m, message, results) in shown {
        let first = unchecked.partition_point(|u| u.loc.message() < m);
        if unchecked.get(first).is_none_or(|u| u.loc.message() != m) {
            continue;
        }
        body(session, message, results, config, &mut probe);
        if let Some(wide) = probe.fault {
            let found = unchecked.iter().find(|u| u.wide == wide);
            let path = found.map_or_else(|| "messages".to_owned(), |u| u.loc.path(Some(u.key)));
            return Err(InputError::new(path, LONE_SURROGATE));
        }
    }
    Ok(())
}

/// Follows a body as the writer writes it, reading only the code units of walked strings; the
/// first that holds a lone surrogate is noted by its index in the session's `wide` strings.
#[derive(Default)]
struct Probe {
    fault: Option<usize>,
    units: UnitsCheck,
    /// no parameters are written here (they were checked during the walk)
    params: Params,
}

impl Probe {
    /// Write `span` (or its cut) to the check, if it is a walked string that may hold one.
    fn probe(&mut self, span: Span, write: impl FnOnce(&mut Write<'_, UnitsCheck>)) {
        if self.fault.is_some() || span.kind != SpanKind::Wide {
            return;
        }
        write(&mut Write {
            out: &mut self.units,
            params: &self.params,
        });
        if std::mem::take(&mut self.units.found) {
            self.fault = Some(span.buf as usize);
        }
    }
}

impl<'s> Out<'s> for Probe {
    fn text(&mut self, _: &str) {}
    fn preview(&mut self, _: &'s Session, _: Span, _: usize) {}
    fn span(&mut self, session: &'s Session, span: Span) {
        self.probe(span, |write| write.span(session, span));
    }
    fn result(&mut self, session: &'s Session, plan: &ResultPlan, config: &Config) {
        self.probe(plan.text, |write| write.result(session, plan, config));
    }
}

/// An output that keeps nothing: whether any code unit written is a surrogate.
#[derive(Default)]
struct UnitsCheck {
    found: bool,
    /// where text goes, cleared each time (only units are checked)
    scratch: String,
}

impl<'s> Output<'s> for UnitsCheck {
    fn text(&mut self) -> &mut String {
        self.scratch.clear();
        &mut self.scratch
    }
    fn push_str(&mut self, _: &str) {}
    fn push_units(&mut self, units: Units<'s>) {
        self.found = self.found || units.has_surrogate();
    }
}
