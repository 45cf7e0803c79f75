//! Tool parameters as the JSON text a preview shows, dumped while a render measures the
//! messages, as far as the preview of the call's tier needs and no further. From JSON, a
//! call's `state.input` is a slice of the document, re-dumped in Python's format. From Python
//! objects it was only checked during the walk: it is dumped here, with the GIL held. A long
//! session has far more calls than the budget keeps, so the others cost nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::errors::Failure;
use crate::json::dump::{dump_raw, Limited};
use crate::session::{Session, Span, SpanKind};

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

/// What one input's preview text holds: `arena[start..end]`, the first `chars` characters of
/// its JSON, which is all of it when `whole`.
#[derive(Debug, Clone, Copy)]
struct Dumped {
    start: usize,
    end: usize,
    chars: usize,
    whole: bool,
}

/// The parameter text of one render, by input (`Span::start`: an index into the walked inputs,
/// or an offset into the document), dumped once, as far as the longest preview of it needs,
/// with its length in characters, so that neither the measure nor the writer dumps or counts
/// it again.
#[derive(Default)]
pub struct Params {
    arena: String,
    dumped: HashMap<usize, Dumped, BuildHasherDefault<IndexHasher>>,
}

impl Params {
    /// Make the first `chars` characters of `input`'s JSON ready (all of it when shorter),
    /// unless an earlier preview of the same input made as many; the characters made.
    pub fn prepare(
        &mut self,
        session: &Session,
        input: Span,
        chars: usize,
        dumper: &mut dyn DumpInput,
    ) -> Result<usize, Failure> {
        if let Some(done) = self.dumped.get(&input.start) {
            if done.whole || done.chars >= chars {
                return Ok(done.chars);
            }
        }
        let start = self.arena.len();
        let mut sink = Limited::new(Some(&mut self.arena), chars);
        // A full sink only means the preview has all it needs.
        match input.kind {
            SpanKind::PyInput => dumper.dump(input.start, &mut sink)?,
            SpanKind::RawJson => {
                let _ = dump_raw(session.raw(input), &mut sink);
            }
            _ => {
                let _ = sink.push_str(session.raw(input));
            }
        }
        let taken = sink.chars();
        let dumped = Dumped {
            start,
            end: self.arena.len(),
            chars: taken,
            whole: taken < chars,
        };
        self.dumped.insert(input.start, dumped);
        Ok(taken)
    }

    /// The text `prepare` made for `input` and its length in characters.
    pub fn get(&self, input: Span) -> (&str, usize) {
        self.dumped
            .get(&input.start)
            .and_then(|done| Some((self.arena.get(done.start..done.end)?, done.chars)))
            .unwrap_or(("", 0))
    }
}
