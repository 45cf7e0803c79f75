//! Loading the next messages' objects into the cache while the borrowed walk reads one (the
//! walk reads from the newest, so the next ones are the older ones).
//!
//! The walk of a message list waits on memory: each object is found only by reading the one
//! above it (the message dict, its table, `parts`, each part dict, its table, `state`, …), and
//! on a list `json.loads` has just built, or any list too big for the cache, nearly every
//! one of those reads is a miss. Before message `i` is read, `Lookahead::step` goes one level
//! deeper into each of the messages before it (`i - 1`, `i - 2`, …): the message `DEPTH`
//! ahead gets its dict loaded, the next one its deepest level. Each level's objects are found
//! from the level above, loaded a step earlier, so the misses of several messages overlap
//! instead of following one another. Of a dict only the values the walk reads are loaded,
//! each looked for at the entry where the walk found the same field last (its hints: dicts of
//! one shape keep their keys in place); once the walk reads only heads, only the levels a head
//! reads. Only reads and prefetch hints: no reference count, no call, nothing written to the
//! objects; anything that is not an exact `dict` or `list` is left to the walk.

use std::cell::Cell;

use pyo3::ffi;
use pyo3::prelude::*;

use super::dict;
use super::dict::Entry;
use super::py::{PySource, ALL_FIELDS as ALL, FIELDS};
use super::Field;

/// The fields of `info`, of a part and of a `state` whose values the walk reads.
const INFO_FIELDS: [Field; 5] = [
    Field::Role,
    Field::Id,
    Field::ParentId,
    Field::Summary,
    Field::InfoError,
];
const PART_FIELDS: [Field; 5] = [
    Field::Type,
    Field::Text,
    Field::Tool,
    Field::PartName,
    Field::State,
];
const STATE_FIELDS: [Field; 5] = [
    Field::Status,
    Field::Input,
    Field::Output,
    Field::StateError,
    Field::Time,
];
/// The fields of a `state` whose values are dicts the walk reads into.
const STATE_DICTS: [Field; 2] = [Field::Input, Field::Time];

/// How many messages ahead the message dict is loaded; one level deeper each message after.
const DEPTH: usize = 10;
/// Messages whose derived pointers are kept (a power of two above `DEPTH`).
const RING: usize = 16;
/// The parts of a message looked at, at most (a longer list's other parts are the walk's).
const PARTS: usize = 16;
const _: () = assert!(DEPTH < RING && RING.is_power_of_two());

/// What a message's upper levels gave, for the deeper ones.
#[derive(Clone, Copy)]
struct Found {
    info: *mut ffi::PyObject,
    parts: *mut ffi::PyObject,
    /// the item array of `parts` (null until loaded) and how many of its parts to look at
    items: *const *mut ffi::PyObject,
    count: usize,
    /// the `state` of each part looked at (null: none found)
    states: [*mut ffi::PyObject; PARTS],
}

const NOTHING: Found = Found {
    info: std::ptr::null_mut(),
    parts: std::ptr::null_mut(),
    items: std::ptr::null(),
    count: 0,
    states: [std::ptr::null_mut(); PARTS],
};

/// The look-ahead of one walk.
pub struct Lookahead {
    ring: [Found; RING],
    /// the key object of each field that the walk looks up with now
    keys: [*mut ffi::PyObject; FIELDS],
    /// `PySource::unadopted` when `keys` were taken (`u32::MAX`: never)
    taken_at: u32,
    /// the walk reads bodies (see `read_bodies`)
    bodies: bool,
}

#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// The header of an object and the words after it (a dict's `ma_keys`, a list's `ob_item`,
/// a short string's characters).
#[inline(always)]
fn prefetch_object(object: *mut ffi::PyObject) {
    let at = object.cast::<u8>().cast_const();
    prefetch(at);
    prefetch(at.wrapping_add(32));
}

/// The table of an exact dict: its header, index and first entries.
///
/// # Safety
/// `object` is a live object and the GIL is held.
#[inline(always)]
unsafe fn prefetch_table(object: *mut ffi::PyObject) {
    if ffi::Py_TYPE(object) == std::ptr::addr_of_mut!(ffi::PyDict_Type) {
        let keys = (*object.cast::<ffi::PyDictObject>()).ma_keys.cast::<u8>();
        if !keys.is_null() {
            prefetch(keys);
            prefetch(keys.wrapping_add(64));
            prefetch(keys.wrapping_add(128));
        }
    }
}

/// `load` the value of each of `fields` that `hinted` finds in `entries`.
#[inline(always)]
fn load_values(
    entries: &[Entry],
    fields: &[Field],
    hinted: impl Fn(&[Entry], Field) -> *mut ffi::PyObject,
    load: impl Fn(*mut ffi::PyObject),
) {
    for &field in fields {
        let value = hinted(entries, field);
        if !value.is_null() {
            load(value);
        }
    }
}

impl Lookahead {
    pub fn new() -> Self {
        Lookahead {
            ring: [NOTHING; RING],
            keys: [std::ptr::null_mut(); FIELDS],
            taken_at: u32::MAX,
            bodies: true,
        }
    }

    /// Whether the walk still reads bodies: once it reads only heads, only the levels down to
    /// the values of `info` are loaded (a user message's parts are left to the walk).
    pub fn read_bodies(&mut self, bodies: bool) {
        self.bodies = bodies;
    }

    /// One step before message `index` of the `len` items at `items` is read.
    ///
    /// # Safety
    /// `items` holds the `len` live items of the message list, the GIL is held, and no Python
    /// code runs during the walk (nothing changes the objects).
    pub unsafe fn step(
        &mut self,
        py: Python<'_>,
        src: &PySource<'_>,
        items: *const *mut ffi::PyObject,
        len: usize,
        index: usize,
        hints: &[Cell<usize>; FIELDS],
    ) {
        if self.taken_at != src.unadopted() {
            self.keys = ALL.map(|field| {
                src.key(field)
                    .map_or(std::ptr::null_mut(), |(key, _)| key.as_ptr())
            });
            self.taken_at = src.unadopted();
        }
        let key = |field: Field| self.keys[field as usize];
        let (info_key, parts_key) = (key(Field::Info), key(Field::Parts));
        // the value of `field` in `entries` (null: none), looked for only at the entry where
        // the walk found that field last
        let hinted =
            |entries: &[Entry], field: Field| match entries.get(hints[field as usize].get()) {
                Some(entry) if entry.key == key(field) => entry.value,
                _ => std::ptr::null_mut(),
            };
        // the entries of `dict` (none for null or a dict the probe cannot read)
        let entries = |dict: *mut ffi::PyObject| {
            if dict.is_null() {
                &[]
            } else {
                dict::str_entries(py, dict).unwrap_or(&[])
            }
        };
        // the walk reads from the newest: the messages ahead of it are the older ones
        let at = |ahead: usize| index.checked_sub(ahead).filter(|&k| k < len);
        // level 0: the message dict
        if let Some(k) = at(DEPTH) {
            prefetch_object(*items.add(k));
        }
        // level 1: its table
        if let Some(k) = at(DEPTH - 1) {
            prefetch_table(*items.add(k));
        }
        // level 2: `info` and `parts`
        if let Some(k) = at(DEPTH - 2) {
            let found = &mut self.ring[k % RING];
            (found.info, found.parts, found.items, found.count) = (
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
                0,
            );
            for entry in dict::str_entries(py, *items.add(k)).unwrap_or(&[]) {
                if entry.key == info_key {
                    found.info = entry.value;
                } else if entry.key == parts_key {
                    found.parts = entry.value;
                }
            }
            for object in [found.info, found.parts] {
                if !object.is_null() {
                    prefetch_object(object);
                }
            }
        }
        // level 3: the table of `info`, the item array of `parts`
        if let Some(k) = at(DEPTH - 3) {
            let found = &mut self.ring[k % RING];
            if !found.info.is_null() {
                prefetch_table(found.info);
            }
            let parts = found.parts;
            if !parts.is_null() && ffi::Py_TYPE(parts) == std::ptr::addr_of_mut!(ffi::PyList_Type) {
                let list = parts.cast::<ffi::PyListObject>();
                let count = usize::try_from((*list).ob_base.ob_size).unwrap_or(0);
                found.items = (*list).ob_item.cast_const();
                found.count = if found.items.is_null() {
                    0
                } else {
                    count.min(PARTS)
                };
                let array = found.items.cast::<u8>();
                prefetch(array);
                if found.count > 8 {
                    prefetch(array.wrapping_add(64));
                }
            }
        }
        // level 4: the values of `info`, the part dicts
        if let Some(k) = at(DEPTH - 4) {
            let found = &self.ring[k % RING];
            load_values(entries(found.info), &INFO_FIELDS, hinted, prefetch_object);
            if !self.bodies {
                return;
            }
            for n in 0..found.count {
                prefetch_object(*found.items.add(n));
            }
        }
        // level 5: the tables of the part dicts
        if let Some(k) = at(DEPTH - 5) {
            let found = &self.ring[k % RING];
            for n in 0..found.count {
                prefetch_table(*found.items.add(n));
            }
        }
        // level 6: the values of the part dicts (`type`, `text`, `tool`, `state`, …)
        if let Some(k) = at(DEPTH - 6) {
            let found = &mut self.ring[k % RING];
            for n in 0..found.count {
                let part = *found.items.add(n);
                let fields = entries(part);
                load_values(fields, &PART_FIELDS, hinted, prefetch_object);
                found.states[n] = hinted(fields, Field::State);
            }
        }
        // level 7: the table of each part's `state`
        if let Some(k) = at(DEPTH - 7) {
            let found = &self.ring[k % RING];
            for &state in &found.states[..found.count] {
                if !state.is_null() {
                    prefetch_table(state);
                }
            }
        }
        // level 8: the values of each `state` (`status`, `input`, `output`, `time`, …)
        if let Some(k) = at(DEPTH - 8) {
            let found = &self.ring[k % RING];
            for &state in &found.states[..found.count] {
                load_values(entries(state), &STATE_FIELDS, hinted, prefetch_object);
            }
        }
        // level 9: the tables of the dicts among them (`input`, `time`)
        if let Some(k) = at(DEPTH - 9) {
            let found = &self.ring[k % RING];
            for &state in &found.states[..found.count] {
                load_values(entries(state), &STATE_DICTS, hinted, |v| prefetch_table(v));
            }
        }
    }
}
