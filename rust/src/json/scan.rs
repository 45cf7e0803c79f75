//! One pass over a whole JSON document: it checks the syntax exactly as `json.loads` accepts it
//! (minus `NaN`/`Infinity`, lone surrogate escapes and integers past Python's 4300 digits),
//! measures the nesting, and records, for the objects at the places the pipeline reads (the
//! message list, `info`, `parts`, `state`, ...), the values of the keys it reads. Everything
//! else is skipped. Strings are scanned 64 bytes at a time (`literal.rs`) and their code points
//! counted on the way, so a large tool output costs one pass and is never copied.

use super::literal;
use crate::errors::{self as e, InputError};

/// Nesting at which `json.loads` gives up with a RecursionError (about Python's recursion
/// limit), which the reference reports as the nesting error: syntax errors past that point are
/// never seen.
pub const RUNAWAY_DEPTH: usize = 1000;

/// Python's default `sys.get_int_max_str_digits()`.
const PYTHON_INT_MAX_DIGITS: usize = 4300;

/// A string literal: the byte range of its inside, its length in code points once decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Str {
    pub start: u32,
    pub end: u32,
    pub chars: u32,
    pub escaped: bool,
    /// has `\uXXXX` escapes (which may spell any character)
    pub unicode: bool,
}

/// A recorded value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Val {
    /// absent or `null`
    #[default]
    Absent,
    Bool(bool),
    Number,
    Str(Str),
    /// an object read field by field: its node
    Obj(u32),
    /// an array read item by item: its items
    Arr {
        start: u32,
        len: u32,
    },
    /// a container the pipeline does not look into here
    Other,
    /// a `state.input` value as written, and whether it nests deeper than 64 levels
    Raw {
        start: u32,
        end: u32,
        deep: bool,
    },
}

/// Fields per object node (the most any object the pipeline reads has: a part's).
pub const SLOTS: usize = 7;

/// What the value at a position is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    Skip,
    Top,
    Export,
    Messages,
    Message,
    Info,
    Error,
    Data,
    Parts,
    Part,
    State,
    Time,
    Input,
}

impl Schema {
    fn is_object(self) -> bool {
        matches!(
            self,
            Schema::Export
                | Schema::Message
                | Schema::Info
                | Schema::Error
                | Schema::Data
                | Schema::Part
                | Schema::State
                | Schema::Time
        )
    }
}

/// The slot and the schema of key `key` in an object read as `schema`.
pub fn slot(schema: Schema, key: &[u8]) -> Option<(usize, Schema)> {
    use Schema as S;
    Some(match (schema, key) {
        (S::Export, b"messages") => (0, S::Messages),
        (S::Message, b"info") => (0, S::Info),
        (S::Message, b"parts") => (1, S::Parts),
        (S::Info, b"role") => (0, S::Skip),
        (S::Info, b"id") => (1, S::Skip),
        (S::Info, b"parentID") => (2, S::Skip),
        (S::Info, b"summary") => (3, S::Skip),
        (S::Info, b"error") => (4, S::Error),
        (S::Error, b"name") => (0, S::Skip),
        (S::Error, b"data") => (1, S::Data),
        (S::Data, b"message") => (0, S::Skip),
        (S::Part, b"type") => (0, S::Skip),
        (S::Part, b"text") => (1, S::Skip),
        (S::Part, b"ignored") => (2, S::Skip),
        (S::Part, b"tool") => (3, S::Skip),
        (S::Part, b"name") => (4, S::Skip),
        (S::Part, b"tail_start_id") => (5, S::Skip),
        (S::Part, b"state") => (6, S::State),
        (S::State, b"status") => (0, S::Skip),
        (S::State, b"input") => (1, S::Input),
        (S::State, b"output") => (2, S::Skip),
        (S::State, b"error") => (3, S::Skip),
        (S::State, b"time") => (4, S::Time),
        (S::Time, b"compacted") => (0, S::Skip),
        _ => return None,
    })
}

/// The recorded objects and arrays of the message being scanned.
#[derive(Default)]
pub struct Doc {
    pub nodes: Vec<[Val; SLOTS]>,
    pub items: Vec<Val>,
}

/// Receives each message of the message list as soon as it is scanned (while its bytes are
/// still in cache); its records are dropped right after.
pub trait OnMessage {
    /// A message list starts (an export document may have several `messages` keys: the last
    /// one counts, so each start forgets the messages before).
    fn start(&mut self);
    fn message(&mut self, doc: &Doc, value: Val, index: usize);
}

/// Why a scan stopped.
#[derive(Clone, Copy)]
enum Stop {
    Syntax(&'static str, usize),
    TooDeep,
}

/// A scan stopped: the reason is in `Scanner::stopped`. Zero-sized, so a step's result is no
/// larger than its value and comes back in registers (a `Stop` in it made every result go
/// through memory, and reading a returned `Val` back stalled on the stores that wrote it).
struct Halt;

struct Scanner<'a, M> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    max_depth: usize,
    doc: Doc,
    scratch: Vec<Val>,
    sink: &'a mut M,
    /// why the scan stopped, once it has
    stopped: Option<Stop>,
}

type Res<T> = Result<T, Halt>;

impl<M: OnMessage> Scanner<'_, M> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn fail<T>(&mut self, what: &'static str) -> Res<T> {
        self.stop(Stop::Syntax(what, self.i))
    }

    #[cold]
    fn stop<T>(&mut self, why: Stop) -> Res<T> {
        self.stopped = Some(why);
        Err(Halt)
    }

    /// Just after `[` or `{`: whether `close` follows at once (then it is consumed).
    fn closes_at_once(&mut self, close: u8) -> bool {
        self.ws();
        let empty = self.peek() == Some(close);
        if empty {
            self.i += 1;
        }
        empty
    }

    /// After an item of an array or object: `true` at a `,` (another item follows), `false` at
    /// `close` (consumed: the container ends).
    fn next_item(&mut self, close: u8) -> Res<bool> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(false)
            }
            _ if close == b'}' => self.fail("expecting ',' or '}'"),
            _ => self.fail("expecting ',' or ']'"),
        }
    }

    fn open(&mut self) -> Res<()> {
        self.depth += 1;
        if self.depth >= RUNAWAY_DEPTH {
            return self.stop(Stop::TooDeep);
        }
        self.max_depth = self.max_depth.max(self.depth);
        self.i += 1;
        Ok(())
    }

    /// A string literal at `self.i` (its opening quote).
    #[inline(always)]
    fn string(&mut self) -> Res<Str> {
        let start = self.i + 1;
        match literal::scan(self.b, start) {
            Ok(found) => {
                self.i = found.end + 1;
                Ok(Str {
                    start: start as u32,
                    end: found.end as u32,
                    chars: u32::try_from(found.chars).unwrap_or(u32::MAX),
                    escaped: found.escaped,
                    unicode: found.unicode,
                })
            }
            Err((what, at)) => {
                self.i = at;
                self.fail(what)
            }
        }
    }

    fn literal(&mut self, word: &'static [u8], val: Val) -> Res<Val> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(val)
        } else {
            self.fail("expecting a value")
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - from
    }

    fn number(&mut self) -> Res<Val> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let int_digits = match self.peek() {
            Some(b'0') => {
                self.i += 1;
                1
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return self.fail("expecting a value"),
        };
        let mut integer = true;
        if self.peek() == Some(b'.') && matches!(self.b.get(self.i + 1), Some(b'0'..=b'9')) {
            self.i += 1;
            self.digits();
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            let mut at = self.i + 1;
            if let Some(b'+' | b'-') = self.b.get(at) {
                at += 1;
            }
            if let Some(b'0'..=b'9') = self.b.get(at) {
                self.i = at;
                self.digits();
                integer = false;
            }
        }
        if integer && int_digits > PYTHON_INT_MAX_DIGITS {
            return self.fail("integer literal longer than 4300 digits");
        }
        Ok(Val::Number)
    }

    fn value(&mut self, schema: Schema) -> Res<Val> {
        self.ws();
        match self.peek() {
            Some(b'{') => {
                let schema = match schema {
                    Schema::Top => Schema::Export,
                    s if s.is_object() => s,
                    _ => Schema::Skip,
                };
                self.object(schema)
            }
            Some(b'[') => match schema {
                Schema::Top | Schema::Messages => self.message_list(),
                Schema::Parts => self.array(Some(Schema::Part)),
                _ => self.array(None),
            },
            Some(b'"') => self.string().map(Val::Str),
            Some(b't') => self.literal(b"true", Val::Bool(true)),
            Some(b'f') => self.literal(b"false", Val::Bool(false)),
            Some(b'n') => self.literal(b"null", Val::Absent),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => self.fail("expecting a value"),
        }
    }

    fn input(&mut self) -> Res<Val> {
        self.ws();
        let start = self.i;
        let entry = self.depth;
        let outer = self.max_depth;
        self.max_depth = entry;
        self.value(Schema::Skip)?;
        let deep = self.max_depth - entry > e::MAX_INPUT_DEPTH;
        self.max_depth = self.max_depth.max(outer);
        Ok(Val::Raw {
            start: start as u32,
            end: self.i as u32,
            deep,
        })
    }

    fn object(&mut self, schema: Schema) -> Res<Val> {
        self.open()?;
        let node = if schema == Schema::Skip {
            None
        } else {
            self.doc.nodes.push([Val::Absent; SLOTS]);
            Some(self.doc.nodes.len() - 1)
        };
        if !self.closes_at_once(b'}') {
            loop {
                self.ws();
                if self.peek() != Some(b'"') {
                    return self.fail("expecting a property name in double quotes");
                }
                let key = self.string()?;
                self.ws();
                if self.peek() != Some(b':') {
                    return self.fail("expecting ':'");
                }
                self.i += 1;
                let found = match node {
                    None => None,
                    Some(_) => {
                        let raw = self
                            .b
                            .get(key.start as usize..key.end as usize)
                            .unwrap_or(&[]);
                        if key.escaped {
                            let text = std::str::from_utf8(raw).unwrap_or("");
                            slot(schema, super::unescape::unescape(text).as_bytes())
                        } else {
                            slot(schema, raw)
                        }
                    }
                };
                let value = match found {
                    Some((_, Schema::Input)) => self.input()?,
                    Some((_, child)) => self.value(child)?,
                    None => self.value(Schema::Skip)?,
                };
                if let (Some(n), Some((at, _))) = (node, found) {
                    if let Some(place) = self.doc.nodes.get_mut(n).and_then(|s| s.get_mut(at)) {
                        *place = value;
                    }
                }
                if !self.next_item(b'}')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Ok(node.map_or(Val::Other, |n| Val::Obj(n as u32)))
    }

    /// The message list: each message goes to the sink, then its records are dropped.
    fn message_list(&mut self) -> Res<Val> {
        self.open()?;
        self.sink.start();
        let (nodes, items) = (self.doc.nodes.len(), self.doc.items.len());
        let mut index = 0;
        if !self.closes_at_once(b']') {
            loop {
                let value = self.value(Schema::Message)?;
                self.sink.message(&self.doc, value, index);
                self.doc.nodes.truncate(nodes);
                self.doc.items.truncate(items);
                index += 1;
                if !self.next_item(b']')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Ok(Val::Arr { start: 0, len: 0 })
    }

    fn array(&mut self, item: Option<Schema>) -> Res<Val> {
        self.open()?;
        let mark = self.scratch.len();
        if !self.closes_at_once(b']') {
            loop {
                let value = self.value(item.unwrap_or(Schema::Skip))?;
                if item.is_some() {
                    self.scratch.push(value);
                }
                if !self.next_item(b']')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        if item.is_none() {
            return Ok(Val::Other);
        }
        let start = self.doc.items.len();
        self.doc.items.extend(self.scratch.drain(mark..));
        Ok(Val::Arr {
            start: start as u32,
            len: (self.doc.items.len() - start) as u32,
        })
    }
}

/// Scan a whole document, handing each message of its message list to `sink`. Returns whether
/// the document has a message list (an array, or an export object with a `messages` array).
/// Errors have path `json`.
pub fn scan<M: OnMessage>(text: &str, sink: &mut M) -> Result<bool, InputError> {
    if u32::try_from(text.len()).is_err() {
        return Err(InputError::json(
            "invalid JSON: documents of 4 GiB or more are not supported",
        ));
    }
    let mut s = Scanner {
        b: text.as_bytes(),
        i: 0,
        depth: 0,
        max_depth: 0,
        doc: Doc::default(),
        scratch: Vec::new(),
        sink,
        stopped: None,
    };
    let top = s.value(Schema::Top).and_then(|top| {
        s.ws();
        if s.i < s.b.len() {
            s.fail("extra data")
        } else {
            Ok(top)
        }
    });
    match top.map_err(|Halt| s.stopped) {
        Err(Some(Stop::Syntax(what, at))) => Err(InputError::json(format!(
            "invalid JSON: {what} at byte {at}"
        ))),
        Err(Some(Stop::TooDeep)) => Err(InputError::json(e::DOCUMENT_TOO_DEEP)),
        // every `Halt` comes with its reason (`stop`)
        Err(None) => Err(InputError::json("invalid JSON")),
        Ok(_) if s.max_depth > e::MAX_DOCUMENT_DEPTH => Err(InputError::json(e::DOCUMENT_TOO_DEEP)),
        Ok(Val::Arr { .. }) => Ok(true),
        Ok(Val::Obj(node)) => Ok(matches!(
            s.doc.nodes.get(node as usize).and_then(|n| n.first()),
            Some(Val::Arr { .. })
        )),
        Ok(_) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nest(n: usize) -> String {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
    }

    /// Keeps the first message's `info.role` slot.
    #[derive(Default)]
    struct Roles(Vec<Val>, Vec<Val>);

    impl OnMessage for Roles {
        fn start(&mut self) {
            self.0.clear();
        }
        fn message(&mut self, doc: &Doc, value: Val, _: usize) {
            self.0.push(value);
            if let Val::Obj(m) = value {
                if let Val::Obj(info) = doc.nodes[m as usize][0] {
                    self.1.push(doc.nodes[info as usize][0]);
                }
            }
        }
    }

    fn scan(text: &str) -> Result<bool, InputError> {
        super::scan(text, &mut Roles::default())
    }

    fn detail(text: &str) -> String {
        scan(text).err().map(|e| e.detail).unwrap_or_default()
    }

    #[test]
    fn depth_limit_is_exactly_128() {
        let ok = format!("[{{\"info\":{{}},\"parts\":[],\"x\":{}}}]", nest(126));
        assert!(scan(&ok).is_ok());
        let deep = format!("[{{\"info\":{{}},\"parts\":[],\"x\":{}}}]", nest(127));
        assert_eq!(detail(&deep), "nested deeper than 128 levels");
        assert!(detail(&format!("{} x", nest(200))).starts_with("invalid JSON:"));
        assert_eq!(
            detail(&format!("{} x", nest(5000))),
            "nested deeper than 128 levels"
        );
        assert!(detail(&format!("x{}", nest(5000))).starts_with("invalid JSON:"));
    }

    #[test]
    fn syntax_is_json_loads() {
        for bad in [
            "",
            "[",
            "[1,]",
            "[01]",
            "[1.]",
            "[-]",
            "[NaN]",
            "[Infinity]",
            "[-Infinity]",
            "{\"a\" 1}",
            "[\"\\x\"]",
            "[\"\\ud800\"]",
            "[\"\\udc00\"]",
            "[\"a\tb\"]",
            "[tru]",
            "[1] 2",
            "{'a':1}",
            "[\"\\u12G4\"]",
        ] {
            assert!(detail(bad).starts_with("invalid JSON:"), "{bad:?}");
        }
        for good in [
            "[]",
            " [ 1 , -0.5e+3 , true , null , \"\\ud83d\\ude00\\n\" ] ",
            "{}",
            "3",
            "\"x\"",
            "[1E2, 0, -0, 1e400]",
        ] {
            assert!(scan(good).is_ok(), "{good:?}");
        }
        let huge = format!("[{}]", "9".repeat(4301));
        assert!(detail(&huge).starts_with("invalid JSON"));
        assert!(scan(&format!("[{}]", "9".repeat(4300))).is_ok());
        assert!(scan(&format!("[{}.5]", "9".repeat(5000))).is_ok());
    }

    #[test]
    fn strings_are_measured_in_code_points() {
        let text = r#"[{"info":{"role":"ab\n\u00e9😀漢\ud83d\ude00 0123456789abcdef"}}]"#;
        let mut roles = Roles::default();
        assert_eq!(super::scan(text, &mut roles), Ok(true));
        let Some(Val::Str(s)) = roles.1.first().copied() else {
            panic!("{:?}", roles.1);
        };
        assert_eq!(s.chars, 7 + 17);
        assert!(s.escaped);
    }

    #[test]
    fn fields_are_recorded_and_duplicates_take_the_last() {
        let mut roles = Roles::default();
        let doc =
            r#"{"messages":[1],"messages":[{"info":5,"info":{"role":"user","role":"assistant"}}]}"#;
        assert_eq!(super::scan(doc, &mut roles), Ok(true));
        assert_eq!(roles.0.len(), 1);
        let Some(Val::Str(role)) = roles.1.first().copied() else {
            panic!()
        };
        assert_eq!(role.end - role.start, 9);
        assert_eq!(scan(r#"{"messages":[],"messages":3}"#), Ok(false));
        assert_eq!(scan("3"), Ok(false));
    }
}
