// The binding layer's shared pieces (see common.h).
#include "bindings/common.h"

namespace trierouter {

void free_capsule(PyObject* cap) {
    big_free(PyCapsule_GetPointer(cap, "trierouter.buf"),
             reinterpret_cast<size_t>(PyCapsule_GetContext(cap)));
}

bool trie_ready(const TokenTrieObject* t, const char* what) {
    if (t->ready) return true;
    PyErr_Format(PyExc_RuntimeError, "%s: the TokenTrie is not initialised (made without a successful __init__)",
                 what);
    return false;
}

bool get_view(PyObject* obj, View& v, char kind, int itemsize, const char* name) {
    if (PyObject_GetBuffer(obj, &v.b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return false;
    v.held = true;
    const char* f = v.b.format ? v.b.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    bool kind_ok = false;
    if (kind == 'i') kind_ok = (*f == 'i' || *f == 'l' || *f == 'q' || *f == 'h');
    if (kind == 'u') kind_ok = (*f == 'H' || *f == 'I' || *f == 'B' || *f == 'L' || *f == 'Q');
    if (!kind_ok || v.b.itemsize != itemsize || v.b.ndim > 1) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-D array of %s%d", name,
                     kind == 'i' ? "int" : "uint", itemsize * 8);
        return false;
    }
    return true;
}

bool check_dfa(const TableView& tab, const I32View& cls, const I64View& st, int64_t min_state) {
    if (cls.n != 256 || tab.b.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "table must be 2-D and byte_class hold 256 entries");
        return false;
    }
    const int64_t ns = tab.b.shape[0], nc = tab.b.shape[1];
    for (int64_t i = 0; i < 256; ++i)
        if (cls.p[i] < 0 || cls.p[i] >= nc) {
            PyErr_SetString(PyExc_ValueError, "byte_class names a column past the table");
            return false;
        }
    for (int64_t i = 0; i < st.n; ++i)
        if (st.p[i] < min_state || st.p[i] >= ns) {
            PyErr_SetString(PyExc_ValueError, "states: out of range");
            return false;
        }
    for (int64_t i = 0; i < ns * nc; ++i)
        if (tab.p[i] >= ns) {
            PyErr_SetString(PyExc_ValueError, "table: a target past the last state");
            return false;
        }
    return true;
}

bool check_token_spans(const I32View& ids, const I64View& off, int64_t n_buf, const char* what) {
    for (int64_t i = 0; i < ids.n; ++i) {
        const int32_t t = ids.p[i];
        if (t < 0 || t + 1 >= off.n || off.p[t] < 0 || off.p[t] > off.p[t + 1] || off.p[t + 1] > n_buf) {
            PyErr_SetString(PyExc_ValueError, what);
            return false;
        }
    }
    return true;
}

PyObject* tuple_result(std::initializer_list<PyObject*> items) {
    bool ok = true;
    for (PyObject* o : items) ok = ok && o != nullptr;
    PyObject* t = ok ? PyTuple_New(static_cast<Py_ssize_t>(items.size())) : nullptr;
    Py_ssize_t i = 0;
    for (PyObject* o : items) {
        if (t) {
            PyTuple_SET_ITEM(t, i++, o);  // steals the reference
        } else {
            Py_XDECREF(o);
        }
    }
    return t;
}

PyObject* csr_result(Buf<int64_t>& ptr, Buf<int32_t>& ids) {
    PyObject* a = to_numpy(ptr, NPY_INT64);
    return tuple_result({a, to_numpy(ids, NPY_INT32)});
}

bool check_csr(const I64View& ptr, int64_t n_ids, const char* what) {
    if (ptr.n < 1 || ptr.p[0] != 0 || ptr.p[ptr.n - 1] > n_ids) {
        PyErr_Format(PyExc_ValueError, "%s: ptr out of range", what);
        return false;
    }
    for (int64_t i = 1; i < ptr.n; ++i)
        if (ptr.p[i] < ptr.p[i - 1]) {
            PyErr_Format(PyExc_ValueError, "%s: ptr not ascending", what);
            return false;
        }
    return true;
}

PyObject* dfa_result(const Dfa& d, bool edges) {
    const npy_intp m = static_cast<npy_intp>(d.accept.size());
    npy_intp d1[1] = {m};
    PyObject* ac = PyArray_SimpleNew(1, d1, NPY_BOOL);
    if (!ac) return nullptr;
    if (m) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(ac)), d.accept.data(), d.accept.size());
    if (edges) {
        auto arr = [](const std::vector<int32_t>& v) -> PyObject* {
            npy_intp dims[1] = {static_cast<npy_intp>(v.size())};
            PyObject* a = PyArray_SimpleNew(1, dims, NPY_INT32);
            if (a && !v.empty()) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(a)), v.data(), v.size() * 4);
            return a;
        };
        PyObject *a = arr(d.src), *b = arr(d.byte);
        return tuple_result({a, b, arr(d.dst), ac});
    }
    npy_intp dims[2] = {m, 256};
    PyObject* tab = PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!tab) {
        Py_DECREF(ac);
        return nullptr;
    }
    int32_t* t = static_cast<int32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(tab)));
    std::fill_n(t, static_cast<size_t>(m) * 256, -1);
    for (size_t k = 0; k < d.src.size(); ++k) t[static_cast<size_t>(d.src[k]) * 256 + static_cast<size_t>(d.byte[k])] = d.dst[k];
    return tuple_result({tab, ac});
}

PyObject* raise_run_error(const RunError& e) {
    switch (e.kind) {
        case RunError::kRange:
            PyErr_Format(PyExc_ValueError, "dfa_wire: %s out of range", e.what);
            break;
        case RunError::kAmbiguous:
            PyErr_Format(PyExc_ValueError, "ambiguous continuation on byte %d at state %lld",
                         static_cast<int>(e.byte), static_cast<long long>(e.src));
            break;
        default:
            PyErr_NoMemory();
    }
    return nullptr;
}

}  // namespace trierouter
