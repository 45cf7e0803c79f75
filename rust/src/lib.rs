//! `asyncagents._core`: the Rust engine of the fork pipeline.
//!
//! Bottom up: `units` (the code units of Python strings in their own layout), `output` (where
//! written text goes: a `String`, or a render's context with those units in place), `text` and
//! `utf8` (code points, validated bytes), `errors`, `config`, `session`
//! (the internal messages), `json` (the document scanner, string decoding, Python-compatible
//! dumps), `params` (tool parameters dumped for the messages a render shows), `input` (the
//! message rules, generic over the JSON view and Python objects), `pair` (the cleared
//! marker's search), `tiers` (stage 2),
//! `transcript` and `budget` (stage 3), `compaction` (stage 1 on a parsed session), `surrogates` (the lone surrogate check of what a
//! context writes), `pipeline` (stages 2 and 3 end to end), `pystr` (the result `str`).
//! This file only assembles them for Python and releases the GIL around the work.

mod budget;
mod compaction;
mod config;
mod construct;
mod errors;
mod input;
mod json;
mod output;
mod pair;
mod params;
mod pipeline;
mod pystr;
mod session;
mod surrogates;
mod text;
mod tiers;
mod transcript;
mod units;
mod utf8;

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBool, PyBytes, PyDict, PyString, PyTuple};

use crate::config::Config;
use crate::errors::{InputError, LONE_SURROGATE, TOP_LEVEL};
use crate::input::{
    borrowed::read_borrowed, json::JsonReader, py::PySource, py::Seq, read_messages,
};
use crate::session::{Message, Part, Session, Short, Source};
use crate::utf8::Utf8Bytes;

/// A parsed session, ready to render: every message's head is checked (what stage 1 reads);
/// a body's fault counts only if the render's `kept` holds its message.
#[pyclass(frozen, module = "asyncagents._core")]
pub struct ParsedSession {
    session: Session,
    /// the fault of each body that has one, by message index (ascending)
    faults: Vec<(usize, InputError)>,
    /// the bodies of the messages from this index on were read (see `read_messages`)
    bodies_from: usize,
}

#[pymethods]
impl ParsedSession {
    fn __len__(&self) -> usize {
        self.session.messages.len()
    }

    /// The index of the oldest message whose body was read: a walk of Python objects reads
    /// only the head of each message older than the compaction boundary and its tail. A render
    /// that keeps an older one needs a walk with `every_body=True`.
    #[getter]
    fn bodies_from(&self) -> usize {
        self.bodies_from
    }

    /// What stage 1 looks at: `(count, markers, summaries)`, where `markers` lists
    /// `(index, id, [tail_start_id…])` of user messages with compaction parts and `summaries`
    /// lists `(index, parent_id)` of assistant messages whose `summary` is true. Sparse, so a
    /// long session costs no Python object per message.
    #[allow(clippy::type_complexity)]
    fn compaction_view(
        &self,
    ) -> (
        usize,
        Vec<(usize, Option<&str>, Vec<Option<&str>>)>,
        Vec<(usize, Option<&str>)>,
    ) {
        let session = &self.session;
        let messages = &session.messages;
        let text = |s: Option<Short>| s.map(|s| session.short(s));
        let markers = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| session.role(m) == Some("user") && !m.markers.is_empty())
            .map(|(i, m)| {
                let tails = m.markers.iter().map(|t| t.as_deref()).collect();
                (i, text(m.id), tails)
            })
            .collect();
        let summaries = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.summary && session.role(m) == Some("assistant"))
            .map(|(i, m)| (i, text(m.parent_id)))
            .collect();
        (messages.len(), markers, summaries)
    }

    /// Index of the first message whose `info.id` is `id`, for a marker's `tail_start_id`.
    fn index_of(&self, id: &str) -> Option<usize> {
        self.session
            .messages
            .iter()
            .position(|m| m.id.is_some_and(|own| self.session.short(own) == id))
    }

    /// Render the kept messages (indexes, in output order) with the config's numbers.
    fn render(
        &self,
        py: Python<'_>,
        kept: Vec<usize>,
        config: &Bound<'_, PyAny>,
    ) -> PyResult<RenderResult> {
        let count = self.session.messages.len();
        if let Some(bad) = kept.iter().find(|&&m| m >= count) {
            return Err(PyIndexError::new_err(format!(
                "kept index {bad} out of range for {count} messages"
            )));
        }
        if let Some(unread) = kept.iter().find(|&&m| m < self.bodies_from) {
            return Err(PyValueError::new_err(format!(
                "the body of message {unread} was not read (it lies before the compaction \
                 boundary): walk the messages with every_body=True to render it"
            )));
        }
        let config = config::cached(config)?;
        self.render_kept(py, &kept, &config)
    }

    /// Stage 1 (`compaction.rs`: the compaction slice, then the config's `fork_turns`) and the
    /// render of what it keeps, in one call: `(context, final_count, total_chars,
    /// truncated_results, removed_messages, tier1, tier2, tier3, head_tail_applied,
    /// compacted_results, hard_capped, compaction_detected, compaction_slice_index,
    /// compaction_tail_messages, turn_removed)`. `None` when stage 1 keeps a message older
    /// than `bodies_from` (rare): walk with `every_body=True` and call again. The fault of a
    /// body stage 1 keeps is raised even when `fork_turns` drops its message.
    fn fork<'py>(
        &self,
        py: Python<'py>,
        config: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let config = config::cached(config)?;
        let sliced = compaction::slice_at_compaction(&self.session);
        if sliced.kept.iter().any(|&m| m < self.bodies_from) {
            return Ok(None);
        }
        // A body's fault counts for every message stage 1 keeps, `fork_turns` or not: the
        // reference reads their bodies before it counts the user turns.
        self.check_bodies(&sliced.kept)?;
        let sliced = compaction::keep_last_turns(&self.session, sliced, config.fork_turns);
        let out = self.render_kept(py, &sliced.kept, &config)?;
        let int = |n: usize| n.into_pyobject(py).map(Bound::into_any);
        let flag = |b: bool| PyBool::new(py, b).to_owned().into_any();
        let items = [
            out.context.into_bound(py).into_any(),
            int(out.final_count)?,
            int(out.total_chars)?,
            int(out.truncated_results)?,
            int(out.removed_messages)?,
            int(out.tier1)?,
            int(out.tier2)?,
            int(out.tier3)?,
            int(out.head_tail_applied)?,
            int(out.compacted_results)?,
            flag(out.hard_capped),
            flag(sliced.detected),
            sliced.slice_index.into_pyobject(py)?.into_any(),
            int(sliced.tail_messages)?,
            int(sliced.turn_removed)?,
        ];
        PyTuple::new(py, items).map(Some)
    }
}

impl ParsedSession {
    /// Stages 2 and 3 over `kept` (in range, bodies read).
    fn render_kept(
        &self,
        py: Python<'_>,
        kept: &[usize],
        config: &Config,
    ) -> PyResult<RenderResult> {
        self.check_bodies(kept)?;
        let session = &self.session;
        let planned = py.detach(|| pipeline::plan(session, kept, config));
        let measured = match &session.source {
            // dumping parameters reads Python objects: with the GIL
            Source::Objects { inputs, .. } => {
                let mut dumper = input::py::PyDumper { py, inputs };
                pipeline::measure(session, &planned, config, &mut dumper)?
            }
            _ => {
                py.detach(|| pipeline::measure(session, &planned, config, &mut params::NoObjects))?
            }
        };
        // The lone surrogate check of what the context writes: done as the result `str` is
        // written (its code units are copied once), and only when a unit copied is one, the
        // check that names the first (`surrogates.rs`). A hard cap writes its message through
        // UTF-8, so that one is checked before.
        let out = py.detach(|| {
            if measured.hard_capped() {
                pipeline::check_shown(session, kept, &planned, &measured, config)?;
            }
            Ok::<_, InputError>(pipeline::write(session, &planned, &measured, config))
        })?;
        let written = pystr::new_str(py, &out.context, out.total_chars)?;
        if written.surrogate {
            py.detach(|| pipeline::check_shown(session, kept, &planned, &measured, config))?;
        }
        Ok(RenderResult {
            context: written.string.unbind(),
            final_count: out.final_count,
            total_chars: out.total_chars,
            truncated_results: out.counts.truncated,
            head_tail_applied: out.counts.head_tail,
            tier1: out.counts.tier1,
            tier2: out.counts.tier2,
            tier3: out.counts.tier3,
            compacted_results: out.counts.compacted,
            removed_messages: out.removed_messages,
            hard_capped: out.hard_capped,
        })
    }

    /// The fault of the first kept message whose body has one.
    fn check_bodies(&self, kept: &[usize]) -> Result<(), InputError> {
        let Some(&(first, _)) = self.faults.first() else {
            return Ok(());
        };
        let mut is_kept = vec![false; self.faults.last().map_or(0, |(m, _)| m + 1)];
        for &m in kept.iter().filter(|&&m| m >= first) {
            if let Some(slot) = is_kept.get_mut(m) {
                *slot = true;
            }
        }
        match self
            .faults
            .iter()
            .find(|(m, _)| is_kept.get(*m).copied().unwrap_or(false))
        {
            Some((_, fault)) => Err(fault.clone()),
            None => Ok(()),
        }
    }
}

/// The session of a walk of Python objects: its messages, their parts and what it kept.
fn objects_session(src: PySource<'_>, messages: Vec<Message>, parts: Vec<Part>) -> Session {
    let mut unchecked = src.unchecked;
    // the walk reads from the newest: the check finds them by message, oldest first (a
    // message's own stay in part order)
    unchecked.sort_by_key(|u| u.loc.message());
    Session {
        source: Source::Objects {
            owned: src.arena,
            strings: src.strings,
            wide: src.wide,
            unchecked,
            inputs: src.inputs,
        },
        messages,
        parts,
        shorts: src.shorts,
    }
}

/// What `ParsedSession.render` returns: the context and its numbers.
#[pyclass(frozen, get_all, module = "asyncagents._core")]
pub struct RenderResult {
    context: Py<PyString>,
    final_count: usize,
    total_chars: usize,
    truncated_results: usize,
    head_tail_applied: usize,
    tier1: usize,
    tier2: usize,
    tier3: usize,
    compacted_results: usize,
    removed_messages: usize,
    hard_capped: bool,
}

/// Scan a JSON document and read its messages (the whole document is checked first), with
/// the fault of each body that has one.
fn read_json(source: Source) -> Result<(Session, Vec<(usize, InputError)>), InputError> {
    let mut reader = JsonReader::new(source.text(0));
    if !json::scan::scan(source.text(0), &mut reader)? {
        return Err(InputError::new("messages", TOP_LEVEL));
    }
    if let Some(err) = reader.error {
        return Err(err);
    }
    let (messages, parts, shorts, faults) =
        (reader.messages, reader.parts, reader.shorts, reader.faults);
    let session = Session {
        source,
        messages,
        parts,
        shorts,
    };
    Ok((session, faults))
}

/// Parse OpenCode message JSON (a message array or an export document), releasing the GIL.
#[pyfunction(name = "parse_json")]
fn py_parse_json(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<ParsedSession> {
    let source = if let Ok(bytes) = data.cast::<PyBytes>() {
        let backed = PyBackedBytes::from(bytes.clone());
        let checked = py.detach(|| Utf8Bytes::new(backed));
        Source::Bytes(checked.ok_or_else(|| InputError::json(errors::INVALID_UTF8))?)
    } else if let Ok(text) = data.cast::<PyString>() {
        Source::Str(
            PyBackedStr::try_from(text.clone()).map_err(|_| InputError::json(LONE_SURROGATE))?,
        )
    } else {
        return Err(PyTypeError::new_err("parse_json() takes bytes or str"));
    };
    let (session, faults) = py.detach(|| read_json(source))?;
    Ok(ParsedSession {
        session,
        faults,
        bodies_from: 0,
    })
}

/// The message list of parsed input: a list or tuple, or an export document's `messages`.
fn message_list<'py>(document: &Bound<'py, PyAny>) -> PyResult<Seq<'py>> {
    if let Some(list) = Seq::of(document) {
        return Ok(list);
    }
    if let Ok(export) = document.cast::<PyDict>() {
        if let Some(list) = export.get_item(intern!(document.py(), "messages"))? {
            if let Some(list) = Seq::of(&list) {
                return Ok(list);
            }
        }
    }
    Err(InputError::new("messages", TOP_LEVEL).into())
}

/// Check and read a list of message dicts (or an export document), walking the Python objects
/// directly: every head, and the bodies stage 1 keeps (`read_messages`), or with `every_body`
/// every body. Long non-ASCII strings (texts, outputs, errors) are checked for lone surrogates
/// by the renders, as far as their contexts write them (`surrogates.rs`).
#[pyfunction(name = "from_objects", signature = (messages, every_body = false))]
fn py_from_objects(messages: &Bound<'_, PyAny>, every_body: bool) -> PyResult<ParsedSession> {
    let py = messages.py();
    let list = message_list(messages)?;
    // The common case, borrowed; anything it does not read is read again from the start,
    // with references and checked casts, which name the first fault (and keep a body's).
    let mut faults = Vec::new();
    let (src, out, parts, bodies_from) = match walk_borrowed(py, &list, every_body) {
        Some(walked) => walked,
        None => {
            let mut src = PySource::new(py);
            let (mut out, mut parts) = (Vec::new(), Vec::new());
            let bodies_from = read_messages(
                &mut src,
                &list,
                &mut out,
                &mut parts,
                &mut faults,
                every_body,
            )?;
            (src, out, parts, bodies_from)
        }
    };
    Ok(ParsedSession {
        session: objects_session(src, out, parts),
        faults,
        bodies_from,
    })
}

/// Whether the walk reads dict tables itself here (CPython 3.11 to 3.13, self-check passed):
/// for the tests, which expect it wherever the layout is known.
#[pyfunction(name = "_probes_dict_tables")]
fn py_probes_dict_tables(py: Python<'_>) -> bool {
    input::dict::probing(py)
}

/// The messages of `list` read by the borrowed walk, with what it kept and where it began to
/// read bodies; `None` where it stopped.
fn walk_borrowed<'py>(
    py: Python<'py>,
    list: &Seq<'py>,
    every_body: bool,
) -> Option<(PySource<'py>, Vec<Message>, Vec<Part>, usize)> {
    let mut src = PySource::new(py);
    let (mut out, mut parts) = (Vec::new(), Vec::new());
    let bodies_from = read_borrowed(py, &mut src, list, &mut out, &mut parts, every_body).ok()?;
    Some((src, out, parts, bodies_from))
}

/// Whether the borrowed walk reads these messages to the end, without handing them to the
/// checked walk: for the tests, which expect it of plain dicts and lists.
#[pyfunction(name = "_walks_borrowed")]
fn py_walks_borrowed(messages: &Bound<'_, PyAny>) -> PyResult<bool> {
    let list = message_list(messages)?;
    Ok(walk_borrowed(messages.py(), &list, true).is_some())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_probes_dict_tables, m)?)?;
    m.add_function(wrap_pyfunction!(py_walks_borrowed, m)?)?;
    m.add_function(wrap_pyfunction!(py_parse_json, m)?)?;
    m.add_function(wrap_pyfunction!(py_from_objects, m)?)?;
    m.add_function(wrap_pyfunction!(construct::py_construct, m)?)?;
    m.add_class::<ParsedSession>()?;
    m.add_class::<RenderResult>()?;
    Ok(())
}
