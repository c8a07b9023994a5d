// The shortlist's BM25 kernels (bm25_accumulate, scatter_max, top_positive): argument checks here,
// loops in shortlist/bm25.cpp.
#include "bindings/common.h"
#include "shortlist/bm25.h"

namespace trierouter {

// bm25_accumulate(ptr, docs, weights, terms, coefs, out) -> None: for each query term i (in
// order), out[docs[j]] += double(weights[j]) * coefs[i] over the term's postings
// j in [ptr[terms[i]], ptr[terms[i] + 1]). The numpy reference (BM25Index.scores) gathers the
// same products in the same order and sums them with one bincount: identical float64 sums.
PyObject* py_bm25_accumulate(PyObject*, PyObject* args) {
    PyObject *o_ptr, *o_docs, *o_w, *o_terms, *o_coefs, *o_out;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_ptr, &o_docs, &o_w, &o_terms, &o_coefs, &o_out))
        return nullptr;
    I64View ptr, docs, terms;
    HeldBuffer w, coefs, out;
    if (!ptr.open(o_ptr, "ptr") || !docs.open(o_docs, "docs") || !terms.open(o_terms, "terms"))
        return nullptr;
    if (!w.get(o_w, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) ||
        !coefs.get(o_coefs, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) ||
        !out.get(o_out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE))
        return nullptr;
    if (w.item_code() != 'f' || w.b.itemsize != 4 || w.b.len / 4 != docs.n) {
        PyErr_SetString(PyExc_TypeError, "weights: expected float32, one per doc");
        return nullptr;
    }
    if (coefs.item_code() != 'd' || coefs.b.itemsize != 8 || coefs.b.len / 8 != terms.n) {
        PyErr_SetString(PyExc_TypeError, "coefs: expected float64, one per term");
        return nullptr;
    }
    if (out.item_code() != 'd' || out.b.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "out: expected a contiguous float64 array");
        return nullptr;
    }
    const int64_t n_terms = ptr.n - 1, n_out = out.b.len / 8;
    const float* wp = static_cast<const float*>(w.b.buf);
    const double* cp = static_cast<const double*>(coefs.b.buf);
    double* op = static_cast<double*>(out.b.buf);
    for (int64_t i = 0; i < terms.n; ++i) {
        const int64_t t = terms.p[i];
        if (t < 0 || t >= n_terms || ptr.p[t] < 0 || ptr.p[t] > ptr.p[t + 1] || ptr.p[t + 1] > docs.n) {
            PyErr_Format(PyExc_IndexError, "term %lld: out of range or bad postings", static_cast<long long>(t));
            return nullptr;
        }
    }
    const int64_t bad = bm25_accumulate(ptr.p, docs.p, wp, terms.p, cp, terms.n, op, n_out);
    if (bad >= 0) {
        PyErr_Format(PyExc_IndexError, "doc %lld out of range for %lld rows", static_cast<long long>(bad),
                     static_cast<long long>(n_out));
        return nullptr;
    }
    Py_RETURN_NONE;
}

// scatter_max(out, values, rows, owners) -> None: out[owners[j]] = max(out[owners[j]],
// values[rows[j]]) for every j (a value's best row: numpy's maximum.at, without its per-item
// dispatch).
PyObject* py_scatter_max(PyObject*, PyObject* args) {
    PyObject *o_out, *o_val, *o_rows, *o_own;
    if (!PyArg_ParseTuple(args, "OOOO", &o_out, &o_val, &o_rows, &o_own)) return nullptr;
    HeldBuffer out, val;
    I64View rows, own;
    if (!out.get(o_out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) ||
        !val.get(o_val, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) || !rows.open(o_rows, "rows") ||
        !own.open(o_own, "owners"))
        return nullptr;
    if (out.item_code() != 'd' || out.b.itemsize != 8 || val.item_code() != 'd' || val.b.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "out and values: expected contiguous float64 arrays");
        return nullptr;
    }
    if (rows.n != own.n) {
        PyErr_SetString(PyExc_ValueError, "rows and owners differ in length");
        return nullptr;
    }
    double* op = static_cast<double*>(out.b.buf);
    const double* vp = static_cast<const double*>(val.b.buf);
    const uint64_t n_out = static_cast<uint64_t>(out.b.len / 8), n_val = static_cast<uint64_t>(val.b.len / 8);
    const int64_t j = scatter_max(op, n_out, vp, n_val, rows.p, own.p, rows.n);
    if (j >= 0) {
        PyErr_Format(PyExc_IndexError, "scatter_max: row %lld or owner %lld out of range",
                     static_cast<long long>(rows.p[j]), static_cast<long long>(own.p[j]));
        return nullptr;
    }
    Py_RETURN_NONE;
}

// top_positive(scores, k) -> int64 array: the ids of the (up to) k best positive scores, best
// by (-score, id), returned in ascending id order.
PyObject* py_top_positive(PyObject*, PyObject* args) {
    PyObject* o_s;
    long long k;
    if (!PyArg_ParseTuple(args, "OL", &o_s, &k)) return nullptr;
    HeldBuffer sb;
    if (!sb.get(o_s, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return nullptr;
    if (sb.item_code() != 'd' || sb.b.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "scores: expected a contiguous float64 array");
        return nullptr;
    }
    if (k < 0) {
        PyErr_SetString(PyExc_ValueError, "k must be >= 0");
        return nullptr;
    }
    const double* s = static_cast<const double*>(sb.b.buf);
    const int64_t n = k ? sb.b.len / 8 : 0;
    const std::vector<int64_t> hit = top_positive(s, n, k);
    npy_intp dim = static_cast<npy_intp>(hit.size());
    PyObject* arr = PyArray_SimpleNew(1, &dim, NPY_INT64);
    if (!arr) return nullptr;
    if (dim) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(arr)), hit.data(), hit.size() * 8);
    return arr;
}


}  // namespace trierouter
