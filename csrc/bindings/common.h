// The binding layer's shared pieces: the only headers that include Python.h and numpy's C API.
// Python buffers opened as typed views (released with the view), numpy arrays made from the
// core's buffers without a copy, and the Python types every binding file refers to.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
// one numpy API table for the module (imported in module.cpp's PyInit__core)
#define PY_ARRAY_UNIQUE_SYMBOL trierouter_core_ARRAY_API
#ifndef TRIEROUTER_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "regex.h"
#include "support/buffers.h"
#include "automata.h"
#include "token_trie.h"

namespace trierouter {

// TokenTrie (Python type): the trie's arrays (token_trie.h) in a Python object.
struct TokenTrieObject {
    PyObject_HEAD
    TokenTrie trie;
    bool ready;  // built by __init__ (false in the zeroed storage of TokenTrie.__new__)
};

// False with a RuntimeError set (naming ``what``, the entry point) unless ``t`` was built: a
// TokenTrie made by ``TokenTrie.__new__`` alone, or whose __init__ failed, has no arrays.
bool trie_ready(const TokenTrieObject* t, const char* what);

extern PyTypeObject TokenTrieType;
extern PyTypeObject CoreType;
extern PyTypeObject MatcherType;


void free_capsule(PyObject* cap);

// Hands the storage of ``b`` to a new numpy array (no copy): 1-D, or 2-D of ``cols`` columns.
template <class T>
PyObject* to_numpy(Buf<T>& b, int typenum, int64_t cols = 0) {
    if (!b.p && !b.reserve(1)) return PyErr_NoMemory();
    npy_intp dims[2] = {static_cast<npy_intp>(cols > 0 ? b.n / static_cast<size_t>(cols) : b.n),
                        static_cast<npy_intp>(cols)};
    PyObject* arr = PyArray_SimpleNewFromData(cols > 0 ? 2 : 1, dims, typenum, b.p);
    if (!arr) return nullptr;
    PyObject* cap = PyCapsule_New(b.p, "trierouter.buf", free_capsule);
    if (!cap || PyCapsule_SetContext(cap, reinterpret_cast<void*>(b.mapped)) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(arr);
        return nullptr;
    }
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), cap) < 0) {
        Py_DECREF(arr);
        return nullptr;
    }
    b.p = nullptr;
    b.n = b.cap = b.mapped = 0;
    return arr;
}
// A contiguous 1-D buffer of a given kind ('i' signed, 'u' unsigned) and item size.
struct View {
    Py_buffer b;
    bool held = false;
};

bool get_view(PyObject* obj, View& v, char kind, int itemsize, const char* name);
struct HeldBuffer {
    Py_buffer b;
    bool held = false;
    HeldBuffer() = default;
    HeldBuffer(const HeldBuffer&) = delete;
    HeldBuffer& operator=(const HeldBuffer&) = delete;
    ~HeldBuffer() {
        if (held) PyBuffer_Release(&b);
    }
    bool get(PyObject* o, int flags) {
        if (PyObject_GetBuffer(o, &b, flags) < 0) return false;
        held = true;
        return true;
    }
    // The struct-module item code, byte-order prefix skipped ("B" when none is given).
    char item_code() const {
        const char* f = b.format ? b.format : "B";
        if (*f == '<' || *f == '=' || *f == '@') ++f;
        return *f;
    }
};

struct I64View : HeldBuffer {
    const int64_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o, const char* what, bool writable = false) {
        if (!get(o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0))) return false;
        const char f = item_code();
        if (b.itemsize != 8 || !(f == 'q' || f == 'l') || b.ndim != 1) {
            PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-D int64 array", what);
            return false;
        }
        p = static_cast<const int64_t*>(b.buf);
        n = b.len / 8;
        return true;
    }
};

struct I32View : HeldBuffer {
    const int32_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o, const char* what) {
        if (!get(o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return false;
        const char f = item_code();
        if (b.itemsize != 4 || !(f == 'i' || f == 'l')) {
            PyErr_Format(PyExc_TypeError, "%s: expected a contiguous int32 array", what);
            return false;
        }
        p = static_cast<const int32_t*>(b.buf);
        n = b.len / 4;
        return true;
    }
};

// An automaton's transition table: int32, or int16 / int8 (a tool automaton stores the
// narrowest type its state count allows: at 10,000 tools the tables are most of what a registry
// holds), read as int32 (a narrower table is widened into a copy of our own: a few KB per call).
struct TableView : I32View {
    std::vector<int32_t> wide;
    bool open(PyObject* o, const char* what) {
        if (!get(o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return false;
        const char f = item_code();
        if (b.itemsize == 4 && (f == 'i' || f == 'l')) {
            p = static_cast<const int32_t*>(b.buf);
            n = b.len / 4;
            return true;
        }
        if (!((b.itemsize == 2 && f == 'h') || (b.itemsize == 1 && f == 'b'))) {
            PyErr_Format(PyExc_TypeError, "%s: expected a contiguous int32, int16 or int8 array", what);
            return false;
        }
        n = b.len / b.itemsize;
        if (b.itemsize == 2)
            wide.assign(static_cast<const int16_t*>(b.buf), static_cast<const int16_t*>(b.buf) + n);
        else
            wide.assign(static_cast<const int8_t*>(b.buf), static_cast<const int8_t*>(b.buf) + n);
        p = wide.data();
        return true;
    }
};

// A C-contiguous buffer of any item type read as bytes, released when the view goes.
struct ByteView : HeldBuffer {
    const uint8_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o) {
        if (!get(o, PyBUF_C_CONTIGUOUS)) return false;
        p = static_cast<const uint8_t*>(b.buf);
        n = b.len;
        return true;
    }
};

// The (table, byte_class, states) arguments of dfa_masks / dfa_list_masks: a 2-D table whose
// targets are states or negative (no edge), 256 classes naming its columns, states from
// min_state (-1: "no state" allowed) to the last. False with a ValueError set otherwise.
bool check_dfa(const TableView& tab, const I32View& cls, const I64View& st, int64_t min_state);

// Whether every token id in ``ids`` has a span offsets[t]..offsets[t + 1] inside a buffer of
// ``n_buf`` bytes; false with a ValueError ``what`` otherwise.
bool check_token_spans(const I32View& ids, const I64View& off, int64_t n_buf, const char* what);

// A tuple of ``items``, stealing every reference; nullptr (and all released) if any is nullptr
// (the exception its maker set stands).
PyObject* tuple_result(std::initializer_list<PyObject*> items);

PyObject* csr_result(Buf<int64_t>& ptr, Buf<int32_t>& ids);
// A list of Python ints, or a contiguous 1-D int64 array, read as int64 (dfa_wire's small
// arguments: converting lists in C saves an array per argument and call).
struct I64Seq {
    I64View view;
    std::vector<int64_t> own;
    const int64_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o, const char* what) {
        if (!PyList_Check(o)) {
            if (!view.open(o, what)) return false;
            p = view.p;
            n = view.n;
            return true;
        }
        const Py_ssize_t m = PyList_GET_SIZE(o);
        try {
            own.resize(static_cast<size_t>(m));
        } catch (const std::bad_alloc&) {
            PyErr_NoMemory();
            return false;
        }
        for (Py_ssize_t i = 0; i < m; ++i) {
            const long long v = PyLong_AsLongLong(PyList_GET_ITEM(o, i));
            if (v == -1 && PyErr_Occurred()) return false;
            own[static_cast<size_t>(i)] = v;
        }
        p = own.data();
        n = m;
        return true;
    }
};
// Checks a CSR ``ptr`` (n + 1 ascending offsets from 0) over ``n_ids`` ids; ValueError if not.
bool check_csr(const I64View& ptr, int64_t n_ids, const char* what);
// A DFA as numpy arrays: (table int32 (m, 256), accept bool[m]), or with ``edges`` (src
// int32[], byte int32[], dst int32[], accept bool[m]): its edges (a Fragment's edge list, without
// a numpy pass over a dense table).
PyObject* dfa_result(const Dfa& d, bool edges);
struct Named {
    const char* name;
    PyObject* obj;
};

// A dict of the items, taking their references; nullptr when one is missing or on an error.
template <size_t N>
PyObject* dict_of(Named (&items)[N]) {
    PyObject* d = PyDict_New();
    bool fail = d == nullptr;
    for (auto& it : items) {
        if (!fail && (!it.obj || PyDict_SetItemString(d, it.name, it.obj) < 0)) fail = true;
        Py_XDECREF(it.obj);
    }
    if (fail) {
        Py_XDECREF(d);
        return nullptr;
    }
    return d;
}

template <class V>
PyObject* vec_bytes(const V* v) {
    if (!v) return PyBytes_FromStringAndSize(nullptr, 0);
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(v->data()),
                                     static_cast<Py_ssize_t>(v->size() * sizeof((*v)[0])));
}


// The Python error of a run's error (nullptr, with the error set).
PyObject* raise_run_error(const RunError& e);

}  // namespace trierouter
