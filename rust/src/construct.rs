//! Pydantic models made as `model_construct` makes them (no validation), without a Python
//! frame: the wrapper makes two per fork, and through `object.__setattr__` in Python each cost
//! about 1 µs, a fifth of a small fork's wrapper.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

/// `object.__new__(cls)`: an instance made without running `__init__`, by `object`'s own
/// `tp_new` (which also readies the instance's dict where CPython manages it).
fn object_new<'py>(cls: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    let args = PyTuple::empty(py);
    // SAFETY: `PyBaseObject_Type` is CPython's static `object` type, whose `tp_new` is always
    // set; it is called as `object.__new__(cls)` calls it, with a live type, an empty tuple
    // and no keywords, and returns a new reference or NULL with an exception set.
    unsafe {
        let object = std::ptr::addr_of_mut!(ffi::PyBaseObject_Type);
        let Some(new) = (*object).tp_new else {
            return Err(PyTypeError::new_err("object has no tp_new"));
        };
        Bound::from_owned_ptr_or_err(
            py,
            new(cls.as_type_ptr(), args.as_ptr(), std::ptr::null_mut()),
        )
    }
}

/// An instance of `cls` (a pydantic model without validators, extras or private attributes)
/// whose `__dict__` is `values` (every field, in field order, of the right types: the caller's
/// promise), its fields set the keys of `values`, and no extras or private values: what
/// `object.__new__(cls)` and four `object.__setattr__` calls make, each the same C call.
#[pyfunction(name = "_construct")]
pub fn py_construct<'py>(
    cls: &Bound<'py, PyType>,
    values: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    if !values.is_exact_instance_of::<PyDict>() {
        let name = values.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "values must be a dict, not {name} (a subclass's methods could give other items)"
        )));
    }
    let model = object_new(cls)?;
    // SAFETY: `values` is a live dict; PySet_New returns a new set of its keys or NULL with
    // an exception set.
    let fields = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PySet_New(values.as_ptr()))? };
    let none = py.None().into_bound(py);
    set(&model, intern!(py, "__dict__"), values.as_any())?;
    set(&model, intern!(py, "__pydantic_fields_set__"), &fields)?;
    set(&model, intern!(py, "__pydantic_extra__"), &none)?;
    set(&model, intern!(py, "__pydantic_private__"), &none)?;
    Ok(model)
}

/// `object.__setattr__(target, name, value)`: the generic set, past the class's own
/// `__setattr__` (a frozen model refuses every set through it).
fn set(
    target: &Bound<'_, PyAny>,
    name: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: three live objects, the GIL held; the call returns 0, or -1 with an exception set.
    let done =
        unsafe { ffi::PyObject_GenericSetAttr(target.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if done == 0 {
        Ok(())
    } else {
        Err(PyErr::fetch(target.py()))
    }
}
