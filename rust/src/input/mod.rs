//! The message rules, written once: `read_head` and `read_body` are generic over a `Source`
//! (the scanned JSON document, or Python dicts and lists), so both front ends check the same
//! fields in the same order with the same paths and details, and build the same session.
//! A message's head is what stage 1 reads, and its fault ends the walk; its body's fault is
//! kept and counts only if compaction keeps the message.

pub mod borrowed;
pub mod dict;
pub mod json;
mod lookahead;
pub mod py;

use crate::errors::{self as e, InputError, Loc};
use crate::session::{Message, Part, Short, Shorts, Span, ToolCall};
use crate::text::error_line;

/// A field the pipeline reads, named by the object it sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Info,
    Parts,
    Role,
    Id,
    ParentId,
    Summary,
    InfoError,
    ErrorName,
    ErrorData,
    DataMessage,
    Type,
    Text,
    Ignored,
    Tool,
    PartName,
    TailStartId,
    State,
    Status,
    Input,
    Output,
    StateError,
    Time,
    Compacted,
}

impl Field {
    /// The key, as written in the input and in error paths.
    pub fn key(self) -> &'static str {
        match self {
            Field::Info => "info",
            Field::Parts => "parts",
            Field::Role => "role",
            Field::Id => "id",
            Field::ParentId => "parentID",
            Field::Summary => "summary",
            Field::InfoError | Field::StateError => "error",
            Field::ErrorName | Field::PartName => "name",
            Field::ErrorData => "data",
            Field::DataMessage => "message",
            Field::Type => "type",
            Field::Text => "text",
            Field::Ignored => "ignored",
            Field::Tool => "tool",
            Field::TailStartId => "tail_start_id",
            Field::State => "state",
            Field::Status => "status",
            Field::Input => "input",
            Field::Output => "output",
            Field::Time => "time",
            Field::Compacted => "compacted",
        }
    }
}

/// The part types the pipeline reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartType {
    Text,
    Tool,
    ToolResult,
    Compaction,
    Other,
}

impl PartType {
    pub fn of(kind: &str) -> PartType {
        match kind {
            "text" => PartType::Text,
            "tool" => PartType::Tool,
            "tool_result" => PartType::ToolResult,
            "compaction" => PartType::Compaction,
            _ => PartType::Other,
        }
    }
}

/// The `state.status` values the pipeline tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Completed,
    Error,
    Other,
}

impl Status {
    pub fn of(status: &str) -> Status {
        match status {
            "completed" => Status::Completed,
            "error" => Status::Error,
            _ => Status::Other,
        }
    }
}

/// What a value is.
pub enum Kind<S: Source> {
    /// absent or null
    Absent,
    Str(S::Str),
    Bool(bool),
    Number,
    Object(S::Object),
    Array(S::Array),
    Other,
}

/// Input the message rules can read: objects with fields, arrays with items, scalars.
pub trait Source: Sized {
    type Value;
    type Object;
    type Array;
    type Str;
    type Error: From<InputError>;

    fn kind(&mut self, value: Self::Value) -> Kind<Self>;
    /// The value of `field` (absent or null: a value of kind `Absent`).
    fn get(&self, object: &Self::Object, field: Field) -> Result<Self::Value, Self::Error>;
    fn len(&self, array: &Self::Array) -> usize;
    fn item(&self, array: &Self::Array, index: usize) -> Result<Self::Value, Self::Error>;
    /// Whether a value is the boolean `true` (`info.summary`).
    fn is_true(&self, value: &Self::Value) -> bool;
    /// A short string (role, id, name), copied into `shorts`; `loc`/`key` name it in errors.
    fn short(&mut self, s: Self::Str, loc: Loc, key: &str) -> Result<Short, Self::Error>;
    /// The short strings read so far.
    fn shorts(&self) -> &Shorts;
    /// A part's `type`, without copying it.
    fn part_type(&mut self, s: Self::Str, loc: Loc) -> Result<PartType, Self::Error>;
    /// A tool part's `state.status`, without copying it.
    fn status(&mut self, s: Self::Str, loc: Loc) -> Result<Status, Self::Error>;
    /// A long string (text, output), kept where it is, with its length in code points.
    fn long(&mut self, s: Self::Str, loc: Loc, key: &'static str) -> Result<Span, Self::Error>;
    /// `state.input` when present (a present `null` included): checked and kept for dumping.
    fn input(&mut self, state: &Self::Object, loc: Loc) -> Result<Option<Span>, Self::Error>;
    /// A body's error as a fault to keep for later (`read_messages`), or the error itself when
    /// the walk must end with it (it is no fault of the input, or the walk cannot go on).
    fn body_fault(&self, error: Self::Error) -> Result<InputError, Self::Error>;
    /// Called before message `index` of `list` is read (from the newest): a source may start
    /// loading what it will read of the messages before it (their heads only, once `bodies`
    /// is false).
    #[inline(always)]
    fn ahead(&mut self, _list: &Self::Array, _index: usize, _bodies: bool) {}
}

#[inline(always)]
fn object<S: Source>(
    src: &mut S,
    parent: &S::Object,
    field: Field,
    loc: Loc,
) -> Result<Option<S::Object>, S::Error> {
    match src.kind(src.get(parent, field)?) {
        Kind::Absent => Ok(None),
        Kind::Object(o) => Ok(Some(o)),
        _ => Err(loc.err(Some(field.key()), e::EXPECTED_OBJECT).into()),
    }
}

#[inline(always)]
fn short<S: Source>(
    src: &mut S,
    parent: &S::Object,
    field: Field,
    loc: Loc,
) -> Result<Option<Short>, S::Error> {
    match src.kind(src.get(parent, field)?) {
        Kind::Absent => Ok(None),
        Kind::Str(s) => src.short(s, loc, field.key()).map(Some),
        _ => Err(loc.err(Some(field.key()), e::EXPECTED_STRING).into()),
    }
}

#[inline(always)]
fn long<S: Source>(
    src: &mut S,
    parent: &S::Object,
    field: Field,
    loc: Loc,
) -> Result<Option<Span>, S::Error> {
    match src.kind(src.get(parent, field)?) {
        Kind::Absent => Ok(None),
        Kind::Str(s) => src.long(s, loc, field.key()).map(Some),
        _ => Err(loc.err(Some(field.key()), e::EXPECTED_STRING).into()),
    }
}

fn non_empty(s: Option<Short>) -> Option<Short> {
    s.filter(|s| !s.is_empty())
}

/// Read the messages of `list` into `messages` (by index) and their parts into `parts`, as
/// stage 1 needs them: from the newest, each whole (head and body) down to the compaction
/// boundary stage 1 slices at (the newest marker with a summary after it) and through its
/// verbatim tail (down to the message with its `tail_start_id`), older ones only by their
/// head, so a history that compaction drops costs a look at each head; with `every_body`, all
/// of them whole. Returns the index from which bodies were read: a render that keeps an older
/// message (a marker's summary before it, a repeated `tail_start_id`) needs a walk with
/// `every_body`.
///
/// A fault in a head ends the walk, the first in list order (the heads before one found are
/// read again, oldest first); a fault in a body is kept in `faults` with the message's index
/// (ascending), the message keeps no parts, and the walk goes on: it counts only if
/// compaction keeps that message (`ParsedSession.render`).
pub fn read_messages<S: Source>(
    src: &mut S,
    list: &S::Array,
    messages: &mut Vec<Message>,
    parts: &mut Vec<Part>,
    faults: &mut Vec<(usize, InputError)>,
    every_body: bool,
) -> Result<usize, S::Error> {
    let count = src.len(list);
    messages.clear();
    messages.resize_with(count, Message::default);
    let first_fault = faults.len();
    let mut boundary = Boundary::default();
    let mut whole = true;
    let mut bodies_from = 0;
    for i in (0..count).rev() {
        src.ahead(list, i, whole);
        let value = src.item(list, i)?;
        let read = if whole {
            read_message(src, value, i, parts, faults)
        } else {
            read_head(src, value, i).map(|head| head.message)
        };
        let message = match read {
            Ok(message) => message,
            Err(err) => {
                for k in 0..i {
                    let value = src.item(list, k)?;
                    read_head(src, value, k)?;
                }
                return Err(err);
            }
        };
        let newer = messages.get(i + 1..).unwrap_or(&[]);
        if whole && !every_body && boundary.passed(src, &message, newer) {
            whole = false;
            bodies_from = i;
        }
        if let Some(slot) = messages.get_mut(i) {
            *slot = message;
        }
    }
    faults[first_fault..].reverse();
    Ok(bodies_from)
}

/// Where a walk from the newest meets stage 1's boundary (see `read_messages`).
#[derive(Default)]
struct Boundary {
    /// a summary was read (newer than the message being read)
    summary_seen: bool,
    /// the boundary's marker was read: bodies are read down to `tail_start`
    found: bool,
    tail_start: Option<String>,
}

impl Boundary {
    /// Whether `message` (read whole, `newer` being the messages after it) is the last whose
    /// body the walk reads: the first message of the boundary's tail, or its marker when it
    /// has no tail before it.
    fn passed<S: Source>(&mut self, src: &S, message: &Message, newer: &[Message]) -> bool {
        let text = |s: Option<Short>| s.map(|s| src.shorts().get(s));
        let mut last = self.found && text(message.id) == self.tail_start.as_deref();
        if let Some(tail_start) = message.markers.first() {
            if self.summary_seen && !self.found {
                // the newest marker with a summary after it; its tail starts at the first
                // message with its tail_start_id, if that lies before the marker
                self.found = true;
                self.tail_start.clone_from(tail_start);
                last = match tail_start.as_deref() {
                    None => true,
                    Some(tail) => {
                        text(message.id) == Some(tail)
                            || newer.iter().any(|m| text(m.id) == Some(tail))
                    }
                };
            }
        }
        self.summary_seen |= message.summary;
        last
    }
}

/// Read message `i` (`value`): its head, then its body, whose parts go to `parts` and whose
/// fault goes to `faults` (see `read_messages`).
#[inline(always)]
pub fn read_message<S: Source>(
    src: &mut S,
    value: S::Value,
    i: usize,
    parts: &mut Vec<Part>,
    faults: &mut Vec<(usize, InputError)>,
) -> Result<Message, S::Error> {
    let mut head = read_head(src, value, i)?;
    let first = parts.len();
    if let Err(err) = read_body(src, i, &mut head, parts) {
        // the message keeps its head's empty parts and no error line: `read_body` sets them
        // only once the whole body is read
        faults.push((i, src.body_fault(err)?));
        parts.truncate(first);
    }
    Ok(head.message)
}

/// What `read_head` read of a message: its record so far, its `info` and `parts`, and
/// whether its role is `assistant` or `user`, for `read_body`.
struct Head<S: Source> {
    message: Message,
    info: S::Object,
    list: S::Array,
    assistant: bool,
    user: bool,
}

/// Part `j` of `list` as an object, and its `type`.
#[inline(always)]
fn part_of<S: Source>(
    src: &mut S,
    list: &S::Array,
    i: usize,
    j: usize,
) -> Result<(S::Object, PartType), S::Error> {
    let loc = Loc::Part(i, j);
    let Kind::Object(part) = src.kind(src.item(list, j)?) else {
        return Err(loc.err(None, e::EXPECTED_OBJECT).into());
    };
    let kind = match src.kind(src.get(&part, Field::Type)?) {
        Kind::Absent => return Err(loc.err(Some("type"), e::MISSING).into()),
        Kind::Str(s) => src.part_type(s, loc)?,
        _ => return Err(loc.err(Some("type"), e::EXPECTED_STRING).into()),
    };
    Ok((part, kind))
}

/// Message `i`'s head: what stage 1 reads of every message (its object, `info` with `role`,
/// `id`, `parentID` and an assistant's `summary`, the `parts` array and, in a user message,
/// each part's `type` and a compaction part's `tail_start_id`), with its `info` and `parts`.
/// The rest is its body, whose fault counts only if compaction keeps the message.
#[inline(always)]
fn read_head<S: Source>(src: &mut S, value: S::Value, i: usize) -> Result<Head<S>, S::Error> {
    let Kind::Object(msg) = src.kind(value) else {
        return Err(Loc::Message(i).err(None, e::EXPECTED_OBJECT).into());
    };
    let info = match src.kind(src.get(&msg, Field::Info)?) {
        Kind::Absent => return Err(Loc::Message(i).err(Some("info"), e::MISSING).into()),
        Kind::Object(info) => info,
        _ => return Err(Loc::Message(i).err(Some("info"), e::EXPECTED_OBJECT).into()),
    };
    let iloc = Loc::Info(i);
    let role = short(src, &info, Field::Role, iloc)?;
    let id = short(src, &info, Field::Id, iloc)?;
    let parent_id = short(src, &info, Field::ParentId, iloc)?;
    let role_is = |src: &S, text: &str| role.is_some_and(|r| src.shorts().get(r) == text);
    let assistant = role_is(src, "assistant");
    let user = role_is(src, "user");
    let list = match src.kind(src.get(&msg, Field::Parts)?) {
        Kind::Absent => return Err(Loc::Message(i).err(Some("parts"), e::MISSING).into()),
        Kind::Array(list) => list,
        _ => return Err(Loc::Message(i).err(Some("parts"), e::EXPECTED_ARRAY).into()),
    };
    // Only an assistant message can be a compaction summary: nobody else's is read.
    let summary = assistant && src.is_true(&src.get(&info, Field::Summary)?);
    let mut markers = Vec::new();
    if user {
        // only a user message's compaction parts are markers
        for j in 0..src.len(&list) {
            let (part, kind) = part_of(src, &list, i, j)?;
            if kind == PartType::Compaction {
                let tail = short(src, &part, Field::TailStartId, Loc::Part(i, j))?;
                markers.push(tail.map(|t| src.shorts().get(t).to_owned()));
            }
        }
    }
    let message = Message {
        role,
        id,
        parent_id,
        summary,
        markers,
        error_line: None,
        parts: 0..0,
    };
    Ok(Head {
        message,
        info,
        list,
        assistant,
        user,
    })
}

/// Message `i`'s body, once its head is read: an assistant's `info.error` and every part,
/// appended to `parts`.
#[inline(always)]
fn read_body<S: Source>(
    src: &mut S,
    i: usize,
    head: &mut Head<S>,
    parts: &mut Vec<Part>,
) -> Result<(), S::Error> {
    let (info, list, assistant, user) = (&head.info, &head.list, head.assistant, head.user);
    let mut error = None;
    if assistant {
        let iloc = Loc::Info(i);
        if let Some(err) = object(src, info, Field::InfoError, iloc)? {
            let name = short(src, &err, Field::ErrorName, Loc::Error(i))?;
            let detail = match object(src, &err, Field::ErrorData, Loc::Error(i))? {
                Some(data) => short(src, &data, Field::DataMessage, Loc::Data(i))?,
                None => None,
            };
            let text = |s: Option<Short>| s.map(|s| src.shorts().get(s));
            error = Some(error_line(text(name), text(detail)));
        }
    }
    let first = parts.len();
    let mut last_tool_name: Option<Short> = None;
    for j in 0..src.len(list) {
        let loc = Loc::Part(i, j);
        let (part, kind) = part_of(src, list, i, j)?;
        match kind {
            PartType::Text => {
                let text = long(src, &part, Field::Text, loc)?;
                let ignored = match src.kind(src.get(&part, Field::Ignored)?) {
                    Kind::Absent => false,
                    Kind::Bool(b) => b,
                    _ => return Err(loc.err(Some("ignored"), e::EXPECTED_BOOLEAN).into()),
                };
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    if !ignored {
                        parts.push(Part::Text(text));
                    }
                }
            }
            PartType::Tool => {
                let call = read_tool(src, &part, i, j)?;
                last_tool_name = Some(call.name);
                parts.push(Part::Tool(call));
            }
            PartType::ToolResult => {
                let text = long(src, &part, Field::Text, loc)?;
                let tool = non_empty(short(src, &part, Field::Tool, loc)?);
                let alt = non_empty(short(src, &part, Field::PartName, loc)?);
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    let name = tool.or(alt).or(last_tool_name).unwrap_or(Short::EMPTY);
                    parts.push(Part::ToolResult { name, text });
                }
            }
            PartType::Compaction if !user => {
                // a user message's was read with its head; anyone else's is checked the same
                short(src, &part, Field::TailStartId, loc)?;
            }
            PartType::Compaction => {}
            PartType::Other => {}
        }
    }
    head.message.error_line = error;
    head.message.parts = first..parts.len();
    Ok(())
}

fn read_tool<S: Source>(
    src: &mut S,
    part: &S::Object,
    i: usize,
    j: usize,
) -> Result<ToolCall, S::Error> {
    let loc = Loc::Part(i, j);
    let tool = non_empty(short(src, part, Field::Tool, loc)?);
    let alt = non_empty(short(src, part, Field::PartName, loc)?);
    let name = tool.or(alt).unwrap_or(Short::UNKNOWN);
    let mut call = ToolCall {
        name,
        legacy: true,
        input: None,
        status_error: false,
        result: None,
        compacted: false,
    };
    let Some(state) = object(src, part, Field::State, loc)? else {
        return Ok(call);
    };
    let sloc = Loc::State(i, j);
    let status = match src.kind(src.get(&state, Field::Status)?) {
        Kind::Absent => None,
        Kind::Str(s) => Some(src.status(s, sloc)?),
        _ => return Err(sloc.err(Some("status"), e::EXPECTED_STRING).into()),
    };
    call.legacy = status.is_none();
    call.input = src.input(&state, sloc)?;
    match status {
        Some(Status::Completed) => {
            call.result = Some(long(src, &state, Field::Output, sloc)?.unwrap_or(Span::EMPTY));
            if let Some(time) = object(src, &state, Field::Time, sloc)? {
                call.compacted = match src.kind(src.get(&time, Field::Compacted)?) {
                    Kind::Absent => false,
                    Kind::Number => true,
                    _ => {
                        return Err(Loc::Time(i, j)
                            .err(Some("compacted"), e::EXPECTED_NUMBER)
                            .into())
                    }
                };
            }
        }
        Some(Status::Error) => {
            call.status_error = true;
            call.result = Some(long(src, &state, Field::StateError, sloc)?.unwrap_or(Span::EMPTY));
        }
        _ => {}
    }
    Ok(call)
}
