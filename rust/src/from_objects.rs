//! `from_objects`: walk Python lists and dicts directly (no JSON round trip), with the same
//! checks, paths and details as the reference. Types are probed with `cast`; key names are
//! interned. Large strings are never copied: the session keeps the Python strings alive and its
//! spans borrow their UTF-8 form (`PyBackedStr`); `state.input` is checked and dumped as Python's
//! compact JSON into a small arena in the same walk. The walk creates no Python objects.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::{self as e, InputError, Loc};
use crate::json_dump::{float_repr, write_string};
use crate::session::{Message, Part, SmallStr, Source, Span, SpanKind, ToolCall};

/// Why a walk stopped: bad input, or a Python error (e.g. a failing `__iter__`).
pub enum Failure {
    Input(InputError),
    Py(PyErr),
}

impl From<InputError> for Failure {
    fn from(err: InputError) -> Self {
        Failure::Input(err)
    }
}

impl From<PyErr> for Failure {
    fn from(err: PyErr) -> Self {
        Failure::Py(err)
    }
}

type Result<T> = std::result::Result<T, Failure>;

/// The value of `key`; `None` when absent or `None`.
fn get<'py>(
    d: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> Result<Option<Bound<'py, PyAny>>> {
    Ok(d.get_item(key)?.filter(|v| !v.is_none()))
}

fn as_str<'a>(s: &'a Bound<'_, PyString>, path: impl FnOnce() -> String) -> Result<&'a str> {
    s.to_str()
        .map_err(|_| Failure::Input(InputError::new(path(), e::LONE_SURROGATE)))
}

/// A string field, borrowed for `f` (no copy).
fn with_small<R>(
    d: &Bound<'_, PyDict>,
    key: &Bound<'_, PyString>,
    loc: Loc,
    name: &str,
    f: impl FnOnce(Option<&str>) -> R,
) -> Result<R> {
    let Some(value) = get(d, key)? else {
        return Ok(f(None));
    };
    let s = value
        .cast::<PyString>()
        .map_err(|_| loc.err(Some(name), e::EXPECTED_STRING))?;
    Ok(f(Some(as_str(s, || loc.path(Some(name)))?)))
}

/// A short string field (inline, no allocation when it fits).
fn small(
    d: &Bound<'_, PyDict>,
    key: &Bound<'_, PyString>,
    loc: Loc,
    name: &str,
) -> Result<Option<SmallStr>> {
    with_small(d, key, loc, name, |s| s.map(SmallStr::new))
}

fn object<'py>(
    d: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
    loc: Loc,
    name: &str,
) -> Result<Option<Bound<'py, PyDict>>> {
    let Some(value) = get(d, key)? else {
        return Ok(None);
    };
    match value.cast_into::<PyDict>() {
        Ok(dict) => Ok(Some(dict)),
        Err(_) => Err(loc.err(Some(name), e::EXPECTED_OBJECT).into()),
    }
}

fn non_empty(s: Option<SmallStr>) -> Option<SmallStr> {
    s.filter(|s| !s.is_empty())
}

/// A list or a tuple, iterated in place.
enum Seq<'py> {
    List(Bound<'py, PyList>),
    Tuple(Bound<'py, PyTuple>),
}

impl<'py> Seq<'py> {
    fn of(value: &Bound<'py, PyAny>) -> Option<Seq<'py>> {
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

    /// Call `f` on each item with its index, stopping at the first error.
    fn try_each<E>(
        &self,
        mut f: impl FnMut(usize, &Bound<'py, PyAny>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        match self {
            Seq::List(list) => list
                .iter()
                .enumerate()
                .try_for_each(|(j, item)| f(j, &item)),
            Seq::Tuple(tuple) => tuple
                .iter()
                .enumerate()
                .try_for_each(|(j, item)| f(j, &item)),
        }
    }
}

struct Walker<'py> {
    py: Python<'py>,
    /// buffer 0 of the session: parameter JSON dumped in the walk
    arena: String,
    /// buffers 1.. of the session: the large strings of the objects, kept alive
    strings: Vec<PyBackedStr>,
}

impl<'py> Walker<'py> {
    fn big(
        &mut self,
        d: &Bound<'py, PyDict>,
        key: &Bound<'py, PyString>,
        loc: Loc,
        name: &str,
    ) -> Result<Option<Span>> {
        let Some(value) = get(d, key)? else {
            return Ok(None);
        };
        let s = value
            .cast_into::<PyString>()
            .map_err(|_| loc.err(Some(name), e::EXPECTED_STRING))?;
        let backed = PyBackedStr::try_from(s).map_err(|_| {
            Failure::Input(InputError::new(loc.path(Some(name)), e::LONE_SURROGATE))
        })?;
        let len = backed.len();
        if len == 0 {
            return Ok(Some(Span::EMPTY));
        }
        match u32::try_from(self.strings.len() + 1) {
            Ok(buf) => {
                self.strings.push(backed);
                Ok(Some(Span {
                    start: 0,
                    end: len,
                    kind: SpanKind::Plain,
                    buf,
                }))
            }
            // More strings than buffer numbers: copy this one into the arena.
            Err(_) => {
                let start = self.arena.len();
                self.arena.push_str(&backed);
                Ok(Some(Span::new(start, self.arena.len(), SpanKind::Plain)))
            }
        }
    }

    fn message(&mut self, raw: &Bound<'py, PyAny>, i: usize) -> Result<Message> {
        let py = self.py;
        let msg = raw
            .cast::<PyDict>()
            .map_err(|_| Loc::Message(i).err(None, e::EXPECTED_OBJECT))?;
        let Some(info) = get(msg, intern!(py, "info"))? else {
            return Err(Loc::Message(i).err(Some("info"), e::MISSING).into());
        };
        let info = info
            .cast::<PyDict>()
            .map_err(|_| Loc::Message(i).err(Some("info"), e::EXPECTED_OBJECT))?;
        let iloc = Loc::Info(i);
        let role = small(info, intern!(py, "role"), iloc, "role")?;
        let id = small(info, intern!(py, "id"), iloc, "id")?;
        let parent_id = small(info, intern!(py, "parentID"), iloc, "parentID")?;
        let error_line = if role.as_deref() == Some("assistant") {
            match object(info, intern!(py, "error"), iloc, "error")? {
                None => None,
                Some(error) => {
                    let name = small(&error, intern!(py, "name"), Loc::Error(i), "name")?;
                    let detail = match object(&error, intern!(py, "data"), Loc::Error(i), "data")? {
                        Some(data) => {
                            small(&data, intern!(py, "message"), Loc::Data(i), "message")?
                        }
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
        let Some(parts) = get(msg, intern!(py, "parts"))? else {
            return Err(Loc::Message(i).err(Some("parts"), e::MISSING).into());
        };
        let Some(parts) = Seq::of(&parts) else {
            return Err(Loc::Message(i).err(Some("parts"), e::EXPECTED_ARRAY).into());
        };
        let summary = match info.get_item(intern!(py, "summary"))? {
            Some(v) => v.cast::<PyBool>().is_ok_and(|b| b.is_true()),
            None => false,
        };
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
        parts.try_each(|j, part| self.part(&mut message, &mut last_tool_name, part, i, j))?;
        Ok(message)
    }

    fn part(
        &mut self,
        message: &mut Message,
        last_tool_name: &mut Option<SmallStr>,
        part: &Bound<'py, PyAny>,
        i: usize,
        j: usize,
    ) -> Result<()> {
        let py = self.py;
        {
            let loc = Loc::Part(i, j);
            let part = part
                .cast::<PyDict>()
                .map_err(|_| loc.err(None, e::EXPECTED_OBJECT))?;
            let Some(kind) = get(part, intern!(py, "type"))? else {
                return Err(loc.err(Some("type"), e::MISSING).into());
            };
            let kind = kind
                .cast::<PyString>()
                .map_err(|_| loc.err(Some("type"), e::EXPECTED_STRING))?;
            let kind = as_str(kind, || loc.path(Some("type")))?;
            match kind {
                "text" => {
                    let text = self.big(part, intern!(py, "text"), loc, "text")?;
                    let ignored = match get(part, intern!(py, "ignored"))? {
                        None => false,
                        Some(v) => v
                            .cast::<PyBool>()
                            .map_err(|_| loc.err(Some("ignored"), e::EXPECTED_BOOLEAN))?
                            .is_true(),
                    };
                    if let Some(text) = text.filter(|t| !t.is_empty()) {
                        if !ignored {
                            message.parts.push(Part::Text(text));
                        }
                    }
                }
                "tool" => {
                    let call = self.tool(part, i, j)?;
                    *last_tool_name = Some(call.name.clone());
                    message.parts.push(Part::Tool(call));
                }
                "tool_result" => {
                    let text = self.big(part, intern!(py, "text"), loc, "text")?;
                    let tool = non_empty(small(part, intern!(py, "tool"), loc, "tool")?);
                    let alt = non_empty(small(part, intern!(py, "name"), loc, "name")?);
                    if let Some(text) = text.filter(|t| !t.is_empty()) {
                        let name = tool
                            .or(alt)
                            .or_else(|| last_tool_name.clone())
                            .unwrap_or_else(|| SmallStr::new(""));
                        message.parts.push(Part::ToolResult { name, text });
                    }
                }
                "compaction" => {
                    let tail = with_small(
                        part,
                        intern!(py, "tail_start_id"),
                        loc,
                        "tail_start_id",
                        |s| s.map(str::to_owned),
                    )?;
                    if message.role.as_deref() == Some("user") {
                        message.markers.push(tail);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn tool(&mut self, part: &Bound<'py, PyDict>, i: usize, j: usize) -> Result<ToolCall> {
        let py = self.py;
        let loc = Loc::Part(i, j);
        let tool = non_empty(small(part, intern!(py, "tool"), loc, "tool")?);
        let alt = non_empty(small(part, intern!(py, "name"), loc, "name")?);
        let name = tool.or(alt).unwrap_or_else(|| SmallStr::new("unknown"));
        let Some(state) = object(part, intern!(py, "state"), loc, "state")? else {
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
        let status = small(&state, intern!(py, "status"), sloc, "status")?;
        let input = match state.get_item(intern!(py, "input"))? {
            None => None,
            Some(value) => {
                let start = self.arena.len();
                let mut out = std::mem::take(&mut self.arena);
                let dumped = dump_value(&value, 0, &mut out, sloc);
                self.arena = out;
                dumped?;
                Some(Span::new(start, self.arena.len(), SpanKind::DumpedJson))
            }
        };
        let mut result = None;
        let mut compacted = false;
        match status.as_deref() {
            Some("completed") => {
                result = Some(
                    self.big(&state, intern!(py, "output"), sloc, "output")?
                        .unwrap_or(Span::EMPTY),
                );
                if let Some(time) = object(&state, intern!(py, "time"), sloc, "time")? {
                    if let Some(v) = get(&time, intern!(py, "compacted"))? {
                        let number = v.cast::<PyBool>().is_err()
                            && (v.cast::<PyInt>().is_ok() || v.cast::<PyFloat>().is_ok());
                        if !number {
                            return Err(Loc::Time(i, j)
                                .err(Some("compacted"), e::EXPECTED_NUMBER)
                                .into());
                        }
                        compacted = true;
                    }
                }
            }
            Some("error") => {
                result = Some(
                    self.big(&state, intern!(py, "error"), sloc, "error")?
                        .unwrap_or(Span::EMPTY),
                );
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
}

/// Check a `state.input` value (plain JSON, str keys, at most 64 levels) and dump it as
/// `json.dumps(v, ensure_ascii=False, separators=(",", ":"))` in the same walk.
fn dump_value(value: &Bound<'_, PyAny>, level: usize, out: &mut String, loc: Loc) -> Result<()> {
    let path = || loc.path(Some("input"));
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
            let key = as_str(&key, path)?;
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
        items.try_each(|n, item| {
            if n > 0 {
                out.push(',');
            }
            dump_value(item, level + 1, out, loc)
        })?;
        out.push(']');
        return Ok(());
    }
    if let Ok(s) = value.cast::<PyString>() {
        let _ = write_string(as_str(s, path)?, out);
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

/// Walk a list (or tuple) of message dicts into a session.
pub fn walk(messages: &Bound<'_, PyAny>) -> Result<(Source, Vec<Message>)> {
    let py = messages.py();
    let Some(items) = Seq::of(messages) else {
        return Err(InputError::new("messages", e::TOP_LEVEL).into());
    };
    let mut walker = Walker {
        py,
        arena: String::new(),
        strings: Vec::with_capacity(items.len()),
    };
    let mut out = Vec::with_capacity(items.len());
    items.try_each(|i, item| {
        out.push(walker.message(item, i)?);
        Ok::<(), Failure>(())
    })?;
    let source = Source::Objects {
        owned: walker.arena,
        strings: walker.strings,
    };
    Ok((source, out))
}
