//! Dict lookups for the walk. `json.loads` shares one key object per distinct key of a
//! document, and the walk looks up with those very objects (see `PySource::adopt_keys`), so
//! a lookup can match entries on identity. On the CPython versions whose table layout is
//! written down here (3.11 to 3.13, not free-threaded) the walk probes an exact `dict`'s
//! table itself, as CPython's `unicodekeys_lookup_unicode` does, with no call: a key matches
//! on identity, or, another `str` object with the same hash, on equal text. Whatever the
//! probe cannot settle (another dict type or table kind) goes to CPython's own lookup. A
//! self-check at first use compares the two and keeps the probe off if they ever disagree;
//! `ASYNCAGENTS_PORTABLE_DICTS=1` keeps it off too (the path of any other interpreter).
//! The borrowed walk (`input/borrowed.rs`) passes a hint: the entry where the same field was
//! found in the dict before, looked at first (dicts of one shape keep their keys in place).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// `PyDictUnicodeEntry`: an entry of a table whose keys are all exact `str`. A deleted entry
/// has a null key and value.
#[repr(C)]
pub struct Entry {
    pub key: *mut ffi::PyObject,
    pub value: *mut ffi::PyObject,
}

/// The value of `key` (whose hash is `hash`; -1: unknown) in `dict`, as
/// `PyDict_GetItemWithError`.
#[inline]
pub fn get<'py>(
    dict: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
    hash: isize,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if hash != -1 && table::enabled(dict.py()) {
        if let Some(found) = table::probe(dict, key, hash) {
            return Ok(found);
        }
    }
    dict.get_item(key)
}

/// The value of `key` (an exact `str` whose hash is `hash`) in `dict`, borrowed, when the
/// table settles it with no call: `Some(null)` when absent, `None` when only CPython's lookup
/// can tell (not an exact `dict` with a table of `str` keys, or the probe is off).
///
/// # Safety
/// `dict` and `key` must be live objects and the GIL held; the value is borrowed from `dict`,
/// valid only while nothing changes it.
#[inline]
pub unsafe fn get_borrowed(
    py: Python<'_>,
    dict: *mut ffi::PyObject,
    key: *mut ffi::PyObject,
    hash: isize,
    hint: &std::cell::Cell<usize>,
) -> Option<*mut ffi::PyObject> {
    if table::enabled(py) {
        table::probe_borrowed(dict, key, hash, hint)
    } else {
        None
    }
}

/// Whether the walk probes dict tables itself on this interpreter (its self-check passed).
pub fn probing(py: Python<'_>) -> bool {
    table::enabled(py)
}

/// The entries of `dict` when it is an exact `dict` with a combined table of exact `str` keys,
/// in insertion order (the order of `PyDict_Next`, deleted ones included as nulls), for a scan
/// with no call; `None` for any other dict, or where the probe is off.
///
/// # Safety
/// `dict` must be a live object, the GIL held, and no Python code may run while the entries
/// are read (nothing may change the dict).
#[inline]
pub unsafe fn str_entries<'a>(py: Python<'_>, dict: *mut ffi::PyObject) -> Option<&'a [Entry]> {
    if table::enabled(py) {
        table::entries(dict)
    } else {
        None
    }
}

/// Whether the environment asks for the portable path (`ASYNCAGENTS_PORTABLE_DICTS=1`): every
/// lookup CPython's own, as on an interpreter whose table layout is not written down here.
/// Read once, at the first walk; to compare the two paths, and as a way out should the probe
/// ever be in doubt.
#[allow(dead_code)] // read only where the layout is known
fn portable_asked() -> bool {
    std::env::var_os("ASYNCAGENTS_PORTABLE_DICTS").is_some_and(|value| value == "1")
}

/// Interpreters whose table layout is not written down here: every lookup is CPython's own.
#[cfg(not(all(Py_3_11, not(Py_3_14), not(PyPy), not(GraalPy), not(Py_GIL_DISABLED))))]
mod table {
    use pyo3::ffi;
    use pyo3::prelude::*;
    use pyo3::types::{PyDict, PyString};

    pub fn enabled(_py: Python<'_>) -> bool {
        false
    }

    pub fn probe<'py>(
        _dict: &Bound<'py, PyDict>,
        _key: &Bound<'py, PyString>,
        _hash: isize,
    ) -> Option<Option<Bound<'py, PyAny>>> {
        None
    }

    /// # Safety
    /// Nothing is read.
    pub unsafe fn probe_borrowed(
        _dict: *mut ffi::PyObject,
        _key: *mut ffi::PyObject,
        _hash: isize,
        _hint: &std::cell::Cell<usize>,
    ) -> Option<*mut ffi::PyObject> {
        None
    }

    /// # Safety
    /// Nothing is read.
    pub unsafe fn entries<'a>(_dict: *mut ffi::PyObject) -> Option<&'a [super::Entry]> {
        None
    }
}

#[cfg(all(Py_3_11, not(Py_3_14), not(PyPy), not(GraalPy), not(Py_GIL_DISABLED)))]
mod table {
    use pyo3::ffi;
    use pyo3::prelude::*;
    use pyo3::sync::PyOnceLock;
    use pyo3::types::{PyDict, PyString};
    use std::cell::Cell;

    use super::Entry as UnicodeEntry;

    /// CPython's `struct _dictkeysobject` (`Include/internal/pycore_dict.h`, the same in 3.11,
    /// 3.12 and 3.13 without free threading); the index table follows it, then the entries.
    #[repr(C)]
    struct Keys {
        refcnt: ffi::Py_ssize_t,
        log2_size: u8,
        log2_index_bytes: u8,
        kind: u8,
        version: u32,
        usable: ffi::Py_ssize_t,
        nentries: ffi::Py_ssize_t,
        indices: [u8; 0],
    }

    /// `DICT_KEYS_UNICODE`
    const KIND_UNICODE: u8 = 1;
    /// `DKIX_EMPTY`: the probe sequence ends here
    const EMPTY: i64 = -1;
    const PERTURB_SHIFT: u32 = 5;
    /// Probe steps past the table's size: enough for `perturb` to reach 0 (64 / 5 shifts).
    const PROBE_SLACK: usize = 16;

    static ENABLED: PyOnceLock<bool> = PyOnceLock::new();

    /// Whether the probe agrees with CPython's lookup on a dict built here (checked once),
    /// and `ASYNCAGENTS_PORTABLE_DICTS=1` did not ask for the portable path.
    pub fn enabled(py: Python<'_>) -> bool {
        *ENABLED.get_or_init(py, || {
            !super::portable_asked() && self_check(py).unwrap_or(false)
        })
    }

    fn self_check(py: Python<'_>) -> PyResult<bool> {
        // big enough for one-byte and two-byte index tables, with deleted entries
        for size in [3usize, 40, 300] {
            let dict = PyDict::new(py);
            let keys: Vec<Bound<'_, PyString>> = (0..size)
                .map(|n| PyString::new(py, &format!("k{n}")))
                .collect();
            for (n, key) in keys.iter().enumerate() {
                dict.set_item(key, n)?;
            }
            for key in keys.iter().step_by(7) {
                dict.del_item(key)?;
            }
            // SAFETY: `dict` is live and exact, the GIL is held, nothing runs meanwhile
            let Some(entries) = (unsafe { entries(dict.as_ptr()) }) else {
                return Ok(false);
            };
            let live = entries.iter().filter(|e| !e.value.is_null());
            let listed = dict.iter().map(|(k, v)| (k.as_ptr(), v.as_ptr()));
            if !live.map(|e| (e.key, e.value)).eq(listed) {
                return Ok(false);
            }
            let missing = PyString::new(py, "missing");
            // the same texts in other objects: matched on their text
            let copies: Vec<Bound<'_, PyString>> = keys
                .iter()
                .map(|key| PyString::new(py, key.to_str().unwrap_or("")))
                .collect();
            for key in keys.iter().chain(&copies).chain(std::iter::once(&missing)) {
                let expected = dict.get_item(key)?.map(|v| v.as_ptr());
                if let Some(found) = probe(&dict, key, key.hash()?) {
                    if found.map(|v| v.as_ptr()) != expected {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    /// The table of an exact `dict` whose combined table is of kind unicode.
    ///
    /// # Safety
    /// `ptr` is a live object and the GIL is held.
    unsafe fn unicode_table(ptr: *mut ffi::PyObject) -> Option<*const Keys> {
        if ffi::Py_TYPE(ptr) != std::ptr::addr_of_mut!(ffi::PyDict_Type) {
            return None;
        }
        let object = ptr.cast::<ffi::PyDictObject>();
        if !(*object).ma_values.is_null() {
            return None;
        }
        let keys = (*object).ma_keys.cast::<Keys>().cast_const();
        if keys.is_null() || (*keys).kind != KIND_UNICODE {
            return None;
        }
        Some(keys)
    }

    /// The entries of a table of `unicode_table`: the index table is `1 << log2_index_bytes`
    /// bytes, then come `nentries` entries in use (CPython's `DK_UNICODE_ENTRIES`).
    ///
    /// # Safety
    /// `keys` is a table of `unicode_table`, alive and unchanged for `'a`.
    unsafe fn table_entries<'a>(keys: *const Keys) -> Option<&'a [UnicodeEntry]> {
        let indices = std::ptr::addr_of!((*keys).indices).cast::<u8>();
        let entries = indices
            .add(1usize.checked_shl(u32::from((*keys).log2_index_bytes))?)
            .cast::<UnicodeEntry>();
        let count = usize::try_from((*keys).nentries).ok()?;
        if count == 0 {
            // the shared table of empty dicts has a one-byte index table, so `entries` is not
            // aligned: no slice is made from it
            return Some(&[]);
        }
        let size = 1usize.checked_shl(u32::from((*keys).log2_size))?;
        // CPython keeps `nentries` within the entries it allocated (two thirds of `size`);
        // the bound is a guard
        (count <= size).then(|| std::slice::from_raw_parts(entries, count))
    }

    /// See `super::str_entries`.
    ///
    /// # Safety
    /// As `super::str_entries`.
    pub unsafe fn entries<'a>(ptr: *mut ffi::PyObject) -> Option<&'a [UnicodeEntry]> {
        table_entries(unicode_table(ptr)?)
    }

    /// `Some(value)` (`Some(None)`: absent) when the table settles the lookup; `None` when
    /// only CPython's lookup can.
    pub fn probe<'py>(
        dict: &Bound<'py, PyDict>,
        key: &Bound<'py, PyString>,
        hash: isize,
    ) -> Option<Option<Bound<'py, PyAny>>> {
        // SAFETY: `dict` and `key` are live (borrowed) and the GIL is held
        let hint = Cell::new(usize::MAX);
        let found = unsafe { probe_borrowed(dict.as_ptr(), key.as_ptr(), hash, &hint)? };
        // SAFETY: a value of the live `dict`, borrowed from it: the new reference is ours
        Some((!found.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(dict.py(), found) }))
    }

    /// See `super::get_borrowed`.
    ///
    /// # Safety
    /// As `super::get_borrowed`.
    pub unsafe fn probe_borrowed(
        ptr: *mut ffi::PyObject,
        key: *mut ffi::PyObject,
        hash: isize,
        hint: &Cell<usize>,
    ) -> Option<*mut ffi::PyObject> {
        // SAFETY: `ptr` is a live exact `dict` (checked) and the GIL is held, so no other
        // thread changes it, and no Python code runs during the probe. Its combined table
        // (`ma_values` null) of kind unicode is laid out as `Keys`, then `1 << log2_size`
        // indices of the width `log2_size` gives, then `UnicodeEntry`s (CPython's
        // `DK_UNICODE_ENTRIES`); an index `ix >= 0` is a live entry (`ix < nentries`),
        // checked anyway. Its keys are exact `str` (what makes the table of kind unicode).
        // A probe longer than the table gives up.
        let keys = unicode_table(ptr)?;
        let indices = std::ptr::addr_of!((*keys).indices).cast::<u8>();
        let entries = indices
            .add(1usize << (*keys).log2_index_bytes)
            .cast::<UnicodeEntry>();
        let entry_count = usize::try_from((*keys).nentries).ok()?;
        // Dicts of one shape hold their keys at the same places: the entry where this key
        // was last found is looked at first. Its key object is the one looked up, so it is
        // the key's own entry (a deleted entry has none).
        let guess = hint.get();
        if guess < entry_count {
            let entry = &*entries.add(guess);
            if entry.key == key {
                return (!entry.value.is_null()).then_some(entry.value);
            }
        }
        let log2 = (*keys).log2_size;
        let size = 1usize.checked_shl(u32::from(log2))?;
        let mask = size - 1;
        let mut perturb = hash as usize;
        let mut i = hash as usize & mask;
        // A table always has an empty slot. Once `perturb` is shifted down to 0 (after 13
        // steps), `i = 5i + 1` visits every slot within `size` steps, so a probe of a sound
        // table ends within this bound; a shorter one gave up on unlucky layouts (an absent
        // key in a small, full table), which sent the walk to CPython's lookup.
        for _ in 0..size.saturating_add(PROBE_SLACK) {
            let ix: i64 = match log2 {
                0..=7 => i64::from(*indices.cast::<i8>().add(i)),
                8..=15 => i64::from(*indices.cast::<i16>().add(i)),
                16..=31 => i64::from(*indices.cast::<i32>().add(i)),
                _ => *indices.cast::<i64>().add(i),
            };
            if ix >= 0 {
                let at = usize::try_from(ix).ok()?;
                if at >= entry_count {
                    return None;
                }
                let entry = &*entries.add(at);
                if entry.key == key {
                    hint.set(at);
                    return (!entry.value.is_null()).then_some(entry.value);
                }
                if entry.key.is_null() {
                    return None;
                }
                // another key object with the same hash: equal when its text is, as
                // CPython's `unicode_eq` compares two exact `str`; else the probe goes on
                if (*entry.key.cast::<ffi::PyASCIIObject>()).hash == hash
                    && same_text(entry.key, key)?
                {
                    return (!entry.value.is_null()).then_some(entry.value);
                }
            } else if ix == EMPTY {
                return Some(std::ptr::null_mut());
            }
            perturb >>= PERTURB_SHIFT;
            i = mask & i.wrapping_mul(5).wrapping_add(perturb).wrapping_add(1);
        }
        None
    }

    /// Whether two compact `str` hold the same text (`None` when one is not compact).
    ///
    /// # Safety
    /// Both are live `str` objects and the GIL is held.
    unsafe fn same_text(a: *mut ffi::PyObject, b: *mut ffi::PyObject) -> Option<bool> {
        if ffi::PyUnicode_IS_COMPACT(a) == 0 || ffi::PyUnicode_IS_COMPACT(b) == 0 {
            return None;
        }
        let len = ffi::PyUnicode_GET_LENGTH(a);
        let kind = ffi::PyUnicode_KIND(a);
        if len != ffi::PyUnicode_GET_LENGTH(b) || kind != ffi::PyUnicode_KIND(b) {
            return Some(false);
        }
        let bytes = usize::try_from(len).ok()? * kind as usize;
        let (a, b) = (
            ffi::PyUnicode_DATA(a).cast::<u8>(),
            ffi::PyUnicode_DATA(b).cast::<u8>(),
        );
        Some(std::slice::from_raw_parts(a, bytes) == std::slice::from_raw_parts(b, bytes))
    }
}
