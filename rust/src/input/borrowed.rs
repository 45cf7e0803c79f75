//! The walk of the common case with borrowed pointers: exact `list`s, `tuple`s, `dict`s whose
//! tables hold `str` keys, `str`, `int`, `float`, `bool` and `None`, read in place with no
//! reference count (except on what the session keeps) and no call that could run Python code.
//! Anything else stops it: another type, a table only CPython's lookup can read, any fault.
//! `from_objects` then walks again with `PySource`, which reads every case and names the
//! fault. Both go through the same message rules (`read_messages`), so they agree by
//! construction; this one only does without the references and checked casts that the other
//! needs where Python code could run between two reads.

use std::cell::Cell;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use super::lookahead::Lookahead;
use super::py::{clean_json, short_text, PySource, Seq, FIELDS};
use super::{dict, read_messages, Field, Kind, PartType, Source, Status};
use crate::errors::{InputError, Loc};
use crate::session::{Message, Part, Short, Shorts, Span};

/// The borrowed walk stopped: `PySource` walks again from the start.
#[derive(Debug)]
pub struct Stop;

impl From<InputError> for Stop {
    fn from(_: InputError) -> Self {
        Stop
    }
}

/// An object borrowed from its container; null for absent (or `None`).
#[derive(Clone, Copy)]
pub struct Obj(*mut ffi::PyObject);

/// An exact `list` or `tuple` (a `list` subclass read as a `list`), and its length.
#[derive(Clone, Copy)]
pub struct Items {
    seq: *mut ffi::PyObject,
    list: bool,
    len: usize,
}

/// The walk's state: `PySource`'s, which keeps what the session needs, and where in its dict
/// each field was found last (`dict::get_borrowed`).
struct BorrowedSource<'a, 'py> {
    py: Python<'py>,
    inner: &'a mut PySource<'py>,
    hints: [Cell<usize>; FIELDS],
    ahead: Lookahead,
}

/// Read the messages of `list` as `read_messages` does with a `PySource`, borrowed. On
/// `Err(Stop)` what `src`, `messages` and `parts` hold is to be thrown away. A fault stops
/// the walk, in a body too, so nothing is ever kept in `faults`.
pub fn read_borrowed<'py>(
    py: Python<'py>,
    src: &mut PySource<'py>,
    list: &Seq<'py>,
    messages: &mut Vec<Message>,
    parts: &mut Vec<Part>,
    every_body: bool,
) -> Result<usize, Stop> {
    if !dict::probing(py) {
        return Err(Stop);
    }
    // SAFETY: `list` is a live list or tuple (we hold it) and the GIL is held
    let items = unsafe { items_of(list.as_ptr()) }.ok_or(Stop)?;
    let mut source = BorrowedSource {
        py,
        inner: src,
        hints: std::array::from_fn(|_| Cell::new(usize::MAX)),
        ahead: Lookahead::new(),
    };
    // Nothing below runs Python code (see `Source for BorrowedSource`), so every object
    // reached stays alive and unchanged while it is read.
    read_messages(
        &mut source,
        &items,
        messages,
        parts,
        &mut Vec::new(),
        every_body,
    )
}

/// The items of a `list` (or subclass: the same layout) or an exact `tuple`.
///
/// # Safety
/// `seq` is a live object and the GIL is held.
unsafe fn items_of(seq: *mut ffi::PyObject) -> Option<Items> {
    let list = ffi::PyList_Check(seq) != 0;
    if !list && ffi::Py_TYPE(seq) != std::ptr::addr_of_mut!(ffi::PyTuple_Type) {
        return None;
    }
    let len = if list {
        ffi::PyList_GET_SIZE(seq)
    } else {
        ffi::PyTuple_GET_SIZE(seq)
    };
    Some(Items {
        seq,
        list,
        len: usize::try_from(len).ok()?,
    })
}

impl Items {
    /// The address of the first item (of `len` in a row).
    ///
    /// # Safety
    /// `seq` is live and the GIL is held.
    unsafe fn base(&self) -> *const *mut ffi::PyObject {
        if self.list {
            (*self.seq.cast::<ffi::PyListObject>()).ob_item.cast_const()
        } else {
            (*self.seq.cast::<ffi::PyTupleObject>()).ob_item.as_ptr()
        }
    }
}

/// # Safety
/// `s` is a live exact `str` (a `Kind::Str` of a `BorrowedSource`), alive for `'a`, and the
/// GIL is held.
unsafe fn str_at<'a, 'py>(py: Python<'py>, s: Obj) -> Borrowed<'a, 'py, PyString> {
    Borrowed::from_ptr(py, s.0).cast_unchecked::<PyString>()
}

impl<'py> BorrowedSource<'_, 'py> {
    fn lookup(&self, object: *mut ffi::PyObject, field: Field) -> Result<Obj, Stop> {
        let (key, hash) = self.inner.key(field).ok_or(Stop)?;
        // SAFETY: `object` is a live dict (a `Kind::Object` of this source), `key` a live
        // `str` we hold, and the GIL is held
        let hint = self.hints.get(field as usize).ok_or(Stop)?;
        let found =
            unsafe { dict::get_borrowed(self.py, object, key.as_ptr(), hash, hint) }.ok_or(Stop)?;
        // SAFETY: `Py_None` only reads the address of the singleton
        Ok(Obj(if found == unsafe { ffi::Py_None() } {
            std::ptr::null_mut()
        } else {
            found
        }))
    }
}

// SAFETY (for every `unsafe` block below): the objects are borrowed from containers that the
// caller's list holds, the GIL is held, and no method here runs Python code: reads of object
// fields, the dict probe, `PyDict_Next` (adopting keys), CPython's UTF-8 form of a string
// (`PyUnicode_AsUTF8AndSize`), and new references to what the session keeps. So nothing is
// freed or changed while the walk goes on.
impl<'py> Source for BorrowedSource<'_, 'py> {
    type Value = Obj;
    type Object = Obj;
    type Array = Items;
    type Str = Obj;
    type Error = Stop;

    fn kind(&mut self, value: Obj) -> Kind<Self> {
        let ptr = value.0;
        if ptr.is_null() {
            return Kind::Absent;
        }
        // SAFETY: see above
        unsafe {
            let kind = ffi::Py_TYPE(ptr);
            if kind == std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
                return Kind::Str(value);
            }
            if kind == std::ptr::addr_of_mut!(ffi::PyDict_Type) {
                let dict = Borrowed::from_ptr(self.py, ptr).cast_unchecked::<PyDict>();
                self.inner.note_dict(&dict);
                return Kind::Object(value);
            }
            if kind == std::ptr::addr_of_mut!(ffi::PyList_Type)
                || kind == std::ptr::addr_of_mut!(ffi::PyTuple_Type)
            {
                if let Some(items) = items_of(ptr) {
                    return Kind::Array(items);
                }
            }
            if ptr == ffi::Py_True() {
                return Kind::Bool(true);
            }
            if ptr == ffi::Py_False() {
                return Kind::Bool(false);
            }
            if kind == std::ptr::addr_of_mut!(ffi::PyLong_Type)
                || kind == std::ptr::addr_of_mut!(ffi::PyFloat_Type)
            {
                return Kind::Number;
            }
        }
        // a subclass, or not JSON: the rules refuse it, so the walk stops and `PySource`
        // reads it
        Kind::Other
    }

    fn get(&self, object: &Obj, field: Field) -> Result<Obj, Stop> {
        self.lookup(object.0, field)
    }

    fn len(&self, array: &Items) -> usize {
        array.len
    }

    fn item(&self, array: &Items, index: usize) -> Result<Obj, Stop> {
        if index >= array.len {
            return Err(Stop);
        }
        let at = ffi::Py_ssize_t::try_from(index).map_err(|_| Stop)?;
        // SAFETY: see above; `index` is in range of the length read when the array was met,
        // which nothing has changed since
        let item = unsafe {
            if array.list {
                ffi::PyList_GET_ITEM(array.seq, at)
            } else {
                ffi::PyTuple_GET_ITEM(array.seq, at)
            }
        };
        // SAFETY: only the address of the singleton is read
        Ok(Obj(if item == unsafe { ffi::Py_None() } {
            std::ptr::null_mut()
        } else {
            item
        }))
    }

    fn is_true(&self, value: &Obj) -> bool {
        // SAFETY: only the address of the singleton is read
        value.0 == unsafe { ffi::Py_True() }
    }

    fn short(&mut self, s: Obj, loc: Loc, key: &str) -> Result<Short, Stop> {
        // SAFETY: see above
        let s = unsafe { str_at(self.py, s) };
        let text = short_text(&s, loc, key).map_err(|_| Stop)?;
        Ok(self.inner.shorts.push(text))
    }

    fn shorts(&self) -> &Shorts {
        &self.inner.shorts
    }

    fn part_type(&mut self, s: Obj, loc: Loc) -> Result<PartType, Stop> {
        // SAFETY: see above
        let s = unsafe { str_at(self.py, s) };
        Ok(PartType::of(short_text(&s, loc, "type").map_err(|_| Stop)?))
    }

    fn status(&mut self, s: Obj, loc: Loc) -> Result<Status, Stop> {
        // SAFETY: see above
        let s = unsafe { str_at(self.py, s) };
        Ok(Status::of(short_text(&s, loc, "status").map_err(|_| Stop)?))
    }

    fn long(&mut self, s: Obj, loc: Loc, key: &'static str) -> Result<Span, Stop> {
        // SAFETY: see above; the session keeps its own reference
        let s = unsafe { str_at(self.py, s) }.to_owned();
        self.inner.long(s, loc, key).map_err(|_| Stop)
    }

    /// Never kept: `PySource` walks again and names it.
    fn body_fault(&self, _error: Stop) -> Result<InputError, Stop> {
        Err(Stop)
    }

    #[inline(always)]
    fn ahead(&mut self, list: &Items, index: usize, bodies: bool) {
        self.ahead.read_bodies(bodies);
        // SAFETY: see above; `list` is the message list (only it is read ahead of)
        unsafe {
            self.ahead.step(
                self.py,
                self.inner,
                list.base(),
                list.len,
                index,
                &self.hints,
            )
        };
    }

    fn input(&mut self, state: &Obj, _loc: Loc) -> Result<Option<Span>, Stop> {
        let (key, hash) = self.inner.key(Field::Input).ok_or(Stop)?;
        // SAFETY: see above
        let hint = self.hints.get(Field::Input as usize).ok_or(Stop)?;
        let found = unsafe { dict::get_borrowed(self.py, state.0, key.as_ptr(), hash, hint) }
            .ok_or(Stop)?;
        if found.is_null() {
            return Ok(None);
        }
        // SAFETY: see above (a present `None` is a value here); a value the in-place check
        // cannot pass stops the walk, and `PySource` names its fault
        if !unsafe { clean_json(self.py, found, 0) } {
            return Err(Stop);
        }
        // SAFETY: see above; the session keeps its own reference
        let value = unsafe { Bound::from_borrowed_ptr(self.py, found) };
        Ok(Some(self.inner.keep_input(value)))
    }
}
