// Core's object: the serving arrays (serving.h) read through Python buffers, so that a
// memory-mapped file serves as well as a fresh compile.
#pragma once

#include "bindings/common.h"
#include "serving.h"

namespace trierouter {

// Core(..., compact=...): the walk's data (CompactWalk) and the Python buffers it reads.
struct Compact : CompactWalk {
    View v_bits, v_rank, v_first, v_lcp, v_vb, v_voff, v_tbuf, v_toff, v_match;
    PyObject* trie = nullptr;
    explicit Compact(TokenTrieObject* t) : CompactWalk(&t->trie), trie(Py_NewRef(reinterpret_cast<PyObject*>(t))) {}
    ~Compact() {
        for (View* v : {&v_bits, &v_rank, &v_first, &v_lcp, &v_vb, &v_voff, &v_tbuf, &v_toff, &v_match})
            if (v->held) PyBuffer_Release(&v->b);
        Py_XDECREF(trie);
    }
};

struct CoreObject {
    PyObject_HEAD
    View v_row_ptr, v_tokens, v_children, v_far_pos, v_far_child, v_ends;
    PyObject* tokens_obj;  // for mask views
    Serving s;    // the arrays, as the step reads them
    Compact* cx;  // the compact layout's buffers (s.cx points to it); null: every row stored
    bool ready;   // __init__ succeeded (false in the zeroed storage of Core.__new__)
};

// False with a RuntimeError set unless ``self`` was initialised (a Core made by ``Core.__new__``
// alone, or whose __init__ failed, has no arrays: every entry point refuses it).
inline bool core_ready(const CoreObject* self) {
    if (self->ready) return true;
    PyErr_SetString(PyExc_RuntimeError, "Core is not initialised (made without a successful __init__)");
    return false;
}




inline bool as_i64(PyObject* o, int64_t* out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return false;
    *out = overflow ? (overflow > 0 ? INT64_MAX : INT64_MIN) : v;
    return true;
}


// The mask of state s as a new array (valid or not: an invalid state gets the dead state's).
PyObject* make_mask(CoreObject* self, int64_t s);

}  // namespace trierouter
