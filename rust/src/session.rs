//! The internal session: messages reduced to what the pipeline reads. Large strings (texts,
//! tool outputs, parameters) are spans into source buffers: the caller's JSON bytes/str, kept
//! alive and never copied, or the caller's Python strings themselves, kept alive: ASCII ones
//! borrowed as UTF-8, the others in their own layout (`WideStr`), plus a small arena.

use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyString;
use pyo3::{Py, PyAny};

use crate::errors::Loc;
use crate::units::Units;
use crate::utf8::Utf8Bytes;

/// Where the spans of a session point.
pub enum Source {
    /// JSON bytes, checked to be UTF-8.
    Bytes(Utf8Bytes),
    /// A JSON `str`.
    Str(PyBackedStr),
    /// Walked Python objects: buffer 0 is `owned` (strings past the last buffer number),
    /// buffer `k >= 1` is `strings[k - 1]`, a string of the objects, never copied; `inputs`
    /// holds the checked `state.input` values, dumped only when a render shows them.
    Objects {
        owned: String,
        strings: Vec<KeptStr>,
        /// the strings of the objects that are not ASCII (spans of kind `Wide`)
        wide: Vec<WideStr>,
        /// the `wide` strings that may hold a lone surrogate, in walk order: checked by the
        /// renders, as far as they write them (`surrogates.rs`)
        unchecked: Vec<Unchecked>,
        inputs: Vec<Py<PyAny>>,
    },
}

/// A string of `Source::Objects::wide` that may hold a lone surrogate (two or four bytes a
/// code point): which one, and where the walk read it. Only what a render writes of it is
/// checked (`surrogates.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Unchecked {
    pub wide: usize,
    pub loc: Loc,
    pub key: &'static str,
}

/// A Python `str` kept by a session and read as the UTF-8 it holds: an ASCII one (its
/// characters are their own UTF-8), or one whose UTF-8 form CPython has made and keeps.
pub struct KeptStr {
    _owner: Py<PyString>,
    data: *const u8,
    len: usize,
}

// SAFETY: `data` points into the `str` that `_owner` keeps alive (its characters, or the UTF-8
// form CPython keeps with it until it is freed), which never change; nothing is written
// through it. Reading it needs no GIL.
unsafe impl Send for KeptStr {}
// SAFETY: as for `Send`: shared access only ever reads immutable data.
unsafe impl Sync for KeptStr {}

impl KeptStr {
    /// # Safety
    /// `data` and `len` must be those of the characters of `owner` (ASCII) or of the UTF-8
    /// form CPython keeps on it.
    pub unsafe fn new(owner: Py<PyString>, data: *const u8, len: usize) -> Self {
        Self {
            _owner: owner,
            data,
            len,
        }
    }
}

impl std::ops::Deref for KeptStr {
    type Target = str;
    fn deref(&self) -> &str {
        // SAFETY: see `new`: `len` bytes of UTF-8, alive as long as `_owner`, which `self`
        // holds.
        unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(self.data, self.len)) }
    }
}

/// A Python `str` that is not ASCII, kept in its own layout: one, two or four bytes per code
/// point (PEP 393), each unit one code point. Its UTF-8 form would cost a full encode (and a
/// copy cached on the object) although most outputs are only searched and counted, never
/// written: the render encodes just what it writes.
pub struct WideStr {
    _owner: Py<PyString>,
    data: *const u8,
    units: usize,
    width: usize,
}

// SAFETY: `data` points into the `str` that `_owner` keeps alive, whose characters never
// change after creation; nothing is written through it. Reading it needs no GIL.
unsafe impl Send for WideStr {}
// SAFETY: as for `Send`: shared access only ever reads immutable data.
unsafe impl Sync for WideStr {}

impl WideStr {
    /// # Safety
    /// `units` must be the code units of `owner` (a `str`, which never changes them).
    pub unsafe fn new(owner: Py<PyString>, units: Units<'_>) -> Self {
        let (data, count, width) = match units {
            Units::One(u) => (u.as_ptr(), u.len(), 1),
            Units::Two(u) => (u.as_ptr().cast::<u8>(), u.len(), 2),
            Units::Four(u) => (u.as_ptr().cast::<u8>(), u.len(), 4),
        };
        Self {
            _owner: owner,
            data,
            units: count,
            width,
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// The units as bytes (native order), for searching.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: see `new`: `units * width` readable bytes (the units of a slice), alive as
        // long as `_owner`, which `self` holds.
        unsafe { std::slice::from_raw_parts(self.data, self.units * self.width) }
    }

    pub fn units(&self) -> Units<'_> {
        // SAFETY: see `new`: `units` units of `width` bytes, aligned (they were a slice), alive
        // as long as `_owner`, which `self` holds.
        unsafe {
            match self.width {
                1 => Units::One(std::slice::from_raw_parts(self.data, self.units)),
                2 => Units::Two(std::slice::from_raw_parts(self.data.cast(), self.units)),
                _ => Units::Four(std::slice::from_raw_parts(self.data.cast(), self.units)),
            }
        }
    }
}

impl Source {
    /// The text of buffer `buf` (see [`Span::buf`]); empty when there is no such buffer.
    pub fn text(&self, buf: u32) -> &str {
        match self {
            Source::Bytes(bytes) if buf == 0 => bytes.as_str(),
            Source::Str(s) if buf == 0 => s,
            Source::Objects { owned, .. } if buf == 0 => owned,
            Source::Objects { strings, .. } => (buf as usize)
                .checked_sub(1)
                .and_then(|k| strings.get(k))
                .map_or("", |s| s),
            _ => "",
        }
    }
}

/// How the text of a span is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// The text itself.
    Plain,
    /// The inside of a JSON string literal that has backslash escapes, none of them `\uXXXX`.
    Escaped,
    /// The inside of a JSON string literal with `\uXXXX` escapes.
    EscapedUnicode,
    /// A walked Python string that is not ASCII: `buf` indexes `Source::Objects::wide`,
    /// `start..end` are code points (all of it).
    Wide,
    /// A JSON value as written in the document (`state.input` from bytes/str).
    RawJson,
    /// A `state.input` of walked objects, checked but not dumped: `start` indexes
    /// `Source::Objects::inputs` (see `params.rs`).
    PyInput,
}

/// A byte range of one buffer of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    /// code points of the text (unescaped for Escaped); unused for parameter JSON
    pub chars: usize,
    pub kind: SpanKind,
    /// Which buffer: 0 for the JSON document (or the arena of walked objects), `k >= 1` for
    /// the `k`-th Python string kept by a walk.
    pub buf: u32,
}

impl Span {
    /// A JSON string literal's inside, to be decoded.
    pub fn is_escaped(&self) -> bool {
        matches!(self.kind, SpanKind::Escaped | SpanKind::EscapedUnicode)
    }

    pub const EMPTY: Span = Span {
        start: 0,
        end: 0,
        chars: 0,
        kind: SpanKind::Plain,
        buf: 0,
    };

    /// A span of buffer 0.
    pub const fn new(start: usize, end: usize, chars: usize, kind: SpanKind) -> Span {
        Span {
            start,
            end,
            chars,
            kind,
            buf: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// A short string of a session (role, id, tool name): where its text lies in the session's
/// `Shorts`. Reading a message copies its short strings one after the other into one buffer;
/// the records hold these two numbers, which move in registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short {
    start: usize,
    len: usize,
}

impl Short {
    /// `""`
    pub const EMPTY: Short = Short { start: 0, len: 0 };
    /// `"unknown"`, the name of a tool part with neither `tool` nor `name` (every `Shorts`
    /// starts with it)
    pub const UNKNOWN: Short = Short { start: 0, len: 7 };

    pub fn is_empty(self) -> bool {
        self.len == 0
    }
}

/// The short strings of a session, one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shorts(String);

impl Default for Shorts {
    fn default() -> Self {
        Shorts(String::from("unknown"))
    }
}

impl Shorts {
    pub fn push(&mut self, s: &str) -> Short {
        let start = self.0.len();
        self.0.push_str(s);
        Short {
            start,
            len: s.len(),
        }
    }

    /// The text of `s` (`""` for a `Short` of another session that does not fit here).
    pub fn get(&self, s: Short) -> &str {
        self.0.get(s.start..s.start + s.len).unwrap_or("")
    }

    /// Forget every string but `"unknown"`.
    pub fn clear(&mut self) {
        self.0.truncate(Short::UNKNOWN.len);
    }
}

/// A `tool` part.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// display name: `tool`, else `name`, else `unknown`
    pub name: Short,
    /// a legacy call: no `state.status` (or no state at all); its parameters take the tier of
    /// the next `tool_result` of its message
    pub legacy: bool,
    /// `state.input` (RawJson or PyInput), when present
    pub input: Option<Span>,
    pub status_error: bool,
    /// result text (Plain/Escaped), when completed or error
    pub result: Option<Span>,
    pub compacted: bool,
}

/// What the pipeline reads of one part.
#[derive(Debug, Clone)]
pub enum Part {
    /// a `text` part with non-empty text, not ignored
    Text(Span),
    Tool(ToolCall),
    /// a legacy `tool_result` part with non-empty text
    ToolResult {
        name: Short,
        text: Span,
    },
}

/// One message reduced to what the pipeline reads.
#[derive(Debug, Clone, Default)]
pub struct Message {
    pub role: Option<Short>,
    pub id: Option<Short>,
    pub parent_id: Option<Short>,
    pub summary: bool,
    /// `tail_start_id` of each `compaction` part of a user message
    pub markers: Vec<Option<String>>,
    /// the rendered `[Error: …]` line of an assistant message
    pub error_line: Option<String>,
    /// its parts: a range of `Session::parts`
    pub parts: std::ops::Range<usize>,
}

/// A parsed session: its messages and the buffer their spans point into.
pub struct Session {
    pub source: Source,
    pub messages: Vec<Message>,
    /// the parts of every message, in order
    pub parts: Vec<Part>,
    /// the text of every `Short` of its messages and parts
    pub shorts: Shorts,
}

impl Session {
    /// The text of a short string of this session.
    pub fn short(&self, s: Short) -> &str {
        self.shorts.get(s)
    }

    /// A message's `info.role`, if it has one.
    pub fn role(&self, message: &Message) -> Option<&str> {
        message.role.map(|r| self.short(r))
    }

    /// The parts of `message`.
    pub fn parts_of(&self, message: &Message) -> &[Part] {
        self.parts.get(message.parts.clone()).unwrap_or(&[])
    }

    /// The raw bytes of a span (for Escaped: still escaped; empty for Wide, see `wide`).
    pub fn raw(&self, span: Span) -> &str {
        if span.kind == SpanKind::Wide {
            return "";
        }
        self.source
            .text(span.buf)
            .get(span.start..span.end)
            .unwrap_or("")
    }

    /// The walked strings that may hold a lone surrogate, in walk order (none from JSON).
    pub fn unchecked(&self) -> &[Unchecked] {
        match &self.source {
            Source::Objects { unchecked, .. } => unchecked,
            _ => &[],
        }
    }

    /// The Python string of a `Wide` span.
    pub fn wide(&self, span: Span) -> Option<&WideStr> {
        match &self.source {
            Source::Objects { wide, .. } if span.kind == SpanKind::Wide => {
                wide.get(span.buf as usize)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_keep_their_text() {
        let mut shorts = Shorts::default();
        assert_eq!(shorts.get(Short::UNKNOWN), "unknown");
        assert_eq!(shorts.get(Short::EMPTY), "");
        let texts = ["", "user", "msg_01JABCDEFGHJKMNPQRSTVWXYZ", &"é".repeat(19)];
        let kept: Vec<Short> = texts.iter().map(|t| shorts.push(t)).collect();
        for (text, short) in texts.iter().zip(&kept) {
            assert_eq!(shorts.get(*short), *text);
            assert_eq!(short.is_empty(), text.is_empty());
        }
        shorts.clear();
        assert_eq!(shorts.get(Short::UNKNOWN), "unknown");
        assert_eq!(shorts.get(kept[2]), "");
    }
}
