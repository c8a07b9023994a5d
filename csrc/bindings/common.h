// The binding layer's shared pieces: the only headers that include nanobind (and so Python.h).
// Typed array arguments (nb::ndarray: dtype, dimensions and contiguity checked by nanobind),
// numpy arrays made from the core's buffers without a copy, the TokenTrie every binding file
// refers to, and the checks several entry points share.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "automata.h"
#include "regex.h"
#include "support/buffers.h"
#include "token_trie.h"

// The binding layer's declarations are hidden, as nanobind's are (only PyInit__core is exported).
#pragma GCC visibility push(hidden)

namespace trierouter {

namespace nb = nanobind;
using namespace nb::literals;

// Array arguments, all on the CPU. In: read only, C-contiguous (a numpy array, or any object
// with __dlpack__ or the buffer protocol; never converted: a wrong dtype is a TypeError).
template <class T>
using In1 = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using In = nb::ndarray<const T, nb::c_contig, nb::device::cpu>;
// Any C-contiguous buffer read as bytes (bytes, uint8 or bool arrays).
using Bytes = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
// A writable array of any dtype (checked by the entry point that takes it).
using Writable = nb::ndarray<nb::device::cpu>;
template <class T>
using Writable1 = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Numpy = nb::ndarray<nb::numpy>;

// TokenTrie (Python type): the trie's arrays (token_trie.h). ``ready``: built by __init__.
struct TokenTrieObj {
    TokenTrie trie{};
    bool ready = false;
    TokenTrieObj() = default;
    TokenTrieObj(const TokenTrieObj&) = delete;
    TokenTrieObj& operator=(const TokenTrieObj&) = delete;
    ~TokenTrieObj() { destroy_token_trie(trie); }
};

// The built trie of ``h`` (a TokenTrie); TypeError if it is not one, RuntimeError naming
// ``what`` (the entry point) when it was made by ``TokenTrie.__new__`` alone or its __init__
// failed.
const TokenTrie& ready_trie(nb::handle h, const char* what);

// Core and TokenTrie build once, in an __init__ of their own: ``T.__new__(T)`` alone leaves an
// instance whose C++ object is not constructed, and every entry point refuses it with a
// RuntimeError (not nanobind's TypeError of a failed overload). constructed(): the C++ object of
// ``self`` (an instance of T), default-constructed first if __new__ left none.
template <class T>
bool is_instance(nb::handle h) {
    static PyTypeObject* const tp = reinterpret_cast<PyTypeObject*>(nb::type<T>().ptr());  // bound by then
    PyTypeObject* t = Py_TYPE(h.ptr());
    return t == tp || PyType_IsSubtype(t, tp);
}

template <class T>
T& constructed(nb::handle self) {
    if (!is_instance<T>(self)) throw nb::type_error("self: expected an instance of the class");
    if (!nb::inst_ready(self)) {
        new (nb::inst_ptr<T>(self)) T();
        nb::inst_mark_ready(self);
    }
    return *nb::inst_ptr<T>(self);
}

// The C++ object of ``self`` once its __init__ succeeded (``ready``), else null.
template <class T>
T* built_or_null(nb::handle self) {
    if (!is_instance<T>(self)) throw nb::type_error("self: expected an instance of the class");
    if (!nb::inst_ready(self)) return nullptr;
    T* t = nb::inst_ptr<T>(self);
    return t->ready ? t : nullptr;
}

// A numpy array over ``p`` (``ndim`` dims of ``shape``; freed by big_free(p, mapped) with it).
nb::object hand_over(void* p, size_t mapped, size_t ndim, const size_t* shape, nb::dlpack::dtype dt);

// Hands the storage of ``b`` to a new numpy array (no copy): 1-D, or 2-D of ``cols`` columns.
template <class T>
nb::object to_numpy(Buf<T>& b, int64_t cols = 0) {
    if (!b.p && !b.reserve(1)) throw std::bad_alloc();
    const size_t c = static_cast<size_t>(cols);
    const size_t shape[2] = {cols > 0 ? b.n / c : b.n, c};
    nb::object arr = hand_over(b.p, b.mapped, cols > 0 ? 2 : 1, shape, nb::dtype<T>());
    b.p = nullptr;
    b.n = b.cap = b.mapped = 0;
    return arr;
}

// A new numpy array of ``shape`` (1-D or 2-D; zeroed when ``zero``), with its data pointer.
template <class T>
nb::object new_array(std::initializer_list<size_t> shape, T** data, bool zero = false) {
    Buf<T> b;
    size_t n = 1;
    for (size_t s : shape) n *= s;
    if (!b.resize(n ? n : 1)) throw std::bad_alloc();
    if (zero) std::memset(static_cast<void*>(b.p), 0, n * sizeof(T));
    *data = b.p;
    nb::object arr = hand_over(b.p, b.mapped, shape.size(), shape.begin(), nb::dtype<T>());
    b.p = nullptr;
    b.n = b.cap = b.mapped = 0;
    return arr;
}

// A numpy array holding a copy of ``n`` items at ``p``.
template <class T>
nb::object copy_numpy(const T* p, size_t n) {
    T* d;
    nb::object a = new_array<T>({n}, &d);
    if (n) std::memcpy(static_cast<void*>(d), p, n * sizeof(T));
    return a;
}

// The (table, byte_class, states) arguments of dfa_masks / dfa_list_masks: a 2-D table whose
// targets are states or negative (no edge), 256 classes naming its columns, states from
// min_state (-1: "no state" allowed) to the last. ValueError otherwise.
void check_dfa(const int32_t* tab, int64_t ns, int64_t nc, const In1<int32_t>& cls, const In1<int64_t>& st,
               int64_t min_state);

// Every token id in ``ids`` has a span offsets[t]..offsets[t + 1] inside a buffer of ``n_buf``
// bytes; ValueError ``what`` otherwise.
void check_token_spans(const In1<int32_t>& ids, const In1<int64_t>& off, int64_t n_buf, const char* what);

// A CSR ``ptr`` (n + 1 ascending offsets from 0) over ``n_ids`` ids; ValueError if not.
void check_csr(const In1<int64_t>& ptr, int64_t n_ids, const char* what);

// (ptr, ids) as numpy arrays.
nb::tuple csr_result(Buf<int64_t>& ptr, Buf<int32_t>& ids);

// A DFA as numpy arrays: (table int32 (m, 256), accept bool[m]), or with ``edges`` (src
// int32[], byte int32[], dst int32[], accept bool[m]): its edges.
nb::tuple dfa_result(const Dfa& d, bool edges);

// An automaton's transition table: int32, or int16 / int8 (a tool automaton stores the
// narrowest type its state count allows), read as int32 (a narrower table widened into a copy of
// our own: a few KB per call). TypeError naming ``what`` for any other dtype.
struct Table {
    const int32_t* p = nullptr;
    int64_t n = 0, rows = 0, cols = 0;
    size_t ndim = 0;
    std::vector<int32_t> wide;
    Table(const Bytes& a, const char* what);
};

// A list of Python ints, or a contiguous 1-D int64 array, read as int64 (dfa_wire's small
// arguments: lists converted here save an array per argument and call).
struct I64Seq {
    std::vector<int64_t> own;
    In1<int64_t> arr;
    const int64_t* p = nullptr;
    int64_t n = 0;
    I64Seq(nb::handle o, const char* what);
};

// int32 ids of a sequence of ints (end_ids), sorted.
std::vector<int32_t> sorted_ids(nb::handle seq);

// Raises the Python error of a run's error.
[[noreturn]] void raise_run_error(const RunError& e);

// An int argument read as int64, saturating past its range (a state out of range of any set is
// DEAD, not an error) and a bool argument read by truth value (Python's ``bool(x)``): the
// casters below give both their Python names in signatures.
struct Sat64 {
    int64_t v = 0;
    operator int64_t() const { return v; }
};
// ``o`` (an int, or an object with __index__) as int64, saturating; false (no error left) if
// it is not an int.
inline bool read_saturating(PyObject* o, int64_t* v) noexcept {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    *v = overflow ? (overflow > 0 ? INT64_MAX : INT64_MIN) : x;
    return true;
}
struct Truthy {
    bool v = false;
    operator bool() const { return v; }
};

// Registration of each binding file's entry points (module.cpp calls them in turn).
void bind_token_trie(nb::module_& m);
void bind_steps(nb::module_& m);
void bind_matcher(nb::module_& m);
void bind_compile(nb::module_& m);
void bind_compact(nb::module_& m);
void bind_automata(nb::module_& m);
void bind_csr(nb::module_& m);
void bind_formats(nb::module_& m);
void bind_bm25(nb::module_& m);
void bind_bench(nb::module_& m);

}  // namespace trierouter

#pragma GCC visibility pop

NAMESPACE_BEGIN(NB_NAMESPACE)
NAMESPACE_BEGIN(detail)
template <>
struct type_caster<trierouter::Sat64> {
    NB_TYPE_CASTER(trierouter::Sat64, const_name("int"))
    bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
        return trierouter::read_saturating(src.ptr(), &value.v);
    }
    static handle from_cpp(trierouter::Sat64 v, rv_policy, cleanup_list*) noexcept {
        return PyLong_FromLongLong(v.v);
    }
};
template <>
struct type_caster<trierouter::Truthy> {
    NB_TYPE_CASTER(trierouter::Truthy, const_name("bool"))
    bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
        const int r = PyObject_IsTrue(src.ptr());
        if (r < 0) {
            PyErr_Clear();
            return false;
        }
        value.v = r != 0;
        return true;
    }
    static handle from_cpp(trierouter::Truthy v, rv_policy, cleanup_list*) noexcept {
        return PyBool_FromLong(v.v);
    }
};
NAMESPACE_END(detail)
NAMESPACE_END(NB_NAMESPACE)
