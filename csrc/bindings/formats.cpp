// Fixed formats and regex entry points: int_range_dfa, nfa_determinize, regex_dfa, key_automaton.
#include "bindings/common.h"
#include "formats.h"
#include "regex.h"

namespace trierouter {


PyObject* py_int_range_dfa(PyObject*, PyObject* args) {
    int zero;
    const char *pl, *ph, *nl, *nh;
    if (!PyArg_ParseTuple(args, "pssss", &zero, &pl, &ph, &nl, &nh)) return nullptr;
    for (const char* s : {pl, ph, nl, nh})
        for (const char* c = s; *c; ++c)
            if (*c < '0' || *c > '9' || (c == s && *c == '0')) {
                PyErr_SetString(PyExc_ValueError, "int_range_dfa: a bound is not a decimal >= 1");
                return nullptr;
            }
    Dfa out;
    try {
        int_range_dfa(zero, pl, ph, nl, nh, out);
    } catch (const std::bad_alloc&) {
        return PyErr_NoMemory();
    }
    return dfa_result(out, true);
}



// :func:`determinize` with the GIL released; false when memory ran out (``fits``: its result).
bool determinize_nogil(const NfaEdges& g, int64_t start, int64_t final, long long max_states, Dfa& out, bool& fits) {
    bool ok = true;
    Py_BEGIN_ALLOW_THREADS;
    try {
        fits = determinize(g, start, final, max_states, out);
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    Py_END_ALLOW_THREADS;
    return ok;
}

// nfa_determinize(n: int, edge_src: int32[], edge_dst: int32[], edge_bytes: uint8 (E, 32),
//                 eps_src: int32[], eps_dst: int32[], start: int, final: int, max_states=0,
//                 edges=False)
//   -> :func:`dfa_result` of :func:`determinize`, or None once more than ``max_states`` (> 0)
//   DFA states are found.
PyObject* py_nfa_determinize(PyObject*, PyObject* args) {
    long long n_ll, start_ll, final_ll, max_states = 0;  // max_states > 0: None past that many
    int edges_out = 0;
    PyObject *es_o, *ed_o, *eb_o, *xs_o, *xd_o;
    if (!PyArg_ParseTuple(args, "LOOOOOLL|Lp", &n_ll, &es_o, &ed_o, &eb_o, &xs_o, &xd_o, &start_ll, &final_ll,
                          &max_states, &edges_out))
        return nullptr;
    I32View es, ed, xs, xd;
    if (!es.open(es_o, "edge_src") || !ed.open(ed_o, "edge_dst") || !xs.open(xs_o, "eps_src") ||
        !xd.open(xd_o, "eps_dst"))
        return nullptr;
    ByteView eb;
    if (!eb.open(eb_o)) return nullptr;
    const int64_t n = n_ll;
    if (n <= 0 || n > (int64_t{1} << 24) || es.n != ed.n || xs.n != xd.n || eb.n != es.n * 32 ||
        start_ll < 0 || start_ll >= n || final_ll < 0 || final_ll >= n) {
        PyErr_SetString(PyExc_ValueError, "nfa_determinize: bad sizes");
        return nullptr;
    }
    for (int64_t i = 0; i < es.n; ++i)
        if (es.p[i] < 0 || es.p[i] >= n || ed.p[i] < 0 || ed.p[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "nfa_determinize: an edge out of range");
            return nullptr;
        }
    for (int64_t i = 0; i < xs.n; ++i)
        if (xs.p[i] < 0 || xs.p[i] >= n || xd.p[i] < 0 || xd.p[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "nfa_determinize: an epsilon edge out of range");
            return nullptr;
        }
    const NfaEdges g{n, es.p, ed.p, xs.p, xd.p, eb.p, es.n, xs.n};
    Dfa dfa;
    bool fits = true;
    if (!determinize_nogil(g, start_ll, final_ll, max_states, dfa, fits)) return PyErr_NoMemory();
    if (!fits) Py_RETURN_NONE;
    return dfa_result(dfa, edges_out != 0);
}


// regex_dfa(pattern: bytes, quoted: bool, max_states: int, max_nfa: int, max_depth: int)
//   -> (src int32[], byte int32[], dst int32[], accept bool[m]): the DFA of ``pattern``'s full
//   matches (between two '"' bytes with ``quoted``), as nfa_fragment(seq(lit('"'),
//   pattern_node(pattern), lit('"'))) builds it: the same states, numbered alike; or an int:
//   0 outside the supported subset (or groups nested past ``max_depth``), 1 past ``max_states``
//   (> 0) DFA states, 2 past ``max_nfa`` NFA states. ASCII only (other text: ValueError).
PyObject* py_regex_dfa(PyObject*, PyObject* args) {
    const char* s;
    Py_ssize_t n;
    int quoted;
    long long max_states, max_nfa, max_depth;
    if (!PyArg_ParseTuple(args, "y#pLLL", &s, &n, &quoted, &max_states, &max_nfa, &max_depth)) return nullptr;
    for (Py_ssize_t k = 0; k < n; ++k)
        if (static_cast<unsigned char>(s[k]) >= 0x80) {
            PyErr_SetString(PyExc_ValueError, "regex_dfa: the pattern is not ASCII");
            return nullptr;
        }
    if (max_nfa <= 0 || max_nfa > (int64_t{1} << 24) || max_depth < 0 || max_depth > 1000) {
        PyErr_SetString(PyExc_ValueError, "regex_dfa: max_nfa must be in 1..2**24, max_depth in 0..1000");
        return nullptr;
    }
    Dfa dfa;
    int verdict = -1;  // -1: built
    bool ok = true;
    Py_BEGIN_ALLOW_THREADS;
    try {
        verdict = regex_dfa(s, static_cast<int64_t>(n), quoted != 0, max_states, max_nfa, max_depth, dfa);
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    Py_END_ALLOW_THREADS;
    if (!ok) return PyErr_NoMemory();
    if (verdict >= 0) return PyLong_FromLong(verdict);
    return dfa_result(dfa, true);
}
// ---- eager tool registries (branch eager): an object's key automaton in one call ----------

// key_automaton(texts: list[bytes], required: bytes) -> (src, byte, dst, count, exit_states,
//   exit_keys): the key automaton of an object (slots/objects.py's _key_automaton, same states
//   in the same numbering, same edge order): texts[j] is key j's JSON text and ": ", required[j]
//   nonzero when key j is required. Exits in the reference's order: state 2 (after "}", key -1)
//   then each key's chain end (key j). The trie's children are kept in insertion order and the
//   windows' work list is a stack, as in the reference, so the numbering matches.
PyObject* py_key_automaton(PyObject*, PyObject* args) {
    PyObject *texts_o, *req_o;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &texts_o, &PyBytes_Type, &req_o)) return nullptr;
    const Py_ssize_t n = PyList_GET_SIZE(texts_o);
    if (PyBytes_GET_SIZE(req_o) != n || n >= (Py_ssize_t{1} << 20)) {
        PyErr_SetString(PyExc_ValueError, "key_automaton: one required flag per key, < 2**20 keys");
        return nullptr;
    }
    std::vector<std::string_view> texts(static_cast<size_t>(n));
    for (Py_ssize_t j = 0; j < n; ++j) {
        PyObject* o = PyList_GET_ITEM(texts_o, j);
        if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) == 0) {
            PyErr_SetString(PyExc_ValueError, "key_automaton: texts must be non-empty bytes");
            return nullptr;
        }
        texts[static_cast<size_t>(j)] = std::string_view(PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o)));
    }
    const char* req = PyBytes_AS_STRING(req_o);
    KeyAutomaton out;
    const int verdict = key_automaton(texts, req, out);
    if (verdict == 2) {
        PyErr_SetString(PyExc_ValueError, "key_automaton: too many states");
        return nullptr;
    }
    if (verdict == 1) return PyErr_NoMemory();
    Buf<int32_t>&src = out.src, &byte = out.byte, &dst = out.dst, &exs = out.exs, &exk = out.exk;
    const int64_t count = out.count;
    PyObject* a = to_numpy(src, NPY_INT32);
    PyObject* b = to_numpy(byte, NPY_INT32);
    PyObject* c = to_numpy(dst, NPY_INT32);
    PyObject* e = to_numpy(exs, NPY_INT32);
    PyObject* f = to_numpy(exk, NPY_INT32);
    if (!a || !b || !c || !e || !f) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_XDECREF(e);
        Py_XDECREF(f);
        return nullptr;
    }
    return Py_BuildValue("(NNNLNN)", a, b, c, static_cast<long long>(count), e, f);
}


}  // namespace trierouter
