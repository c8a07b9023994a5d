// TokenTrie (Python type): construction from a sequence of bytes, sizes, tables; the vocabulary's
// packing helpers (pack_tokens, join_tokens).
#include "bindings/common.h"
#include "token_trie.h"
#include "support/sort.h"
#include "support/threads.h"

namespace trierouter {

void TokenTrie_dealloc(TokenTrieObject* self) {
    destroy_token_trie(self->trie);
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}
// TokenTrie(tokens: sequence of bytes, matchable: bool buffer of len(tokens))
int TokenTrie_init(TokenTrieObject* self, PyObject* args, PyObject* kwds) {
    static const char* kwlist[] = {"tokens", "matchable", nullptr};
    PyObject* tokens;
    Py_buffer mview;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*", const_cast<char**>(kwlist), &tokens,
                                     &mview))
        return -1;
    if (self->ready) {  // a Core or a compile may read the arrays with the GIL released
        PyBuffer_Release(&mview);
        PyErr_SetString(PyExc_RuntimeError, "TokenTrie is already built: make a new one");
        return -1;
    }
    destroy_token_trie(self->trie);  // what a failed __init__ left
    double t0 = now_seconds();
    Lap lap;
    PyObject* seq = PySequence_Tuple(tokens);
    if (!seq) {
        PyBuffer_Release(&mview);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    self->trie.n_ids = static_cast<int32_t>(std::min<Py_ssize_t>(n, INT32_MAX));
    if (mview.len != n) {
        PyErr_Format(PyExc_ValueError, "matchable has %zd entries for %zd tokens", mview.len, n);
        PyBuffer_Release(&mview);
        Py_DECREF(seq);
        return -1;
    }
    const uint8_t* match = static_cast<const uint8_t*>(mview.buf);
    BigVec<Ent> ents;
    ents.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!match[i]) continue;
        PyObject* o = PyTuple_GET_ITEM(seq, i);
        if (!PyBytes_Check(o)) {
            PyErr_Format(PyExc_TypeError, "tokens[%zd] is not bytes", i);
            PyBuffer_Release(&mview);
            Py_DECREF(seq);
            return -1;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        if (len == 0) continue;
        ents.push_back(
            {{reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(o)), len}, static_cast<int32_t>(i)});
    }
    PyBuffer_Release(&mview);
    lap.mark("collect");
    try {
        build_token_trie(self->trie, ents, self->trie.n_ids);
    } catch (const std::bad_alloc&) {
        Py_DECREF(seq);
        destroy_token_trie(self->trie);
        PyErr_NoMemory();
        return -1;
    }
    Py_DECREF(seq);  // the token bytes are not used past this point
    self->trie.build_seconds = now_seconds() - t0;
    self->ready = true;
    return 0;
}

PyObject* TokenTrie_nbytes(TokenTrieObject* self, void*) {
    if (!self->ready) return PyLong_FromSize_t(sizeof(TokenTrieObject));
    return PyLong_FromSize_t(token_trie_nbytes(self->trie) + sizeof(TokenTrieObject));
}
PyObject* TokenTrie_n_nodes(TokenTrieObject* self, void*) { return PyLong_FromLong(self->trie.n_nodes); }
PyObject* TokenTrie_build_seconds(TokenTrieObject* self, void*) {
    return PyFloat_FromDouble(self->trie.build_seconds);
}
PyObject* TokenTrie_single(TokenTrieObject* self, void*) {
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(self->trie.single), 256);
}

// tables() -> dict[str, bytes]: every array of the trie (native byte order), for tests that
// check the structure against an independent construction
PyObject* TokenTrie_tables(TokenTrieObject* self, PyObject*) {
    Named items[] = {
        {"child_ptr", vec_bytes(self->trie.child_ptr)}, {"child_node", vec_bytes(self->trie.child_node)},
        {"child_label", vec_bytes(self->trie.child_label)}, {"tok_ptr", vec_bytes(self->trie.tok_ptr)},
        {"tok_ids", vec_bytes(self->trie.tok_ids)},       {"fail", vec_bytes(self->trie.fail)},
        {"dict", vec_bytes(self->trie.dict)},             {"depth", vec_bytes(self->trie.depth)},
        {"d1row", vec_bytes(self->trie.d1row)},           {"goto1", vec_bytes(self->trie.goto1)},
        {"info", vec_bytes(self->trie.info)},             {"outs", vec_bytes(self->trie.outs)},
        {"root_child", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(self->trie.root_child),
                                                 sizeof(self->trie.root_child))},
        {"single", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(self->trie.single), 256)},
    };
    return dict_of(items);
}

PyMethodDef TokenTrie_methods[] = {
    {"tables", reinterpret_cast<PyCFunction>(TokenTrie_tables), METH_NOARGS,
     "every array of the trie as bytes (native byte order), by name"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef TokenTrie_getset[] = {
    {"nbytes", reinterpret_cast<getter>(TokenTrie_nbytes), nullptr, "bytes held", nullptr},
    {"n_nodes", reinterpret_cast<getter>(TokenTrie_n_nodes), nullptr, "trie nodes", nullptr},
    {"build_seconds", reinterpret_cast<getter>(TokenTrie_build_seconds), nullptr, "build time",
     nullptr},
    {"single_byte", reinterpret_cast<getter>(TokenTrie_single), nullptr,
     "256 bytes: 1 where a matchable token is exactly that byte", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject TokenTrieType = {PyVarObject_HEAD_INIT(nullptr, 0)};
// pack_tokens(tokens: tuple[bytes, ...]) -> (buffer: uint8 array, offsets: int64 array): every
// token's bytes concatenated and where each starts (Vocabulary.buffer / offsets)
PyObject* py_pack_tokens(PyObject*, PyObject* args) {
    PyObject* tokens;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &tokens)) return nullptr;
    const Py_ssize_t n = PyTuple_GET_SIZE(tokens);
    Buf<int64_t> off;
    if (!off.resize(static_cast<size_t>(n) + 1)) return PyErr_NoMemory();
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        if (!PyBytes_Check(o)) return PyErr_Format(PyExc_TypeError, "tokens[%zd] is not bytes", i);
        off[static_cast<size_t>(i) + 1] = off[static_cast<size_t>(i)] + PyBytes_GET_SIZE(o);
    }
    Buf<uint8_t> buf;
    if (!buf.resize(static_cast<size_t>(off[static_cast<size_t>(n)]))) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        const size_t at = static_cast<size_t>(off[static_cast<size_t>(i)]);
        const size_t len = static_cast<size_t>(PyBytes_GET_SIZE(o));
        if (len) std::memcpy(buf.p + at, PyBytes_AS_STRING(o), len);  // (buf.p is null when all are empty)
    }
    PyObject* b = to_numpy(buf, NPY_UINT8);
    if (!b) return nullptr;
    PyObject* f = to_numpy(off, NPY_INT64);
    if (!f) {
        Py_DECREF(b);
        return nullptr;
    }
    return Py_BuildValue("(NN)", b, f);
}

// join_tokens(tokens: tuple[bytes, ...], selected: bool buffer) -> bytes: the selected tokens'
// bytes joined by b"\0" (Vocabulary.content_hash)
PyObject* py_join_tokens(PyObject*, PyObject* args) {
    PyObject* tokens;
    Py_buffer sel;
    if (!PyArg_ParseTuple(args, "O!y*", &PyTuple_Type, &tokens, &sel)) return nullptr;
    const Py_ssize_t n = PyTuple_GET_SIZE(tokens);
    if (sel.len != n) {
        PyBuffer_Release(&sel);
        return PyErr_Format(PyExc_ValueError, "selected has %zd entries for %zd tokens", sel.len, n);
    }
    const uint8_t* m = static_cast<const uint8_t*>(sel.buf);
    Py_ssize_t total = 0, count = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        if (!PyBytes_Check(o)) {
            PyBuffer_Release(&sel);
            return PyErr_Format(PyExc_TypeError, "tokens[%zd] is not bytes", i);
        }
        if (m[i]) {
            total += PyBytes_GET_SIZE(o);
            ++count;
        }
    }
    PyObject* out = PyBytes_FromStringAndSize(nullptr, count ? total + count - 1 : 0);
    if (!out) {
        PyBuffer_Release(&sel);
        return nullptr;
    }
    char* w = PyBytes_AS_STRING(out);
    bool first = true;
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!m[i]) continue;
        if (!first) *w++ = '\0';
        first = false;
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        if (PyBytes_GET_SIZE(o)) std::memcpy(w, PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o)));
        w += PyBytes_GET_SIZE(o);
    }
    PyBuffer_Release(&sel);
    return out;
}

// Fills in the TokenTrie type (made ready by the module's init).
void setup_tokentrie_type() {
    TokenTrieType.tp_name = "trierouter.registry._core.TokenTrie";
    TokenTrieType.tp_basicsize = sizeof(TokenTrieObject);
    TokenTrieType.tp_flags = Py_TPFLAGS_DEFAULT;
    TokenTrieType.tp_new = PyType_GenericNew;
    TokenTrieType.tp_init = reinterpret_cast<initproc>(TokenTrie_init);
    TokenTrieType.tp_dealloc = reinterpret_cast<destructor>(TokenTrie_dealloc);
    TokenTrieType.tp_getset = TokenTrie_getset;
    TokenTrieType.tp_methods = TokenTrie_methods;
    TokenTrieType.tp_doc = "Forward trie of a vocabulary's matchable token bytes.";
}

}  // namespace trierouter
