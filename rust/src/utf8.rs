//! `Utf8Bytes`: bytes proven to be UTF-8 by the only way to build one, so that reading them as
//! `&str` later needs no second check.

use pyo3::pybacked::PyBackedBytes;

/// A Python `bytes` object (immutable, kept alive) whose content is valid UTF-8.
pub struct Utf8Bytes(PyBackedBytes);

impl Utf8Bytes {
    /// Validate `bytes` (SIMD, `simdutf8`); `None` when they are not UTF-8.
    pub fn new(bytes: PyBackedBytes) -> Option<Utf8Bytes> {
        simdutf8::basic::from_utf8(&bytes).ok()?;
        Some(Utf8Bytes(bytes))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: `new` is the only constructor and it checked that these bytes are UTF-8;
        // a Python `bytes` object never changes, and `PyBackedBytes` keeps it alive.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}
