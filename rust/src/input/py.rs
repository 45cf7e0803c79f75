//! Python dicts and lists as a `Source`, walked in place (no JSON round trip). Types are probed
//! with `cast`; keys are interned, then replaced by the caller's own key objects as the first
//! dicts show them (a lookup with the stored key object matches on identity). Long strings are
//! never copied: the session keeps the Python strings alive, ASCII ones read as the UTF-8 they
//! are, the others in their own layout (`WideStr`, checked for lone surrogates by the renders,
//! as far as they write them: `surrogates.rs`), and their length in code points is Python's
//! own (O(1)). `state.input` is checked here and kept; it is dumped (`params.rs`) only when a
//! render shows it.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::{dict, Field, Kind, PartType, Source, Status};
use crate::errors::{self as e, Failure, InputError, Loc};
use crate::json::dump::{float_repr, write_ascii_string, write_string, Full, Limited, Sink};
use crate::params::DumpInput;
use crate::session::{KeptStr, Short, Shorts, Span, SpanKind, Unchecked, WideStr};
use crate::units::Units;

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

    /// The list or tuple object.
    pub fn as_ptr(&self) -> *mut ffi::PyObject {
        match self {
            Seq::List(list) => list.as_ptr(),
            Seq::Tuple(tuple) => tuple.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Seq::List(list) => list.len(),
            Seq::Tuple(tuple) => tuple.len(),
        }
    }

    fn get(&self, index: usize) -> PyResult<Bound<'py, PyAny>> {
        if index >= self.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(
                "index out of range",
            ));
        }
        // SAFETY: `index` is in range, and no Python code runs between the check and the read
        // (the GIL is held), so the sequence cannot shrink in between.
        Ok(unsafe {
            match self {
                Seq::List(list) => list.get_item_unchecked(index),
                Seq::Tuple(tuple) => tuple.get_item_unchecked(index),
            }
        })
    }
}

/// The walk's state: what the session keeps of the objects.
pub struct PySource<'py> {
    /// the key of every field, indexed by `Field as usize`: interned at first, then the
    /// caller's own key object where one was seen (see `adopt_keys`)
    keys: [Bound<'py, PyString>; FIELDS],
    /// the hash of every key (equal texts hash alike, so adopting a key keeps it)
    hashes: [isize; FIELDS],
    /// fields whose key was not adopted yet (bit `Field as usize`)
    unadopted: u32,
    /// dicts still to look at for keys to adopt
    adopt_budget: u32,
    /// buffer 0 of the session: strings past the last buffer number, copied
    pub arena: String,
    /// buffers 1.. of the session: the long ASCII strings of the objects, kept alive
    pub strings: Vec<KeptStr>,
    /// the long strings of the objects that are not ASCII, in their own layout
    pub wide: Vec<WideStr>,
    /// `wide` strings not checked for lone surrogates yet, in walk order
    pub unchecked: Vec<Unchecked>,
    /// the checked `state.input` values, kept alive for the render
    pub inputs: Vec<Py<PyAny>>,
    /// the short strings read (role, id, tool name)
    pub shorts: Shorts,
}

/// Dicts looked at for keys to adopt, at most: the first messages have every common field.
const ADOPT_DICTS: u32 = 32;
/// The fields of nearly every message, whose keys are worth adopting.
const COMMON: [Field; 13] = [
    Field::Info,
    Field::Parts,
    Field::Role,
    Field::Id,
    Field::ParentId,
    Field::Type,
    Field::Text,
    Field::Tool,
    Field::State,
    Field::Status,
    Field::Input,
    Field::Output,
    Field::Time,
];

/// The common field whose key is `text` (one `match`, not a comparison per field: a walk
/// looks at every key of its first dicts).
fn common_field(text: &str) -> Option<Field> {
    let field = match text {
        "info" => Field::Info,
        "parts" => Field::Parts,
        "role" => Field::Role,
        "id" => Field::Id,
        "parentID" => Field::ParentId,
        "type" => Field::Type,
        "text" => Field::Text,
        "tool" => Field::Tool,
        "state" => Field::State,
        "status" => Field::Status,
        "input" => Field::Input,
        "output" => Field::Output,
        "time" => Field::Time,
        _ => return None,
    };
    Some(field)
}

impl<'py> PySource<'py> {
    /// Take the caller's key objects as ours. `json.loads` builds one `str` per distinct key
    /// of a document and shares it between all its dicts, so a lookup with that very object
    /// matches on identity; with an equal but distinct one it also compares the text.
    fn adopt_keys(&mut self, dict: &Bound<'py, PyDict>) {
        self.adopt_budget -= 1;
        let py = dict.py();
        // SAFETY: `dict` is a live dict, the GIL is held, and nothing below runs Python code
        // (a new reference to a key adopted is all that is written)
        if let Some(entries) = unsafe { dict::str_entries(py, dict.as_ptr()) } {
            // the common case, read in place: a walk from the newest can look at a dozen dicts
            // before it meets a tool part's keys, and through `dict.iter()` this cost more
            // than the walk of a short session
            for entry in entries.iter().filter(|entry| !entry.key.is_null()) {
                // SAFETY: a live key of an exact `str` key table (see above)
                let key = unsafe { Borrowed::from_ptr(py, entry.key).cast_unchecked::<PyString>() };
                if let Some(text) = ascii_text(&key) {
                    self.adopt(&key, text);
                }
            }
            return;
        }
        for (key, _) in dict.iter() {
            let Ok(key) = key.cast_into_exact::<PyString>() else {
                continue;
            };
            if let Ok(text) = key.to_str() {
                self.adopt(&key, text);
            }
        }
    }

    /// Take `key` (whose text is `text`) for the field it names, if that is a common field
    /// not adopted yet (each common key names one field).
    fn adopt(&mut self, key: &Bound<'py, PyString>, text: &str) {
        let Some(field) = common_field(text) else {
            return;
        };
        let at = field as usize;
        if self.unadopted & (1 << at) != 0 {
            if let Some(slot) = self.keys.get_mut(at) {
                *slot = key.clone();
            }
            self.unadopted &= !(1 << at);
        }
    }

    pub fn new(py: Python<'py>) -> Self {
        let keys = interned_keys(py);
        // an interned key's hash is computed once and cached on it: this cannot fail
        let hashes = keys.each_ref().map(|key| key.hash().unwrap_or(-1));
        Self {
            keys,
            hashes,
            unadopted: COMMON
                .iter()
                .fold(0, |bits, &field| bits | 1 << field as u32),
            adopt_budget: ADOPT_DICTS,
            arena: String::new(),
            strings: Vec::new(),
            wide: Vec::new(),
            unchecked: Vec::new(),
            inputs: Vec::new(),
            shorts: Shorts::default(),
        }
    }

    /// Look at a dict for keys to adopt, while there are keys to adopt and budget left.
    #[inline]
    pub(super) fn note_dict(&mut self, dict: &Bound<'py, PyDict>) {
        if self.unadopted != 0 && self.adopt_budget > 0 {
            self.adopt_keys(dict);
        }
    }

    /// Keep a checked `state.input` value for the render.
    pub(super) fn keep_input(&mut self, value: Bound<'py, PyAny>) -> Span {
        let index = self.inputs.len();
        self.inputs.push(value.unbind());
        Span::new(index, index, 0, SpanKind::PyInput)
    }

    /// A string kept in its own layout, as a span; its lone surrogate check waits for the
    /// renders that write it (`surrogates.rs`). Latin-1 strings cannot hold one.
    fn push_wide(&mut self, wide: WideStr, loc: Loc, key: &'static str) -> Option<Span> {
        let chars = wide.units().len();
        let buf = u32::try_from(self.wide.len()).ok()?;
        if wide.width() > 1 {
            self.unchecked.push(Unchecked {
                wide: self.wide.len(),
                loc,
                key,
            });
        }
        self.wide.push(wide);
        Some(Span {
            start: 0,
            end: chars,
            chars,
            kind: SpanKind::Wide,
            buf,
        })
    }

    /// A long string that is not compact (so not read in place) and has no UTF-8 form (it
    /// holds a lone surrogate), kept as an exact `str` copy of it in its own layout.
    fn wide_copy(&mut self, s: &Bound<'py, PyString>, loc: Loc, key: &'static str) -> Option<Span> {
        // SAFETY: `s` is a live `str`; `PyUnicode_FromObject` returns a new reference to an
        // exact `str` with the same characters (no Python code runs), or NULL with an error
        // set, which `from_owned_ptr_or_err` takes.
        let copy =
            unsafe { Bound::from_owned_ptr_or_err(s.py(), ffi::PyUnicode_FromObject(s.as_ptr())) }
                .ok()?;
        let copy = copy.cast_into::<PyString>().ok()?;
        if copy.is(s) {
            return None;
        }
        let wide = wide_str(&copy)?;
        self.push_wide(wide, loc, key)
    }

    /// Fields whose key was not adopted yet (bit `Field as usize`): when it changes, so do
    /// the key objects of `key`.
    pub(super) fn unadopted(&self) -> u32 {
        self.unadopted
    }

    /// The key object of `field` and its hash.
    pub(super) fn key(&self, field: Field) -> Option<(&Bound<'py, PyString>, isize)> {
        let at = field as usize;
        Some((self.keys.get(at)?, *self.hashes.get(at)?))
    }
}

pub(super) const FIELDS: usize = 23;
pub(super) const ALL_FIELDS: [Field; FIELDS] = [
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

/// The interned key of every field (`Field::key`), made once per process.
static KEYS: PyOnceLock<[Py<PyString>; FIELDS]> = PyOnceLock::new();

fn interned_keys(py: Python<'_>) -> [Bound<'_, PyString>; FIELDS] {
    KEYS.get_or_init(py, || {
        ALL_FIELDS.map(|field| PyString::intern(py, field.key()).unbind())
    })
    .each_ref()
    .map(|key| key.bind(py).clone())
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

    fn kind(&mut self, value: Self::Value) -> Kind<Self> {
        let Some(value) = value else {
            return Kind::Absent;
        };
        let value = match value.cast_into::<PyString>() {
            Ok(s) => return Kind::Str(s),
            Err(err) => err.into_inner(),
        };
        let value = match value.cast_into::<PyDict>() {
            Ok(d) => {
                self.note_dict(&d);
                return Kind::Object(d);
            }
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
        let Some((key, hash)) = self.key(field) else {
            return Ok(None);
        };
        Ok(dict::get(object, key, hash)?.filter(|v| !v.is_none()))
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

    fn short(&mut self, s: Bound<'py, PyString>, loc: Loc, key: &str) -> Result<Short, Failure> {
        Ok(self.shorts.push(short_text(&s, loc, key)?))
    }

    fn shorts(&self) -> &Shorts {
        &self.shorts
    }

    fn part_type(&mut self, s: Bound<'py, PyString>, loc: Loc) -> Result<PartType, Failure> {
        Ok(PartType::of(short_text(&s, loc, "type")?))
    }

    fn status(&mut self, s: Bound<'py, PyString>, loc: Loc) -> Result<Status, Failure> {
        Ok(Status::of(short_text(&s, loc, "status")?))
    }

    fn long(
        &mut self,
        s: Bound<'py, PyString>,
        loc: Loc,
        key: &'static str,
    ) -> Result<Span, Failure> {
        if let Some(span) = wide_str(&s).and_then(|wide| self.push_wide(wide, loc, key)) {
            return Ok(span);
        }
        let (chars, data, len) = match ascii_text(&s) {
            Some(text) => (text.len(), text.as_ptr(), text.len()),
            None => {
                // its characters as CPython keeps them, not a subclass's `__len__`
                // SAFETY: `s` is a live `str` and the GIL is held
                let chars = unsafe { ffi::PyUnicode_GetLength(s.as_ptr()) };
                let chars = usize::try_from(chars).map_err(|_| PyErr::fetch(s.py()))?;
                let Ok(text) = s.to_str() else {
                    // a lone surrogate in a string not in the compact form (a `str`
                    // subclass): its exact copy is, and waits for the render like the others
                    return self
                        .wide_copy(&s, loc, key)
                        .ok_or_else(|| lone_surrogate(loc, key));
                };
                (chars, text.as_ptr(), text.len())
            }
        };
        if len == 0 {
            return Ok(Span::EMPTY);
        }
        // SAFETY: `data` and `len` are the string's own ASCII characters, or the UTF-8 form
        // CPython keeps on it
        let backed = unsafe { KeptStr::new(s.unbind(), data, len) };
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

    fn body_fault(&self, error: Failure) -> Result<InputError, Failure> {
        match error {
            Failure::Input(fault) => Ok(fault),
            other => Err(other),
        }
    }

    fn input(&mut self, state: &Bound<'py, PyDict>, loc: Loc) -> Result<Option<Span>, Failure> {
        let Some((key, hash)) = self.key(Field::Input) else {
            return Ok(None);
        };
        let Some(value) = dict::get(state, key, hash)? else {
            return Ok(None);
        };
        check_value(&value, 0, loc)?;
        Ok(Some(self.keep_input(value)))
    }
}

/// The text of a short string (role, id, name, type, status): read in place when ASCII, else
/// through the UTF-8 form CPython makes and keeps on it.
pub(super) fn short_text<'a>(
    s: &'a Bound<'_, PyString>,
    loc: Loc,
    key: &str,
) -> Result<&'a str, Failure> {
    if let Some(text) = ascii_text(s) {
        return Ok(text);
    }
    s.to_str().map_err(|_| lone_surrogate(loc, key))
}

/// A `str` read in place: its text when it is ASCII (its characters are their own UTF-8),
/// else its code units (one, two or four bytes each, per its kind).
enum Layout<'a> {
    Ascii(&'a str),
    Units(Units<'a>),
}

/// `None` for a 3.11 legacy string not made ready, or (never seen) data not aligned for its
/// width.
fn layout<'a>(s: &'a Bound<'_, PyString>) -> Option<Layout<'a>> {
    let ptr = s.as_ptr();
    // SAFETY: `ptr` is a live `str` (we hold a reference and the GIL). A ready string's data
    // is `len` code units of `kind` bytes each (ASCII bytes when the ASCII flag is set), never
    // changed after creation, alive while the object is, which `s` (borrowed for `'a`)
    // guarantees; the alignment is checked.
    unsafe {
        #[cfg(not(Py_3_12))]
        if ffi::PyUnicode_IS_READY(ptr) == 0 {
            return None;
        }
        let len = usize::try_from(ffi::PyUnicode_GET_LENGTH(ptr)).ok()?;
        let data = ffi::PyUnicode_DATA(ptr).cast::<u8>().cast_const();
        Some(match ffi::PyUnicode_KIND(ptr) {
            ffi::PyUnicode_1BYTE_KIND => {
                let bytes = std::slice::from_raw_parts(data, len);
                if ffi::PyUnicode_IS_ASCII(ptr) != 0 {
                    Layout::Ascii(std::str::from_utf8_unchecked(bytes))
                } else {
                    Layout::Units(Units::One(bytes))
                }
            }
            ffi::PyUnicode_2BYTE_KIND if data.align_offset(2) == 0 => {
                Layout::Units(Units::Two(std::slice::from_raw_parts(data.cast(), len)))
            }
            ffi::PyUnicode_4BYTE_KIND if data.align_offset(4) == 0 => {
                Layout::Units(Units::Four(std::slice::from_raw_parts(data.cast(), len)))
            }
            _ => return None,
        })
    }
}

/// The text of an ASCII `str`, read in place without a call. `None` for other strings.
fn ascii_text<'a>(s: &'a Bound<'_, PyString>) -> Option<&'a str> {
    match layout(s)? {
        Layout::Ascii(text) => Some(text),
        Layout::Units(_) => None,
    }
}

/// A string that is not ASCII, kept in its own layout (see `WideStr`); `None` for ASCII
/// strings, for strings whose UTF-8 form CPython has cached already, and for strings not in
/// the compact form (instances of `str` subclasses, 3.11's legacy strings): those are read as
/// UTF-8.
fn wide_str(s: &Bound<'_, PyString>) -> Option<WideStr> {
    let ptr = s.as_ptr();
    // SAFETY: `ptr` is a live `str` (we hold a reference and the GIL).
    let compact_wide =
        unsafe { ffi::PyUnicode_IS_ASCII(ptr) == 0 && ffi::PyUnicode_IS_COMPACT(ptr) != 0 };
    // its UTF-8 form, once CPython has made it (so it has no lone surrogate), is read instead
    if !compact_wide || has_utf8_form(s) {
        return None;
    }
    match layout(s)? {
        Layout::Ascii(_) => None,
        // SAFETY: the units are `s`'s own, and the `WideStr` keeps `s` alive.
        Layout::Units(units) => Some(unsafe { WideStr::new(s.clone().unbind(), units) }),
    }
}

/// Whether CPython has made and kept the UTF-8 form of a compact string that is not ASCII.
fn has_utf8_form(s: &Bound<'_, PyString>) -> bool {
    let ptr = s.as_ptr();
    // SAFETY: `ptr` is a live `str` (we hold a reference and the GIL). A compact string that
    // is not ASCII is a `PyCompactUnicodeObject` (an ASCII one is not: it is checked first),
    // whose `utf8` field is set once CPython has made its UTF-8 form.
    unsafe {
        ffi::PyUnicode_IS_ASCII(ptr) == 0
            && ffi::PyUnicode_IS_COMPACT(ptr) != 0
            && !(*ptr.cast::<ffi::PyCompactUnicodeObject>()).utf8.is_null()
    }
}

/// Whether a Python string has no lone surrogate, without converting it: ASCII and Latin-1
/// strings cannot have one; wider ones are scanned in their own code units (a legacy string
/// not made ready: by the conversion).
fn surrogate_free(s: &Bound<'_, PyString>) -> bool {
    surrogate_free_in_place(s).unwrap_or_else(|| s.to_str().is_ok())
}

/// `surrogate_free` of a string read in place; `None` for one that is not (a 3.11 legacy
/// string), which only a conversion can tell.
fn surrogate_free_in_place(s: &Bound<'_, PyString>) -> Option<bool> {
    Some(match layout(s)? {
        Layout::Ascii(_) => true,
        Layout::Units(units) => !units.has_surrogate(),
    })
}

/// Check a `state.input` value as `check_input` of the reference does: plain JSON (dicts with
/// str keys, lists, tuples, str, int, float, bool, None), nested at most 64 levels, no lone
/// surrogate in any string. Nothing is written: the dump waits for the render.
fn check_value(value: &Bound<'_, PyAny>, level: usize, loc: Loc) -> Result<(), Failure> {
    // SAFETY: `value` is alive (we hold it), the GIL is held, and `clean_json` runs no
    // Python code
    if unsafe { clean_json(value.py(), value.as_ptr(), level) } {
        return Ok(());
    }
    check_value_named(value, level, loc)
}

/// Whether `value` passes `check_value`, for the common case, read with no call and no
/// reference count: exact `dict`s whose tables hold exact `str` keys, lists, tuples, `str`,
/// `int`, `float`, `bool`, `None`. `false` for a fault and for anything else (another type or
/// table): `check_value_named` then walks it all again and names the fault, if any.
///
/// # Safety
/// `value` must be alive, the GIL held, and no Python code may run meanwhile: the values
/// inside are borrowed from their containers.
pub(super) unsafe fn clean_json(py: Python<'_>, value: *mut ffi::PyObject, level: usize) -> bool {
    let kind = ffi::Py_TYPE(value);
    if kind == std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
        return str_clean(py, value);
    }
    if value == ffi::Py_None()
        || kind == std::ptr::addr_of_mut!(ffi::PyLong_Type)
        || kind == std::ptr::addr_of_mut!(ffi::PyFloat_Type)
        || kind == std::ptr::addr_of_mut!(ffi::PyBool_Type)
    {
        return true;
    }
    if level + 1 > e::MAX_INPUT_DEPTH {
        return false;
    }
    if let Some((len, item)) = exact_sequence(value) {
        return (0..len).all(|n| clean_json(py, item(value, n), level + 1));
    }
    let Some(entries) = dict::str_entries(py, value) else {
        return false;
    };
    entries.iter().all(|entry| {
        entry.value.is_null()
            || (!entry.key.is_null()
                && str_clean(py, entry.key)
                && clean_json(py, entry.value, level + 1))
    })
}

/// Reads the item at an index of a list or tuple, borrowed.
type ItemAt = unsafe fn(*mut ffi::PyObject, ffi::Py_ssize_t) -> *mut ffi::PyObject;

/// The length of `value` and how to read its items, when it is an exact `list` or `tuple`.
///
/// # Safety
/// `value` must be a live object and the GIL held.
unsafe fn exact_sequence(value: *mut ffi::PyObject) -> Option<(ffi::Py_ssize_t, ItemAt)> {
    let kind = ffi::Py_TYPE(value);
    if kind == std::ptr::addr_of_mut!(ffi::PyList_Type) {
        Some((ffi::PyList_GET_SIZE(value), ffi::PyList_GET_ITEM as ItemAt))
    } else if kind == std::ptr::addr_of_mut!(ffi::PyTuple_Type) {
        Some((
            ffi::PyTuple_GET_SIZE(value),
            ffi::PyTuple_GET_ITEM as ItemAt,
        ))
    } else {
        None
    }
}

/// `surrogate_free` of an exact `str`, read in place only: `false` for a string that is not
/// (a 3.11 legacy string, whose conversion could run the collector).
///
/// # Safety
/// As `clean_json`, and `s` is an exact `str`.
#[inline]
unsafe fn str_clean(py: Python<'_>, s: *mut ffi::PyObject) -> bool {
    // an ASCII string (the flag is set only on a ready one) holds no surrogate
    ffi::PyUnicode_IS_ASCII(s) != 0
        || surrogate_free_in_place(&Borrowed::from_ptr(py, s).cast_unchecked::<PyString>())
            .unwrap_or(false)
}

/// `check_value` the long way, through PyO3's checked casts, naming the first fault.
fn check_value_named(value: &Bound<'_, PyAny>, level: usize, loc: Loc) -> Result<(), Failure> {
    let fail = |detail: &str| Failure::Input(InputError::new(loc.path(Some("input")), detail));
    if let Ok(s) = value.cast::<PyString>() {
        return if surrogate_free(s) {
            Ok(())
        } else {
            Err(fail(e::LONE_SURROGATE))
        };
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        if level + 1 > e::MAX_INPUT_DEPTH {
            return Err(fail(e::INPUT_TOO_DEEP));
        }
        for (key, item) in dict.iter() {
            let key = key
                .cast_into::<PyString>()
                .map_err(|_| fail("keys must be strings"))?;
            if !surrogate_free(&key) {
                return Err(fail(e::LONE_SURROGATE));
            }
            check_value_named(&item, level + 1, loc)?;
        }
        return Ok(());
    }
    if let Some(items) = Seq::of(value) {
        if level + 1 > e::MAX_INPUT_DEPTH {
            return Err(fail(e::INPUT_TOO_DEEP));
        }
        for n in 0..items.len() {
            check_value_named(&items.get(n)?, level + 1, loc)?;
        }
        return Ok(());
    }
    if value.is_none()
        || value.cast::<PyBool>().is_ok()
        || value.cast::<PyInt>().is_ok()
        || value.cast::<PyFloat>().is_ok()
    {
        return Ok(());
    }
    let name = value.get_type().name()?;
    Err(fail(&format!(
        "not a JSON value ({})",
        name.to_str().unwrap_or("?")
    )))
}

/// The `state.input` values of a walked session, dumped on demand (the GIL is held).
pub struct PyDumper<'a, 'py> {
    pub py: Python<'py>,
    pub inputs: &'a [Py<PyAny>],
}

impl DumpInput for PyDumper<'_, '_> {
    fn dump(&mut self, index: usize, sink: &mut Limited<'_>) -> Result<(), Failure> {
        let Some(value) = self.inputs.get(index) else {
            return Ok(());
        };
        let mark = sink.mark();
        // SAFETY: `value` is alive (the session holds it) and the GIL is held; `dump_in_place`
        // runs no Python code.
        match unsafe { dump_in_place(self.py, value.as_ptr(), 0, sink) } {
            Ok(true) | Err(Full) => return Ok(()),
            Ok(false) => sink.rewind(mark),
        }
        match dump_value(value.bind(self.py), 0, sink) {
            Ok(()) | Err(Halt::Full) => Ok(()),
            Err(Halt::Failed(err)) => Err(err),
        }
    }
}

/// Why a dump stopped early.
enum Halt {
    /// the preview has all it needs
    Full,
    Failed(Failure),
}

impl From<Full> for Halt {
    fn from(_: Full) -> Self {
        Halt::Full
    }
}

impl From<PyErr> for Halt {
    fn from(err: PyErr) -> Self {
        Halt::Failed(Failure::Py(err))
    }
}

/// `dump_value` of a plain value, read in place with no call and no reference count, as
/// `clean_json` checks it: exact dicts whose tables hold only `str` keys, lists, tuples, `str`
/// (ASCII, or with no lone surrogate), `int` within 64 bits, `float`, `bool`, `None`.
/// `Ok(false)` as soon as anything else shows up: the caller forgets what was written and
/// dumps the value again with `dump_value`.
///
/// # Safety
/// `value` must be alive, the GIL held, and no Python code may run meanwhile: the values
/// inside are borrowed from their containers. (Nothing here calls Python code or allocates an
/// object the collector tracks: a string's UTF-8 form is made only once it is known to have no
/// lone surrogate, so that it cannot fail.)
unsafe fn dump_in_place(
    py: Python<'_>,
    value: *mut ffi::PyObject,
    level: usize,
    out: &mut Limited<'_>,
) -> Result<bool, Full> {
    let kind = ffi::Py_TYPE(value);
    if level > e::MAX_INPUT_DEPTH {
        // deeper than the walk let it be: the caller changed it since (a cycle, maybe)
        return Ok(false);
    }
    if kind == std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
        return dump_str_in_place(py, value, out);
    }
    if value == ffi::Py_None() {
        out.push_ascii("null")?;
    } else if value == ffi::Py_True() {
        out.push_ascii("true")?;
    } else if value == ffi::Py_False() {
        out.push_ascii("false")?;
    } else if kind == std::ptr::addr_of_mut!(ffi::PyLong_Type) {
        let mut overflow = 0;
        let number = ffi::PyLong_AsLongLongAndOverflow(value, &mut overflow);
        if overflow != 0 || (number == -1 && !ffi::PyErr_Occurred().is_null()) {
            ffi::PyErr_Clear();
            return Ok(false);
        }
        out.push_ascii(&number.to_string())?;
    } else if kind == std::ptr::addr_of_mut!(ffi::PyFloat_Type) {
        out.push_ascii(&float_repr(ffi::PyFloat_AS_DOUBLE(value)))?;
    } else if let Some((len, item)) = exact_sequence(value) {
        out.push_char('[')?;
        for n in 0..len {
            if n > 0 {
                out.push_char(',')?;
            }
            if !dump_in_place(py, item(value, n), level + 1, out)? {
                return Ok(false);
            }
        }
        out.push_char(']')?;
    } else if let Some(entries) = dict::str_entries(py, value) {
        out.push_char('{')?;
        let mut first = true;
        for entry in entries.iter().filter(|entry| !entry.value.is_null()) {
            if entry.key.is_null() {
                return Ok(false);
            }
            if !first {
                out.push_char(',')?;
            }
            first = false;
            if !dump_str_in_place(py, entry.key, out)? {
                return Ok(false);
            }
            out.push_char(':')?;
            if !dump_in_place(py, entry.value, level + 1, out)? {
                return Ok(false);
            }
        }
        out.push_char('}')?;
    } else {
        return Ok(false);
    }
    Ok(true)
}

/// `dump_in_place` of an exact `str`.
///
/// # Safety
/// As `dump_in_place`, and `s` is an exact `str`.
unsafe fn dump_str_in_place(
    py: Python<'_>,
    s: *mut ffi::PyObject,
    out: &mut Limited<'_>,
) -> Result<bool, Full> {
    let s = Borrowed::from_ptr(py, s).cast_unchecked::<PyString>();
    let convertible = match layout(&s) {
        Some(Layout::Ascii(text)) => {
            write_ascii_string(text, out)?;
            return Ok(true);
        }
        Some(Layout::Units(units)) => has_utf8_form(&s) || !units.has_surrogate(),
        None => false,
    };
    if !convertible {
        return Ok(false);
    }
    match s.to_str() {
        Ok(text) => write_string(text, out)?,
        Err(_) => return Ok(false),
    }
    Ok(true)
}

/// Dump a checked `state.input` value as `json.dumps(v, ensure_ascii=False,
/// separators=(",", ":"))` until the sink is full. The value was checked during the walk; a
/// caller that changed it since gets the check's error here.
fn dump_value(value: &Bound<'_, PyAny>, level: usize, out: &mut Limited<'_>) -> Result<(), Halt> {
    let changed = || {
        Halt::Failed(Failure::Py(pyo3::exceptions::PyRuntimeError::new_err(
            "a state.input value changed between reading and rendering the session",
        )))
    };
    if level > e::MAX_INPUT_DEPTH {
        // deeper than the walk let it be (a cycle, maybe): stop before the stack does
        return Err(changed());
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        out.put_char('{')?;
        for (n, (key, item)) in dict.iter().enumerate() {
            let key = key.cast_into::<PyString>().map_err(|_| changed())?;
            let key = key.to_str().map_err(|_| changed())?;
            if n > 0 {
                out.put_char(',')?;
            }
            write_string(key, out)?;
            out.put_char(':')?;
            dump_value(&item, level + 1, out)?;
        }
        out.put_char('}')?;
        return Ok(());
    }
    if let Some(items) = Seq::of(value) {
        out.put_char('[')?;
        for n in 0..items.len() {
            if n > 0 {
                out.put_char(',')?;
            }
            dump_value(&items.get(n)?, level + 1, out)?;
        }
        out.put_char(']')?;
        return Ok(());
    }
    if let Ok(s) = value.cast::<PyString>() {
        write_string(s.to_str().map_err(|_| changed())?, out)?;
    } else if let Ok(b) = value.cast::<PyBool>() {
        out.put_str(if b.is_true() { "true" } else { "false" })?;
    } else if let Ok(int) = value.cast::<PyInt>() {
        match int.extract::<i64>() {
            Ok(v) => out.put_str(&v.to_string())?,
            Err(_) => {
                let repr = value
                    .py()
                    .get_type::<PyInt>()
                    .getattr(intern!(value.py(), "__repr__"))?
                    .call1((value,))?;
                out.put_str(&repr.extract::<String>()?)?;
            }
        }
    } else if let Ok(float) = value.cast::<PyFloat>() {
        out.put_str(&float_repr(float.value()))?;
    } else if value.is_none() {
        out.put_str("null")?;
    } else {
        return Err(changed());
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

    #[test]
    fn each_common_key_names_its_field_and_no_other_key_does() {
        for field in ALL_FIELDS {
            let named = common_field(field.key());
            if COMMON.contains(&field) {
                assert_eq!(named, Some(field), "{}", field.key());
            } else if let Some(other) = named {
                // a key shared with a common field ("text"), never one of its own
                assert!(COMMON.contains(&other), "{}", field.key());
                assert_eq!(other.key(), field.key());
            }
        }
        for text in [
            "",
            "Info",
            "infos",
            "error",
            "name",
            "summary",
            "tail_start_id",
        ] {
            assert_eq!(common_field(text), None, "{text}");
        }
    }
}
