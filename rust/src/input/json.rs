//! The scanned JSON document as a `Source`: objects are the scanner's nodes, strings are spans
//! of the document (never copied, already measured in code points).

use std::borrow::Cow;

use super::read_message;
use super::{Field, Kind, PartType, Source, Status};
use crate::errors::{self as e, InputError, Loc};
use crate::json::scan::{Doc, OnMessage, Str, Val, SLOTS};
use crate::json::unescape::unescape;
use crate::session::{Message, Part, Short, Shorts, Span, SpanKind};

/// The slot of a field in its object's node (see `json::scan::slot`).
pub fn slot(field: Field) -> usize {
    match field {
        Field::Info | Field::Role | Field::ErrorName | Field::DataMessage | Field::Type => 0,
        Field::Status | Field::Compacted => 0,
        Field::Parts | Field::Id | Field::ErrorData | Field::Text | Field::Input => 1,
        Field::ParentId | Field::Ignored | Field::Output => 2,
        Field::Summary | Field::Tool | Field::StateError => 3,
        Field::InfoError | Field::PartName | Field::Time => 4,
        Field::TailStartId => 5,
        Field::State => 6,
    }
}

/// Reads each message as the scanner hands it over, head and body; keeps the first fault of a
/// head and, after it, only lets the scanner check the rest of the syntax. A fault in a body
/// is kept with its message's index and the next message is read: it counts only if
/// compaction keeps that message (`ParsedSession.render`).
pub struct JsonReader<'a> {
    pub text: &'a str,
    pub messages: Vec<Message>,
    pub parts: Vec<Part>,
    pub shorts: Shorts,
    pub error: Option<InputError>,
    /// the fault of each body that has one, by message index (ascending)
    pub faults: Vec<(usize, InputError)>,
}

impl<'a> JsonReader<'a> {
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            messages: Vec::new(),
            parts: Vec::new(),
            shorts: Shorts::default(),
            error: None,
            faults: Vec::new(),
        }
    }
}

impl OnMessage for JsonReader<'_> {
    fn start(&mut self) {
        self.messages.clear();
        self.parts.clear();
        self.shorts.clear();
        self.error = None;
        self.faults.clear();
    }

    fn message(&mut self, doc: &Doc, value: Val, index: usize) {
        if self.error.is_some() {
            return;
        }
        let mut src = JsonSource {
            text: self.text,
            doc,
            shorts: &mut self.shorts,
        };
        match read_message(&mut src, value, index, &mut self.parts, &mut self.faults) {
            Ok(message) => self.messages.push(message),
            Err(err) => {
                self.error = Some(err);
                self.messages = Vec::new();
                self.parts = Vec::new();
                self.faults = Vec::new();
            }
        }
    }
}

/// One scanned message's records and the document text.
pub struct JsonSource<'a> {
    pub text: &'a str,
    pub doc: &'a Doc,
    pub shorts: &'a mut Shorts,
}

/// The text of a short string literal of the document, unescaped if it has escapes.
fn decoded(text: &str, s: Str) -> Cow<'_, str> {
    let raw = text.get(s.start as usize..s.end as usize).unwrap_or("");
    if s.escaped {
        Cow::Owned(unescape(raw))
    } else {
        Cow::Borrowed(raw)
    }
}

impl Source for JsonSource<'_> {
    type Value = Val;
    type Object = u32;
    type Array = (u32, u32);
    type Str = Str;
    type Error = InputError;

    fn kind(&mut self, value: Val) -> Kind<Self> {
        match value {
            Val::Absent => Kind::Absent,
            Val::Bool(b) => Kind::Bool(b),
            Val::Number => Kind::Number,
            Val::Str(s) => Kind::Str(s),
            Val::Obj(node) => Kind::Object(node),
            Val::Arr { start, len } => Kind::Array((start, len)),
            Val::Other | Val::Raw { .. } => Kind::Other,
        }
    }

    fn get(&self, object: &u32, field: Field) -> Result<Val, InputError> {
        let node: Option<&[Val; SLOTS]> = self.doc.nodes.get(*object as usize);
        Ok(node
            .and_then(|n| n.get(slot(field)))
            .copied()
            .unwrap_or_default())
    }

    fn len(&self, array: &(u32, u32)) -> usize {
        array.1 as usize
    }

    fn item(&self, array: &(u32, u32), index: usize) -> Result<Val, InputError> {
        Ok(self
            .doc
            .items
            .get(array.0 as usize + index)
            .copied()
            .unwrap_or_default())
    }

    fn is_true(&self, value: &Val) -> bool {
        *value == Val::Bool(true)
    }

    fn short(&mut self, s: Str, _: Loc, _: &str) -> Result<Short, InputError> {
        Ok(self.shorts.push(&decoded(self.text, s)))
    }

    fn shorts(&self) -> &Shorts {
        self.shorts
    }

    fn part_type(&mut self, s: Str, _: Loc) -> Result<PartType, InputError> {
        Ok(PartType::of(&decoded(self.text, s)))
    }

    fn status(&mut self, s: Str, _: Loc) -> Result<Status, InputError> {
        Ok(Status::of(&decoded(self.text, s)))
    }

    fn long(&mut self, s: Str, _: Loc, _: &'static str) -> Result<Span, InputError> {
        let kind = if s.unicode {
            SpanKind::EscapedUnicode
        } else if s.escaped {
            SpanKind::Escaped
        } else {
            SpanKind::Plain
        };
        Ok(Span::new(
            s.start as usize,
            s.end as usize,
            s.chars as usize,
            kind,
        ))
    }

    fn body_fault(&self, error: InputError) -> Result<InputError, InputError> {
        Ok(error)
    }

    fn input(&mut self, state: &u32, loc: Loc) -> Result<Option<Span>, InputError> {
        match self.get(state, Field::Input)? {
            Val::Raw { deep: true, .. } => Err(loc.err(Some("input"), e::INPUT_TOO_DEEP)),
            Val::Raw { start, end, .. } => Ok(Some(Span::new(
                start as usize,
                end as usize,
                0,
                SpanKind::RawJson,
            ))),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::scan::{slot as scan_slot, Schema};

    #[test]
    fn slots_agree_with_the_scanner() {
        use Field as F;
        let table = [
            (Schema::Message, [F::Info, F::Parts].as_slice()),
            (
                Schema::Info,
                &[F::Role, F::Id, F::ParentId, F::Summary, F::InfoError],
            ),
            (Schema::Error, &[F::ErrorName, F::ErrorData]),
            (Schema::Data, &[F::DataMessage]),
            (
                Schema::Part,
                &[
                    F::Type,
                    F::Text,
                    F::Ignored,
                    F::Tool,
                    F::PartName,
                    F::TailStartId,
                    F::State,
                ],
            ),
            (
                Schema::State,
                &[F::Status, F::Input, F::Output, F::StateError, F::Time],
            ),
            (Schema::Time, &[F::Compacted]),
        ];
        for (schema, fields) in table {
            for &field in fields {
                let found = scan_slot(schema, field.key().as_bytes()).map(|(s, _)| s);
                assert_eq!(found, Some(slot(field)), "{field:?}");
            }
        }
    }
}
