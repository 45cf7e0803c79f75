//! Python dicts and lists as a `Source`, walked in place (no JSON round trip). Types are probed
//! with `cast`, keys are interned. Long strings are never copied: the session keeps the Python
//! strings alive and borrows their UTF-8 form, and their length in code points is Python's own
//! (O(1)). `state.input` is checked and dumped as Python's compact JSON into a small arena.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::{Field, Kind, PartType, Source};
use crate::errors::{self as e, Failure, InputError, Loc};
use crate::json::dump::{float_repr, write_string};
use crate::session::{SmallStr, Span, SpanKind};

/// A list or a tuple, read in place.
pub enum Seq<'py> {
    List(Bound<'py, PyList>),
    Tuple(Bound<'py, PyTuple>),
}

impl<'py> Seq<'py> {
    pub fn of(value: &Bound<'py, PyAny>) -> Option<Seq<'py>> {
        if let Ok(list) = value.cast::<PyList>() {
            Some(Seq::List(list.clone()))
        } else if let Ok(tuple) = value.cast::<PyTuple>() {
            Some(Seq::Tuple(tuple.clone()))
        } else {
            None
        }
    }

    fn len(&self) -> usize {
        match self {
            Seq::List(list) => list.len(),
            Seq::Tuple(tuple) => tuple.len(),
        }
    }

    fn get(&self, index: usize) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Seq::List(list) => list.get_item(index),
            Seq::Tuple(tuple) => tuple.get_item(index),
        }
    }
}

/// The interned key of every field, indexed by `Field as usize`.
pub fn keys(py: Python<'_>) -> [Bound<'_, PyString>; FIELDS] {
    ALL_FIELDS.map(|field| key(py, field).clone())
}

const FIELDS: usize = 23;
const ALL_FIELDS: [Field; FIELDS] = [
    Field::Info,
    Field::Parts,
    Field::Role,
    Field::Id,
    Field::ParentId,
    Field::Summary,
    Field::InfoError,
    Field::ErrorName,
    Field::ErrorData,
    Field::DataMessage,
    Field::Type,
    Field::Text,
    Field::Ignored,
    Field::Tool,
    Field::PartName,
    Field::TailStartId,
    Field::State,
    Field::Status,
    Field::Input,
    Field::Output,
    Field::StateError,
    Field::Time,
    Field::Compacted,
];

fn key<'py>(py: Python<'py>, field: Field) -> &'py Bound<'py, PyString> {
    match field {
        Field::Info => intern!(py, "info"),
        Field::Parts => intern!(py, "parts"),
        Field::Role => intern!(py, "role"),
        Field::Id => intern!(py, "id"),
        Field::ParentId => intern!(py, "parentID"),
        Field::Summary => intern!(py, "summary"),
        Field::InfoError | Field::StateError => intern!(py, "error"),
        Field::ErrorName | Field::PartName => intern!(py, "name"),
        Field::ErrorData => intern!(py, "data"),
        Field::DataMessage => intern!(py, "message"),
        Field::Type => intern!(py, "type"),
        Field::Text => intern!(py, "text"),
        Field::Ignored => intern!(py, "ignored"),
        Field::Tool => intern!(py, "tool"),
        Field::TailStartId => intern!(py, "tail_start_id"),
        Field::State => intern!(py, "state"),
        Field::Status => intern!(py, "status"),
        Field::Input => intern!(py, "input"),
        Field::Output => intern!(py, "output"),
        Field::Time => intern!(py, "time"),
        Field::Compacted => intern!(py, "compacted"),
    }
}

/// The walk's state: what the session keeps of the objects.
pub struct PySource<'py> {
    /// `keys(py)`, looked up once per walk
    pub keys: [Bound<'py, PyString>; FIELDS],
    /// buffer 0 of the session: parameter JSON dumped in the walk
    pub arena: String,
    /// buffers 1.. of the session: the long strings of the objects, kept alive
    pub strings: Vec<PyBackedStr>,
}

fn lone_surrogate(loc: Loc, key: &str) -> Failure {
    Failure::Input(InputError::new(loc.path(Some(key)), e::LONE_SURROGATE))
}

impl<'py> Source for PySource<'py> {
    type Value = Option<Bound<'py, PyAny>>;
    type Object = Bound<'py, PyDict>;
    type Array = Seq<'py>;
    type Str = Bound<'py, PyString>;
    type Error = Failure;

    fn kind(&self, value: Self::Value) -> Kind<Self> {
        let Some(value) = value else {
            return Kind::Absent;
        };
        let value = match value.cast_into::<PyString>() {
            Ok(s) => return Kind::Str(s),
            Err(err) => err.into_inner(),
        };
        let value = match value.cast_into::<PyDict>() {
            Ok(d) => return Kind::Object(d),
            Err(err) => err.into_inner(),
        };
        if let Some(seq) = Seq::of(&value) {
            return Kind::Array(seq);
        }
        if let Ok(b) = value.cast::<PyBool>() {
            return Kind::Bool(b.is_true());
        }
        if value.cast::<PyInt>().is_ok() || value.cast::<PyFloat>().is_ok() {
            return Kind::Number;
        }
        Kind::Other
    }

    fn get(&self, object: &Bound<'py, PyDict>, field: Field) -> Result<Self::Value, Failure> {
        let Some(key) = self.keys.get(field as usize) else {
            return Ok(None);
        };
        Ok(object.get_item(key)?.filter(|v| !v.is_none()))
    }

    fn len(&self, array: &Seq<'py>) -> usize {
        array.len()
    }

    fn item(&self, array: &Seq<'py>, index: usize) -> Result<Self::Value, Failure> {
        Ok(Some(array.get(index)?).filter(|v| !v.is_none()))
    }

    fn is_true(&self, value: &Self::Value) -> bool {
        value
            .as_ref()
            .is_some_and(|v| v.cast::<PyBool>().is_ok_and(|b| b.is_true()))
    }

    fn short(&mut self, s: Bound<'py, PyString>, loc: Loc, key: &str) -> Result<SmallStr, Failure> {
        let text = s.to_str().map_err(|_| lone_surrogate(loc, key))?;
        Ok(SmallStr::new(text))
    }

    fn part_type(&mut self, s: Bound<'py, PyString>, loc: Loc) -> Result<PartType, Failure> {
        let text = s.to_str().map_err(|_| lone_surrogate(loc, "type"))?;
        Ok(PartType::of(text))
    }

    fn long(&mut self, s: Bound<'py, PyString>, loc: Loc, key: &str) -> Result<Span, Failure> {
        let chars = s.len()?;
        let backed = PyBackedStr::try_from(s).map_err(|_| lone_surrogate(loc, key))?;
        let len = backed.len();
        if len == 0 {
            return Ok(Span::EMPTY);
        }
        match u32::try_from(self.strings.len() + 1) {
            Ok(buf) => {
                self.strings.push(backed);
                Ok(Span {
                    start: 0,
                    end: len,
                    chars,
                    kind: SpanKind::Plain,
                    buf,
                })
            }
            // More strings than buffer numbers: copy this one into the arena.
            Err(_) => {
                let start = self.arena.len();
                self.arena.push_str(&backed);
                Ok(Span::new(start, self.arena.len(), chars, SpanKind::Plain))
            }
        }
    }

    fn input(&mut self, state: &Bound<'py, PyDict>, loc: Loc) -> Result<Option<Span>, Failure> {
        let Some(key) = self.keys.get(Field::Input as usize) else {
            return Ok(None);
        };
        let Some(value) = state.get_item(key)? else {
            return Ok(None);
        };
        let start = self.arena.len();
        dump_value(&value, 0, &mut self.arena, loc)?;
        Ok(Some(Span::new(
            start,
            self.arena.len(),
            0,
            SpanKind::DumpedJson,
        )))
    }
}

/// Check a `state.input` value (plain JSON, str keys, at most 64 levels) and dump it as
/// `json.dumps(v, ensure_ascii=False, separators=(",", ":"))` in the same walk.
fn dump_value(
    value: &Bound<'_, PyAny>,
    level: usize,
    out: &mut String,
    loc: Loc,
) -> Result<(), Failure> {
    let fail = |detail: &str| Failure::Input(InputError::new(loc.path(Some("input")), detail));
    if let Ok(dict) = value.cast::<PyDict>() {
        if level + 1 > e::MAX_INPUT_DEPTH {
            return Err(fail(e::INPUT_TOO_DEEP));
        }
        out.push('{');
        for (n, (key, item)) in dict.iter().enumerate() {
            let key = key
                .cast_into::<PyString>()
                .map_err(|_| fail("keys must be strings"))?;
            let key = key.to_str().map_err(|_| fail(e::LONE_SURROGATE))?;
            if n > 0 {
                out.push(',');
            }
            let _ = write_string(key, out);
            out.push(':');
            dump_value(&item, level + 1, out, loc)?;
        }
        out.push('}');
        return Ok(());
    }
    if let Some(items) = Seq::of(value) {
        if level + 1 > e::MAX_INPUT_DEPTH {
            return Err(fail(e::INPUT_TOO_DEEP));
        }
        out.push('[');
        for n in 0..items.len() {
            if n > 0 {
                out.push(',');
            }
            dump_value(&items.get(n)?, level + 1, out, loc)?;
        }
        out.push(']');
        return Ok(());
    }
    if let Ok(s) = value.cast::<PyString>() {
        let _ = write_string(s.to_str().map_err(|_| fail(e::LONE_SURROGATE))?, out);
    } else if let Ok(b) = value.cast::<PyBool>() {
        out.push_str(if b.is_true() { "true" } else { "false" });
    } else if let Ok(int) = value.cast::<PyInt>() {
        match int.extract::<i64>() {
            Ok(v) => out.push_str(&v.to_string()),
            Err(_) => {
                let repr = value
                    .py()
                    .get_type::<PyInt>()
                    .getattr(intern!(value.py(), "__repr__"))?
                    .call1((value,))?;
                out.push_str(&repr.extract::<String>()?);
            }
        }
    } else if let Ok(float) = value.cast::<PyFloat>() {
        out.push_str(&float_repr(float.value()));
    } else if value.is_none() {
        out.push_str("null");
    } else {
        let name = value.get_type().name()?;
        return Err(fail(&format!(
            "not a JSON value ({})",
            name.to_str().unwrap_or("?")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_indexed_by_field() {
        for (at, field) in ALL_FIELDS.iter().enumerate() {
            assert_eq!(*field as usize, at);
        }
    }
}
