//! Tool parameters as the JSON text a preview shows. From JSON, a call's `state.input` is a
//! slice of the document, re-dumped in Python's format while it is written. From Python
//! objects it was only checked during the walk: it is dumped here, for the messages a render
//! measures, and never further than the longest preview needs. A long session has far more
//! calls than the budget keeps, so the others cost nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::errors::Failure;
use crate::json::dump::{dump_raw, Limited};
use crate::session::{Message, Part, Session, Span, SpanKind};

/// Dumps the checked `state.input` values of walked objects (Python's compact JSON).
pub trait DumpInput {
    /// Dump input `index` into `sink`; a full sink ends the dump early, without error.
    fn dump(&mut self, index: usize, sink: &mut Limited<'_>) -> Result<(), Failure>;
}

/// For sessions read from JSON: their inputs are raw JSON, nothing to dump.
pub struct NoObjects;

impl DumpInput for NoObjects {
    fn dump(&mut self, _: usize, _: &mut Limited<'_>) -> Result<(), Failure> {
        Ok(())
    }
}

/// Hashes an input index as itself: the keys are small distinct integers.
#[derive(Default)]
struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

/// The parameter text of one render: input index → a range of `arena`.
#[derive(Default)]
pub struct Params {
    arena: String,
    dumped: HashMap<usize, (usize, usize), BuildHasherDefault<IndexHasher>>,
}

impl Params {
    /// Dump every `PyInput` of `message` not dumped yet, `chars` characters at most each.
    pub fn prepare(
        &mut self,
        session: &Session,
        message: &Message,
        chars: usize,
        dumper: &mut dyn DumpInput,
    ) -> Result<(), Failure> {
        for part in session.parts_of(message) {
            let Part::Tool(call) = part else { continue };
            let Some(input) = call.input.filter(|i| i.kind == SpanKind::PyInput) else {
                continue;
            };
            if self.dumped.contains_key(&input.start) {
                continue;
            }
            let start = self.arena.len();
            dumper.dump(input.start, &mut Limited::new(Some(&mut self.arena), chars))?;
            self.dumped.insert(input.start, (start, self.arena.len()));
        }
        Ok(())
    }

    /// Write the parameter JSON of `input` into `sink` (until it is full).
    pub fn write(&self, session: &Session, input: Span, sink: &mut Limited<'_>) {
        // A full sink only means the preview has all it needs.
        let _ = match input.kind {
            SpanKind::RawJson => dump_raw(session.raw(input), sink),
            SpanKind::PyInput => {
                let text = self
                    .dumped
                    .get(&input.start)
                    .and_then(|&(start, end)| self.arena.get(start..end))
                    .unwrap_or("");
                sink.push_str(text)
            }
            _ => sink.push_str(session.raw(input)),
        };
    }
}
