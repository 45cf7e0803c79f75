//! `parse_json`: OpenCode message JSON (bytes or str) into a `Session`, with hand-written serde
//! visitors. Unknown fields are skipped with `IgnoredAny`; a duplicate key takes the last value
//! (as `json.loads` does); `null` is absent except for `state.input`. Leaf fields are taken as
//! `&RawValue` slices of the input, so large strings are never copied: the session keeps spans.
//!
//! Checks run in the reference's order: UTF-8, JSON syntax, the 128-level nesting limit, lone
//! surrogate escapes (all path `json`), then the messages in order.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{
    self, DeserializeSeed, Deserializer as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;

use crate::errors::{self as e, InputError, Loc};
use crate::session::{Message, Part, SmallStr, Span, SpanKind, ToolCall};

type Raw<'de> = Option<&'de RawValue>;

/// The key under which serde_json's `arbitrary_precision` passes a number to `visit_map`.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// What a prescan of JSON text found: container depth and lone `\uD8xx`-style escapes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    pub max_depth: usize,
    pub lone_surrogate_escape: bool,
    /// where the nesting first reaches `RUNAWAY_DEPTH` (an opening bracket's offset)
    pub runaway_at: Option<usize>,
    /// an integer literal longer than Python's `int` conversion limit (4300 digits), which
    /// `json.loads` refuses
    pub huge_integer: bool,
}

/// Nesting at which `json.loads` gives up with a RecursionError (about Python's recursion
/// limit), which the reference reports as the nesting error: syntax errors past that point are
/// never seen.
pub const RUNAWAY_DEPTH: usize = 1000;

/// Python's default `sys.get_int_max_str_digits()`.
const PYTHON_INT_MAX_DIGITS: usize = 4300;

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    let mut value = 0u32;
    for &d in digits {
        value = value * 16 + char::from(d).to_digit(16)?;
    }
    Some(value)
}

/// Deepest container nesting (a scalar is 0) and lone surrogate escapes, in one pass over the
/// bytes. Exact for valid JSON; on invalid JSON never below what a parser reaches.
pub fn scan(text: &str) -> Scan {
    let bytes = text.as_bytes();
    let mut out = Scan::default();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            // Jump to the next quote or backslash: strings are most of a session's bytes.
            if b != b'"' && b != b'\\' {
                match memchr::memchr2(b'"', b'\\', bytes.get(i..).unwrap_or(&[])) {
                    Some(skip) => i += skip,
                    None => break,
                }
                continue;
            }
            match b {
                b'"' => in_string = false,
                b'\\' => {
                    if bytes.get(i + 1) == Some(&b'u') {
                        match hex4(bytes, i + 2) {
                            Some(0xd800..=0xdbff) => {
                                let paired = bytes.get(i + 6) == Some(&b'\\')
                                    && bytes.get(i + 7) == Some(&b'u')
                                    && matches!(hex4(bytes, i + 8), Some(0xdc00..=0xdfff));
                                if paired {
                                    i += 12;
                                    continue;
                                }
                                out.lone_surrogate_escape = true;
                            }
                            Some(0xdc00..=0xdfff) => out.lone_surrogate_escape = true,
                            _ => {}
                        }
                        i += 6;
                        continue;
                    }
                    i += 2;
                    continue;
                }
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    out.max_depth = out.max_depth.max(depth);
                    if depth == RUNAWAY_DEPTH && out.runaway_at.is_none() {
                        out.runaway_at = Some(i);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                b'-' | b'0'..=b'9' => {
                    let sign = usize::from(b == b'-');
                    let digits = bytes
                        .get(i + sign..)
                        .unwrap_or(&[])
                        .iter()
                        .take_while(|b| b.is_ascii_digit())
                        .count();
                    let next = bytes.get(i + sign + digits).copied();
                    if digits > PYTHON_INT_MAX_DIGITS && !matches!(next, Some(b'.' | b'e' | b'E')) {
                        out.huge_integer = true;
                    }
                    i += (sign + digits).max(1);
                    continue;
                }
                _ => {}
            }
        }
        i += 1;
    }
    out
}

/// Bytes in: the UTF-8 check comes first.
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<Message>, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|_| InputError::json("invalid UTF-8"))?;
    parse_document(text)
}

const HUGE_INTEGER: &str = "invalid JSON: integer literal longer than 4300 digits";

fn invalid_json(err: &serde_json::Error) -> InputError {
    InputError::json(format!("invalid JSON: {err}"))
}

/// Parse and check a whole document; spans of the result point into `text`.
pub fn parse_document(text: &str) -> Result<Vec<Message>, InputError> {
    let found = scan(text);
    if found.max_depth > e::MAX_DOCUMENT_DEPTH {
        // A syntax error wins over the depth (IgnoredAny is not recursive), unless it comes
        // after the point where json.loads runs out of recursion.
        let checked = match found.runaway_at {
            Some(at) => text.get(..at).unwrap_or(text),
            None => text,
        };
        if let Err(err) = serde_json::from_str::<IgnoredAny>(checked) {
            if found.runaway_at.is_none() || !err.is_eof() {
                return Err(invalid_json(&err));
            }
        }
        if found.huge_integer && found.runaway_at.is_none() {
            return Err(InputError::json(HUGE_INTEGER));
        }
        return Err(InputError::json(e::DOCUMENT_TOO_DEEP));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let first = text
        .bytes()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    let list = match first {
        Some(b'[') => de.deserialize_seq(MessagesVisitor { base: text }).map(Some),
        Some(b'{') => de.deserialize_map(ExportVisitor { base: text }),
        _ => de.deserialize_ignored_any(IgnoredAny).map(|_| None),
    };
    let list = list.and_then(|list| de.end().map(|()| list));
    let list = list.map_err(|err| invalid_json(&err))?;
    if found.huge_integer {
        return Err(InputError::json(HUGE_INTEGER));
    }
    if found.lone_surrogate_escape {
        return Err(InputError::json(
            "invalid JSON: lone surrogate in a string escape",
        ));
    }
    let list = list.ok_or_else(|| InputError::new("messages", e::TOP_LEVEL))?;
    match list.error {
        Some(err) => Err(err),
        None => Ok(list.messages),
    }
}

// --- keys -----------------------------------------------------------------------------------

/// An object key, borrowed from the input when it has no escapes.
pub(crate) struct Key<'de>(pub(crate) std::borrow::Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

// --- lenient objects and arrays ---------------------------------------------------------------

/// A field that should hold an object (or array): `null` and absent are the same.
#[derive(Default)]
enum Obj<T> {
    #[default]
    Absent,
    Wrong,
    Val(T),
}

/// The fields of an object the pipeline reads; every other key is ignored.
trait Fields<'de>: Default {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

struct ObjSeed<T>(PhantomData<T>);

impl<T> ObjSeed<T> {
    fn new() -> Self {
        ObjSeed(PhantomData)
    }
}

macro_rules! wrong_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Self::Value::wrong())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Self::Value::wrong())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Self::Value::wrong())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Self::Value::wrong())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Self::Value::wrong())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Self::Value::absent())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Self::Value::absent())
        }
    };
}

trait Shape {
    fn wrong() -> Self;
    fn absent() -> Self;
}

impl<T> Shape for Obj<T> {
    fn wrong() -> Self {
        Obj::Wrong
    }
    fn absent() -> Self {
        Obj::Absent
    }
}

struct ObjVisitor<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> Visitor<'de> for ObjVisitor<T> {
    type Value = Obj<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    wrong_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Obj::Wrong)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = T::default();
        let mut first = true;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if first && key.0 == NUMBER_TOKEN {
                // serde_json (arbitrary_precision) hands any number over as this one-entry
                // map, so that numbers out of f64 range are not a syntax error.
                skip(&mut map)?;
                return Ok(Obj::Wrong);
            }
            first = false;
            fields.field(&key.0, &mut map)?;
        }
        Ok(Obj::Val(fields))
    }
}

impl<'de, T: Fields<'de>> DeserializeSeed<'de> for ObjSeed<T> {
    type Value = Obj<T>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ObjVisitor(PhantomData))
    }
}

/// A field that should hold an array of objects.
#[derive(Default)]
enum Arr<T> {
    #[default]
    Absent,
    Wrong,
    Val(Vec<Obj<T>>),
}

impl<T> Shape for Arr<T> {
    fn wrong() -> Self {
        Arr::Wrong
    }
    fn absent() -> Self {
        Arr::Absent
    }
}

struct ArrVisitor<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> Visitor<'de> for ArrVisitor<T> {
    type Value = Arr<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    wrong_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ObjSeed::<T>::new())? {
            items.push(item);
        }
        Ok(Arr::Val(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Arr::Wrong)
    }
}

struct ArrSeed<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> DeserializeSeed<'de> for ArrSeed<T> {
    type Value = Arr<T>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ArrVisitor(PhantomData))
    }
}

fn raw<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Raw<'de>, A::Error> {
    map.next_value::<&'de RawValue>().map(Some)
}

fn obj<'de, T: Fields<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<Obj<T>, A::Error> {
    map.next_value_seed(ObjSeed::<T>::new())
}

fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

#[derive(Default)]
struct LMessage<'de> {
    info: Obj<LInfo<'de>>,
    parts: Arr<LPart<'de>>,
}

impl<'de> Fields<'de> for LMessage<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "info" => self.info = obj(map)?,
            "parts" => self.parts = map.next_value_seed(ArrSeed::<LPart<'de>>(PhantomData))?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct LInfo<'de> {
    role: Raw<'de>,
    id: Raw<'de>,
    parent_id: Raw<'de>,
    summary: Raw<'de>,
    error: Obj<LError<'de>>,
}

impl<'de> Fields<'de> for LInfo<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "role" => self.role = raw(map)?,
            "id" => self.id = raw(map)?,
            "parentID" => self.parent_id = raw(map)?,
            "summary" => self.summary = raw(map)?,
            "error" => self.error = obj(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct LError<'de> {
    name: Raw<'de>,
    data: Obj<LData<'de>>,
}

impl<'de> Fields<'de> for LError<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = raw(map)?,
            "data" => self.data = obj(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct LData<'de> {
    message: Raw<'de>,
}

impl<'de> Fields<'de> for LData<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "message" => self.message = raw(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct LPart<'de> {
    kind: Raw<'de>,
    text: Raw<'de>,
    ignored: Raw<'de>,
    tool: Raw<'de>,
    name: Raw<'de>,
    tail_start_id: Raw<'de>,
    state: Obj<LState<'de>>,
}

impl<'de> Fields<'de> for LPart<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = raw(map)?,
            "text" => self.text = raw(map)?,
            "ignored" => self.ignored = raw(map)?,
            "tool" => self.tool = raw(map)?,
            "name" => self.name = raw(map)?,
            "tail_start_id" => self.tail_start_id = raw(map)?,
            "state" => self.state = obj(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct LState<'de> {
    status: Raw<'de>,
    input: Raw<'de>,
    output: Raw<'de>,
    error: Raw<'de>,
    time: Obj<LTime<'de>>,
}

impl<'de> Fields<'de> for LState<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "status" => self.status = raw(map)?,
            "input" => self.input = raw(map)?,
            "output" => self.output = raw(map)?,
            "error" => self.error = raw(map)?,
            "time" => self.time = obj(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct LTime<'de> {
    compacted: Raw<'de>,
}

impl<'de> Fields<'de> for LTime<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "compacted" => self.compacted = raw(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

// --- the message list -------------------------------------------------------------------------

/// One `messages` array: the checked messages, or the first error found in it.
struct MessageList {
    messages: Vec<Message>,
    error: Option<InputError>,
}

struct MessagesVisitor<'a> {
    base: &'a str,
}

impl<'de> Visitor<'de> for MessagesVisitor<'_> {
    type Value = MessageList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut list = MessageList {
            messages: Vec::new(),
            error: None,
        };
        let mut index = 0;
        loop {
            if list.error.is_some() {
                // Keep checking the syntax to the end; shapes no longer matter.
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
            } else {
                let Some(raw) = seq.next_element_seed(ObjSeed::<LMessage<'de>>::new())? else {
                    break;
                };
                match read_message(raw, index, self.base) {
                    Ok(message) => list.messages.push(message),
                    Err(err) => {
                        list.error = Some(err);
                        list.messages = Vec::new();
                    }
                }
            }
            index += 1;
        }
        Ok(list)
    }
}

/// The `messages` value of an export document: an array, or anything else (None).
struct MessagesField<'a> {
    base: &'a str,
}

impl<'de> Visitor<'de> for MessagesField<'_> {
    type Value = Option<MessageList>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        MessagesVisitor { base: self.base }.visit_seq(seq).map(Some)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

impl<'de> DeserializeSeed<'de> for MessagesField<'_> {
    type Value = Option<MessageList>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// An `opencode export` document: `{info, messages: [...]}`; the last `messages` key wins.
struct ExportVisitor<'a> {
    base: &'a str,
}

impl<'de> Visitor<'de> for ExportVisitor<'_> {
    type Value = Option<MessageList>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an export object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut messages = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.0 == "messages" {
                messages = map.next_value_seed(MessagesField { base: self.base })?;
            } else {
                skip(&mut map)?;
            }
        }
        Ok(messages)
    }
}

// --- checks -----------------------------------------------------------------------------------

/// A leaf value, classified by its first byte.
enum Leaf<'a> {
    Absent,
    /// the inside of a string literal, and whether it has escapes
    Str(&'a str, bool),
    Bool(bool),
    Number,
    Other,
}

fn leaf(raw: Raw<'_>) -> Leaf<'_> {
    let Some(raw) = raw else {
        return Leaf::Absent;
    };
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => {
            let inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("");
            Leaf::Str(inner, inner.contains('\\'))
        }
        Some(b'n') => Leaf::Absent,
        Some(b't') => Leaf::Bool(true),
        Some(b'f') => Leaf::Bool(false),
        Some(b'-' | b'0'..=b'9') => Leaf::Number,
        _ => Leaf::Other,
    }
}

/// A small string field, owned.
fn small_string(raw: Raw<'_>, loc: Loc, key: &str) -> Result<Option<String>, InputError> {
    match leaf(raw) {
        Leaf::Absent => Ok(None),
        Leaf::Str(inner, false) => Ok(Some(inner.to_owned())),
        Leaf::Str(inner, true) => Ok(Some(crate::session::unescape(inner))),
        _ => Err(loc.err(Some(key), e::EXPECTED_STRING)),
    }
}

fn offset(base: &str, part: &str) -> usize {
    (part.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize)
}

/// A large string field, as a span of the input.
fn span_string(raw: Raw<'_>, base: &str, loc: Loc, key: &str) -> Result<Option<Span>, InputError> {
    match leaf(raw) {
        Leaf::Absent => Ok(None),
        Leaf::Str(inner, escaped) => {
            let start = offset(base, inner);
            let kind = if escaped {
                SpanKind::Escaped
            } else {
                SpanKind::Plain
            };
            Ok(Some(Span::new(start, start + inner.len(), kind)))
        }
        _ => Err(loc.err(Some(key), e::EXPECTED_STRING)),
    }
}

fn object<T>(value: Obj<T>, loc: Loc, key: &str) -> Result<Option<T>, InputError> {
    match value {
        Obj::Absent => Ok(None),
        Obj::Wrong => Err(loc.err(Some(key), e::EXPECTED_OBJECT)),
        Obj::Val(v) => Ok(Some(v)),
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn read_message(raw: Obj<LMessage<'_>>, i: usize, base: &str) -> Result<Message, InputError> {
    let Obj::Val(lm) = raw else {
        return Err(Loc::Message(i).err(None, e::EXPECTED_OBJECT));
    };
    let info = match lm.info {
        Obj::Absent => return Err(Loc::Message(i).err(Some("info"), e::MISSING)),
        Obj::Wrong => return Err(Loc::Message(i).err(Some("info"), e::EXPECTED_OBJECT)),
        Obj::Val(info) => info,
    };
    let role = small_string(info.role, Loc::Info(i), "role")?.map(SmallStr::from);
    let id = small_string(info.id, Loc::Info(i), "id")?.map(SmallStr::from);
    let parent_id = small_string(info.parent_id, Loc::Info(i), "parentID")?.map(SmallStr::from);
    let error_line = if role.as_deref() == Some("assistant") {
        match object(info.error, Loc::Info(i), "error")? {
            None => None,
            Some(error) => {
                let name = small_string(error.name, Loc::Error(i), "name")?;
                let detail = match object(error.data, Loc::Error(i), "data")? {
                    Some(data) => small_string(data.message, Loc::Data(i), "message")?,
                    None => None,
                };
                Some(crate::transcript::error_line(
                    name.as_deref(),
                    detail.as_deref(),
                ))
            }
        }
    } else {
        None
    };
    let parts = match lm.parts {
        Arr::Absent => return Err(Loc::Message(i).err(Some("parts"), e::MISSING)),
        Arr::Wrong => return Err(Loc::Message(i).err(Some("parts"), e::EXPECTED_ARRAY)),
        Arr::Val(parts) => parts,
    };
    let summary = info.summary.is_some_and(|s| s.get() == "true");
    let mut message = Message {
        role,
        id,
        parent_id,
        summary,
        markers: Vec::new(),
        error_line,
        parts: Vec::with_capacity(parts.len()),
    };
    let mut last_tool_name: Option<SmallStr> = None;
    for (j, part) in parts.into_iter().enumerate() {
        let loc = Loc::Part(i, j);
        let Obj::Val(part) = part else {
            return Err(loc.err(None, e::EXPECTED_OBJECT));
        };
        let kind = match leaf(part.kind) {
            Leaf::Absent => return Err(loc.err(Some("type"), e::MISSING)),
            Leaf::Str(inner, false) => std::borrow::Cow::Borrowed(inner),
            Leaf::Str(inner, true) => std::borrow::Cow::Owned(crate::session::unescape(inner)),
            _ => return Err(loc.err(Some("type"), e::EXPECTED_STRING)),
        };
        match &*kind {
            "text" => {
                let text = span_string(part.text, base, loc, "text")?;
                let ignored = match leaf(part.ignored) {
                    Leaf::Absent => false,
                    Leaf::Bool(b) => b,
                    _ => return Err(loc.err(Some("ignored"), e::EXPECTED_BOOLEAN)),
                };
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    if !ignored {
                        message.parts.push(Part::Text(text));
                    }
                }
            }
            "tool" => {
                let call = read_tool(part, i, j, base)?;
                last_tool_name = Some(call.name.clone());
                message.parts.push(Part::Tool(call));
            }
            "tool_result" => {
                let text = span_string(part.text, base, loc, "text")?;
                let tool = non_empty(small_string(part.tool, loc, "tool")?);
                let alt = non_empty(small_string(part.name, loc, "name")?);
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    let name = match tool.or(alt) {
                        Some(name) => SmallStr::from(name),
                        None => last_tool_name.clone().unwrap_or_else(|| SmallStr::new("")),
                    };
                    message.parts.push(Part::ToolResult { name, text });
                }
            }
            "compaction" => {
                let tail = small_string(part.tail_start_id, loc, "tail_start_id")?;
                if message.role.as_deref() == Some("user") {
                    message.markers.push(tail);
                }
            }
            _ => {}
        }
    }
    Ok(message)
}

fn read_tool(part: LPart<'_>, i: usize, j: usize, base: &str) -> Result<ToolCall, InputError> {
    let loc = Loc::Part(i, j);
    let tool = non_empty(small_string(part.tool, loc, "tool")?);
    let alt = non_empty(small_string(part.name, loc, "name")?);
    let name = tool
        .or(alt)
        .map_or_else(|| SmallStr::new("unknown"), SmallStr::from);
    let Some(state) = object(part.state, loc, "state")? else {
        return Ok(ToolCall {
            name,
            legacy: true,
            input: None,
            status_error: false,
            result: None,
            compacted: false,
        });
    };
    let sloc = Loc::State(i, j);
    let status = small_string(state.status, sloc, "status")?;
    let input = match state.input {
        None => None,
        Some(raw) => {
            let text = raw.get();
            if scan(text).max_depth > e::MAX_INPUT_DEPTH {
                return Err(sloc.err(Some("input"), e::INPUT_TOO_DEEP));
            }
            let start = offset(base, text);
            Some(Span::new(start, start + text.len(), SpanKind::RawJson))
        }
    };
    let mut result = None;
    let mut compacted = false;
    match status.as_deref() {
        Some("completed") => {
            result = Some(span_string(state.output, base, sloc, "output")?.unwrap_or(Span::EMPTY));
            if let Some(time) = object(state.time, sloc, "time")? {
                compacted = match leaf(time.compacted) {
                    Leaf::Absent => false,
                    Leaf::Number => true,
                    _ => return Err(Loc::Time(i, j).err(Some("compacted"), e::EXPECTED_NUMBER)),
                };
            }
        }
        Some("error") => {
            result = Some(span_string(state.error, base, sloc, "error")?.unwrap_or(Span::EMPTY));
        }
        _ => {}
    }
    Ok(ToolCall {
        name,
        legacy: status.is_none(),
        input,
        status_error: status.as_deref() == Some("error"),
        result,
        compacted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nest(n: usize) -> String {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn depth_limit_is_exactly_128() {
        let ok = format!("[{{\"info\":{{}},\"parts\":[],\"x\":{}}}]", nest(126));
        assert_eq!(scan(&ok).max_depth, 128);
        assert!(parse_document(&ok).is_ok());
        let deep = format!("[{{\"info\":{{}},\"parts\":[],\"x\":{}}}]", nest(127));
        assert_eq!(
            parse_document(&deep).unwrap_err().detail,
            "nested deeper than 128 levels"
        );
        let broken = format!("{} x", nest(200));
        assert!(parse_document(&broken)
            .unwrap_err()
            .detail
            .starts_with("invalid JSON:"));
        let runaway = format!("{} x", nest(5000));
        assert_eq!(
            parse_document(&runaway).unwrap_err().detail,
            "nested deeper than 128 levels"
        );
        let early = format!("x{}", nest(5000));
        assert!(parse_document(&early)
            .unwrap_err()
            .detail
            .starts_with("invalid JSON:"));
    }

    #[test]
    fn numbers_out_of_range_are_shape_errors() {
        let err = parse_document(r#"[{"info": 1e400, "parts": []}]"#).unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.detail.as_str()),
            ("messages[0].info", "expected an object")
        );
        let err = parse_document("[1e400]").unwrap_err();
        assert_eq!(err.path, "messages[0]");
        let err = parse_document(r#"{"messages": 1e400}"#).unwrap_err();
        assert_eq!(err.path, "messages");
    }

    #[test]
    fn integers_past_python_limit_are_invalid() {
        let ok = format!(
            "[{{\"info\":{{}},\"parts\":[],\"x\":-{}}}]",
            "9".repeat(4300)
        );
        assert!(parse_document(&ok).is_ok());
        let float = format!(
            "[{{\"info\":{{}},\"parts\":[],\"x\":{}.5}}]",
            "9".repeat(5000)
        );
        assert!(parse_document(&float).is_ok());
        let huge = format!(
            "[{{\"info\":{{}},\"parts\":[],\"x\":{}}}]",
            "9".repeat(4301)
        );
        assert!(parse_document(&huge)
            .unwrap_err()
            .detail
            .starts_with("invalid JSON"));
    }

    #[test]
    fn duplicates_take_the_last_value() {
        let doc = r#"[{"info":5,"info":{"role":"user","role":"assistant"},"parts":[]}]"#;
        let messages = parse_document(doc).unwrap();
        assert_eq!(messages[0].role.as_deref(), Some("assistant"));
    }

    #[test]
    fn shape_errors_have_paths() {
        let doc = r#"[{"info":{},"parts":[{"type":"tool","state":{"status":"completed","time":{"compacted":true}}}]}]"#;
        let err = parse_document(doc).unwrap_err();
        assert_eq!(err.path, "messages[0].parts[0].state.time.compacted");
        assert_eq!(err.detail, "expected a number");
        let err = parse_document(r#"{"messages": 3}"#).unwrap_err();
        assert_eq!(err.path, "messages");
        let err = parse_document(r#"[{"info":{}}] x"#).unwrap_err();
        assert!(err.detail.starts_with("invalid JSON:"));
        let err = parse_document(r#"["\ud800"]"#).unwrap_err();
        assert!(err.detail.starts_with("invalid JSON:"));
    }
}
