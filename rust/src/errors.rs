//! Input errors: a path (`messages[3].parts[1].state`) and a detail, raised in Python as
//! `asyncagents.errors.ForkInputError(path, detail)`; and the one mapping of core errors to
//! Python exceptions.

use std::fmt;

use pyo3::PyErr;

pyo3::import_exception!(asyncagents.errors, ForkInputError);

/// Malformed input, reported with the same path and detail as the Python reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub path: String,
    pub detail: String,
}

impl InputError {
    pub fn new(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            detail: detail.into(),
        }
    }

    /// An error of the document as a whole (path `json`).
    pub fn json(detail: impl Into<String>) -> Self {
        Self::new("json", detail)
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.detail)
    }
}

/// Why reading input stopped: bad input, or a Python error (e.g. a failing `__repr__`).
#[derive(Debug)]
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

impl From<InputError> for PyErr {
    fn from(err: InputError) -> PyErr {
        ForkInputError::new_err((err.path, err.detail))
    }
}

impl From<Failure> for PyErr {
    fn from(err: Failure) -> PyErr {
        match err {
            Failure::Input(err) => err.into(),
            Failure::Py(err) => err,
        }
    }
}

pub const EXPECTED_OBJECT: &str = "expected an object";
pub const EXPECTED_ARRAY: &str = "expected an array";
pub const EXPECTED_STRING: &str = "expected a string";
pub const EXPECTED_BOOLEAN: &str = "expected a boolean";
pub const EXPECTED_NUMBER: &str = "expected a number";
pub const MISSING: &str = "missing";
pub const LONE_SURROGATE: &str = "contains a lone surrogate";
pub const INVALID_UTF8: &str = "invalid UTF-8";
pub const TOP_LEVEL: &str =
    "expected an array of messages or an export object with a \"messages\" array";
pub const INPUT_TOO_DEEP: &str = "nested deeper than 64 levels";
pub const DOCUMENT_TOO_DEEP: &str = "nested deeper than 128 levels";

/// Deepest container nesting allowed in a whole JSON document.
pub const MAX_DOCUMENT_DEPTH: usize = 128;
/// Deepest container nesting allowed in one `state.input` value.
pub const MAX_INPUT_DEPTH: usize = 64;

/// Where in a session a field sits; the path string is only built when an error is reported.
#[derive(Debug, Clone, Copy)]
pub enum Loc {
    Message(usize),
    Info(usize),
    Error(usize),
    Data(usize),
    Part(usize, usize),
    State(usize, usize),
    Time(usize, usize),
}

impl Loc {
    /// The index of the message this location is in.
    pub fn message(self) -> usize {
        match self {
            Loc::Message(i) | Loc::Info(i) | Loc::Error(i) | Loc::Data(i) => i,
            Loc::Part(i, _) | Loc::State(i, _) | Loc::Time(i, _) => i,
        }
    }

    /// The path of this location, with `.key` appended when given.
    pub fn path(self, key: Option<&str>) -> String {
        let mut path = match self {
            Loc::Message(i) => format!("messages[{i}]"),
            Loc::Info(i) => format!("messages[{i}].info"),
            Loc::Error(i) => format!("messages[{i}].info.error"),
            Loc::Data(i) => format!("messages[{i}].info.error.data"),
            Loc::Part(i, j) => format!("messages[{i}].parts[{j}]"),
            Loc::State(i, j) => format!("messages[{i}].parts[{j}].state"),
            Loc::Time(i, j) => format!("messages[{i}].parts[{j}].state.time"),
        };
        if let Some(key) = key {
            path.push('.');
            path.push_str(key);
        }
        path
    }

    pub fn err(self, key: Option<&str>, detail: &str) -> InputError {
        InputError::new(self.path(key), detail)
    }
}
