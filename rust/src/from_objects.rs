//! `from_objects`: walk Python lists and dicts directly (no JSON round trip), with the same
//! checks, paths and details as the reference. Types are probed with `cast`; key names are
//! interned. Large strings are copied once into an arena that the session's spans point into;
//! `state.input` is checked and dumped there as Python's compact JSON in the same walk.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::{self as e, InputError, Loc};
use crate::json_dump::{float_repr, write_string};
use crate::session::{Message, Part, Source, Span, SpanKind, ToolCall};

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

fn small(
    d: &Bound<'_, PyDict>,
    key: &Bound<'_, PyString>,
    loc: Loc,
    name: &str,
) -> Result<Option<String>> {
    let Some(value) = get(d, key)? else {
        return Ok(None);
    };
    let s = value
        .cast::<PyString>()
        .map_err(|_| loc.err(Some(name), e::EXPECTED_STRING))?;
    Ok(Some(as_str(s, || loc.path(Some(name)))?.to_owned()))
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

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

struct Walker<'py> {
    py: Python<'py>,
    arena: String,
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
            .cast::<PyString>()
            .map_err(|_| loc.err(Some(name), e::EXPECTED_STRING))?;
        let text = as_str(s, || loc.path(Some(name)))?;
        let start = self.arena.len();
        self.arena.push_str(text);
        Ok(Some(Span {
            start,
            end: self.arena.len(),
            kind: SpanKind::Plain,
        }))
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
        let parts: Vec<Bound<'py, PyAny>> = if let Ok(list) = parts.cast::<PyList>() {
            list.iter().collect()
        } else if let Ok(tuple) = parts.cast::<PyTuple>() {
            tuple.iter().collect()
        } else {
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
        let mut last_tool_name: Option<String> = None;
        for (j, part) in parts.iter().enumerate() {
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
                    last_tool_name = Some(call.name.clone());
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
                            .unwrap_or_default();
                        message.parts.push(Part::ToolResult { name, text });
                    }
                }
                "compaction" => {
                    let tail = small(part, intern!(py, "tail_start_id"), loc, "tail_start_id")?;
                    if message.role.as_deref() == Some("user") {
                        message.markers.push(tail);
                    }
                }
                _ => {}
            }
        }
        Ok(message)
    }

    fn tool(&mut self, part: &Bound<'py, PyDict>, i: usize, j: usize) -> Result<ToolCall> {
        let py = self.py;
        let loc = Loc::Part(i, j);
        let tool = non_empty(small(part, intern!(py, "tool"), loc, "tool")?);
        let alt = non_empty(small(part, intern!(py, "name"), loc, "name")?);
        let name = tool.or(alt).unwrap_or_else(|| "unknown".to_owned());
        let Some(state) = object(part, intern!(py, "state"), loc, "state")? else {
            return Ok(ToolCall {
                name,
                has_state: false,
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
                Some(Span {
                    start,
                    end: self.arena.len(),
                    kind: SpanKind::DumpedJson,
                })
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
            has_state: true,
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
    let items = if let Ok(list) = value.cast::<PyList>() {
        Some(list.iter().collect::<Vec<_>>())
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        Some(tuple.iter().collect::<Vec<_>>())
    } else {
        None
    };
    if let Some(items) = items {
        if level + 1 > e::MAX_INPUT_DEPTH {
            return Err(fail(e::INPUT_TOO_DEEP));
        }
        out.push('[');
        for (n, item) in items.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            dump_value(item, level + 1, out, loc)?;
        }
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
    let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = messages.cast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = messages.cast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        return Err(InputError::new("messages", e::TOP_LEVEL).into());
    };
    let mut walker = Walker {
        py,
        arena: String::new(),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(walker.message(item, i)?);
    }
    Ok((Source::Owned(walker.arena), out))
}
