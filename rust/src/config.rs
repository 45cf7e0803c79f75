//! `Config`: the `ForkConfig` fields, read once per render from the Python model by attribute
//! name (`FromPyObject`). Its defaults mirror `asyncagents.constants` for the Rust tests only;
//! Python always passes a config.

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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            char_budget: 200_000,
            char_no_removal: 120_000,
            tier1_count: 5,
            tier2_count: 10,
            tier2_limit: 3000,
            tier3_limit: 500,
            params_tier1: 500,
            params_tier2: 200,
            params_tier3: 100,
            head_ratio: 0.8,
            tail_ratio: 0.2,
            error_patterns: [
                "error",
                "Error",
                "ERROR",
                "failed",
                "FAILED",
                "exception",
                "traceback",
            ]
            .map(String::from)
            .to_vec(),
            head_tail_keywords: ["bash", "pty", "exec"].map(String::from).to_vec(),
            cleared_marker: "[Old tool result content cleared]".to_owned(),
        }
    }
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
