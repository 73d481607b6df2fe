//! `Ready`: an awaitable that is already decided — what `ToolRateLimitPolicy.decide`
//! and `admit` return when the engine decides at once (the common call).
//!
//! # Why a hand-made type
//!
//! `await` of a coroutine costs a coroutine object and a frame, and finishing an
//! `__await__` iterator written with `PyO3` (`__next__`) costs a `StopIteration`
//! exception per call. `CPython` (3.10 and later, in the stable ABI) lets a type finish
//! an `await` with its value directly through the `am_send` slot (`PyIter_Send`
//! returns `PYGEN_RETURN` and the value, no exception). `PyO3` does not expose that
//! slot, so this type is built from a `PyType_Spec` with the C API: an object that
//! holds one value (or one exception to raise) and gives it to the first `await`.
//!
//! It is also a complete coroutine as `asyncio` sees it (`send`, `throw`, `close`,
//! `__await__`, so `collections.abc.Coroutine` and `asyncio.iscoroutine` accept it):
//! `asyncio.create_task`, `ensure_future` and `gather` take it as they take a
//! coroutine. Awaiting it a second time raises `RuntimeError`, as for a coroutine.
//!
//! `CPython` 3.12 and later no longer use `am_send` for `await` in bytecode (their
//! `SEND` calls `tp_iternext`, which must raise `StopIteration`), so there a decided
//! call is a minimal coroutine (`async def decided(value): return value`), which
//! their `SEND` runs without an exception; `ready`/`ready_raise` hand out whichever
//! is cheaper on the running interpreter.
//!
//! This is the crate's only `unsafe` code.

use std::ffi::{c_int, c_void};
use std::ptr;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// `Py_am_send`, the `am_send` slot's id (3.10+, stable ABI; not in `pyo3-ffi`).
const PY_AM_SEND: c_int = 81;

/// Holds its value or exception until the first `await` (or `send`/`throw`/`close`).
#[repr(C)]
struct ReadyObject {
    ob_base: ffi::PyObject,
    /// An owned reference, null once given out.
    value: *mut ffi::PyObject,
    /// Whether `value` is an exception to raise rather than the result.
    raise: bool,
}

static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// On `CPython` 3.12+: the coroutine functions giving a value and raising an error.
static COROUTINES: PyOnceLock<Option<(Py<PyAny>, Py<PyAny>)>> = PyOnceLock::new();

/// Creates the type, or the coroutine functions on 3.12+ (once, when the module is
/// loaded).
pub(crate) fn init(py: Python<'_>) -> PyResult<()> {
    TYPE.get_or_try_init(py, || make_type(py))?;
    COROUTINES.get_or_try_init(py, || coroutines(py))?;
    Ok(())
}

fn coroutines(py: Python<'_>) -> PyResult<Option<(Py<PyAny>, Py<PyAny>)>> {
    if py.version_info() < (3, 12) {
        return Ok(None);
    }
    let m = PyModule::from_code(
        py,
        c"async def decided(value):\n    return value\n\n\nasync def raised(error):\n    raise error\n",
        c"<toolgate._toolgate.ready>",
        c"toolgate._toolgate_ready",
    )?;
    Ok(Some((
        m.getattr("decided")?.unbind(),
        m.getattr("raised")?.unbind(),
    )))
}

/// The type's methods (`send`, `throw`, `close`), made once per process.
fn methods() -> &'static mut [ffi::PyMethodDef] {
    Box::leak(Box::new([
        ffi::PyMethodDef {
            ml_name: c"send".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunction: ready_send_method,
            },
            ml_flags: ffi::METH_O,
            ml_doc: c"Finishes with the decided value (StopIteration), as a coroutine's send."
                .as_ptr(),
        },
        ffi::PyMethodDef {
            ml_name: c"throw".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunction: ready_throw,
            },
            ml_flags: ffi::METH_VARARGS,
            ml_doc: c"Raises the given exception and drops the decided value.".as_ptr(),
        },
        ffi::PyMethodDef {
            ml_name: c"close".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunction: ready_close,
            },
            ml_flags: ffi::METH_NOARGS,
            ml_doc: c"Drops the decided value.".as_ptr(),
        },
        ffi::PyMethodDef::zeroed(),
    ]))
}

fn make_type(py: Python<'_>) -> PyResult<Py<PyType>> {
    // The spec, its slots and methods must outlive the type: made once per process.
    let methods = methods();
    let slots: &'static mut [ffi::PyType_Slot] = Box::leak(Box::new([
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: c"An admission already decided; await it for the Permit or Rejection."
                .as_ptr()
                .cast_mut()
                .cast(),
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_dealloc,
            pfunc: ready_dealloc as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_am_await,
            pfunc: ready_self as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: PY_AM_SEND,
            pfunc: ready_am_send as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_iter,
            pfunc: ready_self as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_iternext,
            pfunc: ready_next as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_methods,
            pfunc: methods.as_mut_ptr().cast(),
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: ptr::null_mut(),
        },
    ]));
    let spec: &'static mut ffi::PyType_Spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: c"toolgate._toolgate.Ready".as_ptr(),
        basicsize: c_int::try_from(std::mem::size_of::<ReadyObject>())
            .map_err(|_| PyRuntimeError::new_err("Ready: object size"))?,
        itemsize: 0,
        flags: c_uint_flags(),
        slots: slots.as_mut_ptr(),
    }));
    // SAFETY: the spec, its slots and methods are 'static; the GIL is held.
    let ty = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec)) }?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

/// Not instantiable from Python (only `ready`/`ready_raise` make one), not a base.
#[allow(clippy::cast_possible_truncation)] // the flags fit the C field, as in CPython's own specs
fn c_uint_flags() -> std::ffi::c_uint {
    (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION) as std::ffi::c_uint
}

/// A `Ready` whose `await` gives `value`.
#[pyfunction]
pub(crate) fn ready(value: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    new(value, false)
}

/// A `Ready` whose `await` raises `error` (an exception instance).
#[pyfunction]
pub(crate) fn ready_raise(error: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: reads the type flags of a live object.
    if unsafe { ffi::PyExceptionInstance_Check(error.as_ptr()) } == 0 {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "ready_raise: an exception instance is needed",
        ));
    }
    new(error, true)
}

/// A new `Ready` holding `value` (given out as the result, or raised); on 3.12+ the
/// coroutine doing the same.
pub(crate) fn new(value: Bound<'_, PyAny>, raise: bool) -> PyResult<Bound<'_, PyAny>> {
    let py = value.py();
    if let Some((decided, raised)) = COROUTINES.get_or_try_init(py, || coroutines(py))? {
        let f = if raise { raised } else { decided };
        return f.bind(py).call1((value,));
    }
    let ty = TYPE.get_or_try_init(py, || make_type(py))?;
    // SAFETY: allocates an object of the type's basic size and initialises its header
    // (which takes a reference to the heap type) and both fields before use.
    unsafe {
        let obj = ffi::PyObject_Malloc(std::mem::size_of::<ReadyObject>()).cast::<ReadyObject>();
        if obj.is_null() {
            return Err(pyo3::exceptions::PyMemoryError::new_err(()));
        }
        ffi::PyObject_Init(obj.cast(), ty.as_ptr().cast());
        ptr::addr_of_mut!((*obj).value).write(value.into_ptr());
        ptr::addr_of_mut!((*obj).raise).write(raise);
        Ok(Bound::from_owned_ptr(py, obj.cast()))
    }
}

/// Takes the held value out: `Some((value, raise))` the first time.
///
/// # Safety
/// `obj` is a live `ReadyObject`; the GIL is held.
unsafe fn take(obj: *mut ffi::PyObject) -> Option<(*mut ffi::PyObject, bool)> {
    let me = obj.cast::<ReadyObject>();
    let value = (*me).value;
    if value.is_null() {
        return None;
    }
    (*me).value = ptr::null_mut();
    Some((value, (*me).raise))
}

/// Sets the error of a second await.
unsafe fn reused() {
    ffi::PyErr_SetString(
        ffi::PyExc_RuntimeError,
        c"cannot reuse already awaited coroutine".as_ptr(),
    );
}

/// Raises the exception instance `error` (a stolen reference).
unsafe fn raise(error: *mut ffi::PyObject) {
    ffi::PyErr_SetObject(ffi::Py_TYPE(error).cast(), error);
    ffi::Py_DECREF(error);
}

/// Finishes with `value` (a stolen reference) through `StopIteration`, for callers
/// that do not use `am_send`.
unsafe fn stop_with(value: *mut ffi::PyObject) {
    // An instance made here, so that a tuple value is not taken for the arguments.
    let stop = ffi::PyObject_CallFunctionObjArgs(
        ffi::PyExc_StopIteration,
        value,
        ptr::null_mut::<ffi::PyObject>(),
    );
    ffi::Py_DECREF(value);
    if !stop.is_null() {
        ffi::PyErr_SetObject(ffi::PyExc_StopIteration, stop);
        ffi::Py_DECREF(stop);
    }
}

unsafe extern "C" fn ready_dealloc(obj: *mut ffi::PyObject) {
    let ty = ffi::Py_TYPE(obj);
    let value = (*obj.cast::<ReadyObject>()).value;
    if !value.is_null() {
        ffi::Py_DECREF(value);
    }
    ffi::PyObject_Free(obj.cast());
    // A heap type's instances hold a reference to it.
    ffi::Py_DECREF(ty.cast());
}

unsafe extern "C" fn ready_self(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    ffi::Py_INCREF(obj);
    obj
}

/// `am_send`: the value without an exception (`PYGEN_RETURN`).
unsafe extern "C" fn ready_am_send(
    obj: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    if arg != ffi::Py_None() {
        return send_error(result);
    }
    match take(obj) {
        Some((value, false)) => {
            *result = value;
            ffi::PySendResult::PYGEN_RETURN
        }
        Some((error, true)) => {
            raise(error);
            *result = ptr::null_mut();
            ffi::PySendResult::PYGEN_ERROR
        }
        None => {
            reused();
            *result = ptr::null_mut();
            ffi::PySendResult::PYGEN_ERROR
        }
    }
}

/// A first `send` of a value other than `None`, refused as a coroutine refuses it
/// (the value stays held).
#[cold]
unsafe fn send_error(result: *mut *mut ffi::PyObject) -> ffi::PySendResult {
    *result = ptr::null_mut();
    ffi::PyErr_SetString(
        ffi::PyExc_TypeError,
        c"can't send non-None value to a just-started coroutine".as_ptr(),
    );
    ffi::PySendResult::PYGEN_ERROR
}

unsafe extern "C" fn ready_next(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    match take(obj) {
        Some((value, false)) => stop_with(value),
        Some((error, true)) => raise(error),
        None => reused(),
    }
    ptr::null_mut()
}

unsafe extern "C" fn ready_send_method(
    obj: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    if arg != ffi::Py_None() {
        let mut result = ptr::null_mut();
        send_error(&raw mut result);
        return ptr::null_mut();
    }
    ready_next(obj)
}

unsafe extern "C" fn ready_throw(
    obj: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    if let Some((value, _)) = take(obj) {
        ffi::Py_DECREF(value);
    }
    let n = ffi::PyTuple_Size(args);
    if n < 1 {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"throw expected at least 1 argument".as_ptr(),
        );
        return ptr::null_mut();
    }
    let first = ffi::PyTuple_GetItem(args, 0);
    if ffi::PyExceptionInstance_Check(first) != 0 {
        ffi::PyErr_SetObject(ffi::Py_TYPE(first).cast(), first);
    } else if ffi::PyExceptionClass_Check(first) != 0 {
        let value = if n > 1 {
            ffi::PyTuple_GetItem(args, 1)
        } else {
            ffi::Py_None()
        };
        ffi::PyErr_SetObject(first, value);
    } else {
        ffi::PyErr_SetString(
            ffi::PyExc_TypeError,
            c"exceptions must be classes or instances deriving from BaseException".as_ptr(),
        );
    }
    ptr::null_mut()
}

unsafe extern "C" fn ready_close(
    obj: *mut ffi::PyObject,
    _unused: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    if let Some((value, _)) = take(obj) {
        ffi::Py_DECREF(value);
    }
    let none = ffi::Py_None();
    ffi::Py_INCREF(none);
    none
}
