//! `asyncagents._core`: the Rust engine of the fork pipeline.
//!
//! `parse_json` (bytes/str) and `from_objects` (lists of dicts) build one `ParsedSession`;
//! `ParsedSession.render` runs stages 2 and 3 (tool-result tiers and truncation, parameter
//! previews, transcript, budget, hard cap) on the messages that stage 1 (Python) kept.

pub mod budget;
pub mod errors;
pub mod from_objects;
pub mod json_dump;
pub mod parse_json;
pub mod render;
pub mod session;
pub mod transcript;
pub mod truncate;

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyInt, PyString};

use crate::errors::InputError;
use crate::from_objects::Failure;
use crate::render::Config;
use crate::session::{Session, Source};

pyo3::import_exception!(asyncagents.errors, ForkInputError);

fn input_error(err: InputError) -> PyErr {
    ForkInputError::new_err((err.path, err.detail))
}

/// A parsed and checked session, ready to render.
#[pyclass(frozen, module = "asyncagents._core")]
pub struct ParsedSession {
    session: Session,
}

#[pymethods]
impl ParsedSession {
    fn __len__(&self) -> usize {
        self.session.messages.len()
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
        let messages = &self.session.messages;
        let markers = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role.as_deref() == Some("user") && !m.markers.is_empty())
            .map(|(i, m)| {
                let tails = m.markers.iter().map(|t| t.as_deref()).collect();
                (i, m.id.as_deref(), tails)
            })
            .collect();
        let summaries = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.summary && m.role.as_deref() == Some("assistant"))
            .map(|(i, m)| (i, m.parent_id.as_deref()))
            .collect();
        (messages.len(), markers, summaries)
    }

    /// Index of the first message whose `info.id` is `id`, for a marker's `tail_start_id`.
    fn index_of(&self, id: &str) -> Option<usize> {
        self.session
            .messages
            .iter()
            .position(|m| m.id.as_deref() == Some(id))
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
        let config = read_config(config)?;
        let session = &self.session;
        let out = py.detach(|| render::render(session, &kept, &config));
        Ok(RenderResult {
            context: PyString::new(py, &out.context).unbind(),
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

fn strings(value: Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    value
        .try_iter()?
        .map(|item| item?.extract::<String>())
        .collect()
}

fn read_config(config: &Bound<'_, PyAny>) -> PyResult<Config> {
    let py = config.py();
    // Numbers too big for usize act as "no limit" (Python compares them exactly).
    let int = |name: &Bound<'_, PyString>| {
        let value = config.getattr(name)?;
        match value.extract::<usize>() {
            Ok(n) => Ok(n),
            Err(_) if value.cast::<PyInt>().is_ok() && value.gt(0)? => Ok(usize::MAX),
            Err(err) => Err(err),
        }
    };
    let float = |name: &Bound<'_, PyString>| config.getattr(name)?.extract::<f64>();
    Ok(Config {
        char_budget: int(intern!(py, "char_budget"))?,
        char_no_removal: int(intern!(py, "char_no_removal"))?,
        tier1_count: int(intern!(py, "tier1_count"))?,
        tier2_count: int(intern!(py, "tier2_count"))?,
        tier2_limit: int(intern!(py, "tier2_limit"))?,
        tier3_limit: int(intern!(py, "tier3_limit"))?,
        params_tier1: int(intern!(py, "params_tier1"))?,
        params_tier2: int(intern!(py, "params_tier2"))?,
        params_tier3: int(intern!(py, "params_tier3"))?,
        head_ratio: float(intern!(py, "head_ratio"))?,
        tail_ratio: float(intern!(py, "tail_ratio"))?,
        error_patterns: strings(config.getattr(intern!(py, "error_patterns"))?)?,
        head_tail_keywords: strings(config.getattr(intern!(py, "head_tail_keywords"))?)?,
        cleared_marker: config
            .getattr(intern!(py, "cleared_marker"))?
            .extract::<String>()?,
    })
}

/// Parse OpenCode message JSON (a message array or an export document), releasing the GIL.
#[pyfunction(name = "parse_json")]
fn py_parse_json(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<ParsedSession> {
    let (source, parsed) = if let Ok(bytes) = data.cast::<PyBytes>() {
        let backed = PyBackedBytes::from(bytes.clone());
        let parsed = py.detach(|| parse_json::parse_bytes(&backed));
        (Source::Bytes(backed), parsed)
    } else if let Ok(text) = data.cast::<PyString>() {
        let backed = PyBackedStr::try_from(text.clone())
            .map_err(|_| input_error(InputError::json(errors::LONE_SURROGATE)))?;
        let parsed = py.detach(|| parse_json::parse_document(&backed));
        (Source::Str(backed), parsed)
    } else {
        return Err(PyTypeError::new_err("parse_json() takes bytes or str"));
    };
    let messages = parsed.map_err(input_error)?;
    Ok(ParsedSession {
        session: Session { source, messages },
    })
}

/// Check and read a list of message dicts, walking the Python objects directly.
#[pyfunction(name = "from_objects")]
fn py_from_objects(messages: &Bound<'_, PyAny>) -> PyResult<ParsedSession> {
    match from_objects::walk(messages) {
        Ok((source, messages)) => Ok(ParsedSession {
            session: Session { source, messages },
        }),
        Err(Failure::Input(err)) => Err(input_error(err)),
        Err(Failure::Py(err)) => Err(err),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_parse_json, m)?)?;
    m.add_function(wrap_pyfunction!(py_from_objects, m)?)?;
    m.add_class::<ParsedSession>()?;
    m.add_class::<RenderResult>()?;
    Ok(())
}
