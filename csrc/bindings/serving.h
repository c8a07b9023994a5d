// Core's object and the step every caller shares (Core.advance, advance_batch, MatcherBase):
// inline, so that a step stays one call from Python. The arrays are read through Python
// buffers (a memory-mapped file serves as well as a fresh compile).
#pragma once

#include "bindings/common.h"
#include "compact.h"
#include "compile.h"
#include "token_trie.h"

namespace trierouter {

// A compact layout's serving side (Core(..., compact=...)): which states are walked on demand
// (demand_bits; demand_rank[w] = such states before word w), the keys and the token trie.
struct Compact {
    View v_bits, v_rank, v_first, v_lcp, v_vb, v_voff, v_tbuf, v_toff, v_match;
    const uint64_t* bits = nullptr;
    const int32_t* rank = nullptr;
    // the vocabulary's token bytes (buffer, offsets) and matchable flags: an advance compares
    // the token's bytes with the node's keys instead of walking the row
    const uint8_t* tbuf = nullptr;
    const int64_t* toff = nullptr;
    const uint8_t* matchable = nullptr;
    int64_t n_tokens = 0;
    KeyView keys;
    PyObject* trie = nullptr;
    TT tt;
    std::vector<int32_t> end_ids;  // sorted; empty when the set leaves them out (allow_end=False)
    int64_t n_nodes = 0;
    uint64_t uid = 0;  // names this layout in the walked-row caches (never reused)
    explicit Compact(TokenTrieObject* t) : trie(Py_NewRef(reinterpret_cast<PyObject*>(t))), tt(&t->trie) {}
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
    const int32_t* row_ptr;
    const int32_t* tokens;
    const uint16_t* children;
    const int32_t* far_pos;
    const int32_t* far_child;
    const int32_t* ends;
    int64_t n_far, n_ends, n_states, n_pairs, end_state, dead_state, width, words;
    Compact* cx;  // null: every row stored (row_ptr indexed by state)
};

// Compact layout: the index of s's stored row, or -1 when s's row is walked on demand (s valid).
inline int64_t stored_row(const CoreObject* c, int64_t s) {
    const Compact* x = c->cx;
    if (!x) return s;
    const uint64_t word = x->bits[s >> 6], bit = uint64_t(1) << (s & 63);
    if (word & bit) return -1;
    return s - x->rank[s >> 6] - __builtin_popcountll(word & (bit - 1));
}

// advance from a walked node: the token's bytes against the node's keys (no walk). The first
// key that continues with them added the node they lead to (the keys before it do not share
// path + bytes, so its common prefix with its predecessor is shorter).
int64_t walked_advance(const CoreObject* c, int64_t s, int64_t token);

inline int64_t core_advance(const CoreObject* c, int64_t s, int64_t token) {
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(c->n_states)) return c->dead_state;
    const int64_t r = stored_row(c, s);
    if (r < 0) return walked_advance(c, s, token);
    const int64_t lo = c->row_ptr[r];
    int64_t n = c->row_ptr[r + 1] - lo;
    if (n == 0) return c->dead_state;
    // The last id <= token in the sorted row, without branches on the ids (a conditional move):
    // rows of a batch are random, and the branches of a plain binary search mispredicted (A/B on
    // the 40 batch steps of compile_and_step, 256 rows: 15-30% less time for advance_batch).
    const int32_t* base = c->tokens + lo;
    while (n > 1) {
        const int64_t half = n >> 1;
        base = (base[half] <= token) ? base + half : base;
        n -= half;
    }
    if (*base != token) return c->dead_state;
    const int64_t at = base - c->tokens;
    const uint16_t d = c->children[at];
    if (d < FAR) return s + d;
    if (d == TO_END) return c->end_state;
    const int32_t* f = std::lower_bound(c->far_pos, c->far_pos + c->n_far, static_cast<int32_t>(at));
    return c->far_child[f - c->far_pos];
}

inline bool as_i64(PyObject* o, int64_t* out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return false;
    *out = overflow ? (overflow > 0 ? INT64_MAX : INT64_MIN) : v;
    return true;
}

inline int64_t valid_state(const CoreObject* c, int64_t s) {
    return static_cast<uint64_t>(s) < static_cast<uint64_t>(c->n_states) ? s : c->dead_state;
}

// The mask of state s as a new array (valid or not: an invalid state gets the dead state's).
PyObject* make_mask(CoreObject* self, int64_t s);

}  // namespace trierouter
