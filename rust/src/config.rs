//! `Config`: the `ForkConfig` fields, read from the Python model by attribute name
//! (`FromPyObject`), once per config object (`cached`). Python always passes a config; the
//! crate's tests take the defaults of `asyncagents.constants`, which `build.rs` reads.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyInt;

/// A limit; a Python int too big for `usize` acts as "no limit" (Python compares exactly).
fn limit(value: &Bound<'_, PyAny>) -> PyResult<usize> {
    match value.extract::<usize>() {
        Ok(n) => Ok(n),
        Err(_) if value.cast::<PyInt>().is_ok() && value.gt(0)? => Ok(usize::MAX),
        Err(err) => Err(err),
    }
}

/// An optional limit (`fork_turns`): `None` stays `None`.
fn optional_limit(value: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if value.is_none() {
        Ok(None)
    } else {
        limit(value).map(Some)
    }
}

/// The tunables of stages 2 and 3.
#[derive(Debug, Clone, FromPyObject)]
pub struct Config {
    #[pyo3(attribute, from_py_with = limit)]
    pub char_budget: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub char_no_removal: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub tier1_count: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub tier2_count: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub tier2_limit: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub tier3_limit: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub params_tier1: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub params_tier2: usize,
    #[pyo3(attribute, from_py_with = limit)]
    pub params_tier3: usize,
    #[pyo3(attribute)]
    pub head_ratio: f64,
    #[pyo3(attribute)]
    pub tail_ratio: f64,
    #[pyo3(attribute)]
    pub error_patterns: Vec<String>,
    #[pyo3(attribute)]
    pub head_tail_keywords: Vec<String>,
    #[pyo3(attribute)]
    pub cleared_marker: String,
    #[pyo3(attribute, from_py_with = optional_limit)]
    pub fork_turns: Option<usize>,
}

/// The last config object read and what was read from it. It is held (so its address names
/// no other object while it is here) and frozen (`ForkConfig` is a frozen model), so the same
/// object gives the same values: reading its 15 attributes again cost more than a small
/// session's render.
static LAST: Mutex<Option<(Py<PyAny>, Arc<Config>)>> = Mutex::new(None);

/// The values of `config`, read once per config object (the last one is kept).
pub fn cached(config: &Bound<'_, PyAny>) -> PyResult<Arc<Config>> {
    if let Ok(last) = LAST.lock() {
        if let Some((object, values)) = last.as_ref() {
            if object.as_ptr() == config.as_ptr() {
                return Ok(Arc::clone(values));
            }
        }
    }
    let values = Arc::new(config.extract::<Config>()?);
    // the old object is released after the lock (its drop may run Python code)
    let old = LAST
        .lock()
        .ok()
        .and_then(|mut last| last.replace((config.clone().unbind(), Arc::clone(&values))));
    drop(old);
    Ok(values)
}

impl Config {
    /// Tier (1, 2, 3) of the result numbered `index` from the newest.
    pub fn tier_of(&self, index: usize) -> u8 {
        if index < self.tier1_count {
            1
        } else if index < self.tier1_count.saturating_add(self.tier2_count) {
            2
        } else {
            3
        }
    }

    pub fn result_limit(&self, tier: u8) -> Option<usize> {
        match tier {
            1 => None,
            2 => Some(self.tier2_limit),
            _ => Some(self.tier3_limit),
        }
    }

    pub fn params_limit(&self, tier: u8) -> usize {
        match tier {
            1 => self.params_tier1,
            2 => self.params_tier2,
            _ => self.params_tier3,
        }
    }
}

/// `ForkConfig()`'s values for the crate's tests: the seed's constants, from
/// `python/asyncagents/constants.py` (written by `build.rs`).
#[cfg(test)]
mod defaults {
    use super::Config;

    include!(concat!(env!("OUT_DIR"), "/constants.rs"));

    impl Default for Config {
        fn default() -> Self {
            let strings = |items: &[&str]| items.iter().map(|item| item.to_string()).collect();
            Self {
                char_budget: FORK_CHAR_BUDGET,
                char_no_removal: FORK_CHAR_NO_REMOVAL,
                tier1_count: FORK_TIER1_COUNT,
                tier2_count: FORK_TIER2_COUNT,
                tier2_limit: FORK_TIER2_LIMIT,
                tier3_limit: FORK_TIER3_LIMIT,
                params_tier1: FORK_PARAMS_TIER1,
                params_tier2: FORK_PARAMS_TIER2,
                params_tier3: FORK_PARAMS_TIER3,
                head_ratio: FORK_HEAD_RATIO,
                tail_ratio: FORK_TAIL_RATIO,
                error_patterns: strings(FORK_ERROR_PATTERNS),
                head_tail_keywords: strings(FORK_HEAD_TAIL_KEYWORDS),
                cleared_marker: FORK_CLEARED_MARKER.to_owned(),
                fork_turns: None,
            }
        }
    }
}
