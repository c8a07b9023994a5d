// Core (Python type): serving over a ChoiceSet's arrays: advance, masks, fill, batches, sparse
// logits.
#include "bindings/common.h"
#include "bindings/core_object.h"

namespace trierouter {

// ------------------------------------------------------------------------------------------------
// Core: serving over the arrays of a ChoiceSet.

PyTypeObject CoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Releases what a Core holds (its buffers, the compact layout), leaving it empty and not ready.
void Core_clear(CoreObject* self) {
    self->ready = false;
    for (View* v : {&self->v_row_ptr, &self->v_tokens, &self->v_children, &self->v_far_pos,
                    &self->v_far_child, &self->v_ends})
        if (v->held) {
            PyBuffer_Release(&v->b);
            v->held = false;
        }
    Py_CLEAR(self->tokens_obj);
    delete self->cx;
    self->cx = nullptr;
    self->s = Serving{};
}

void Core_dealloc(CoreObject* self) {
    Core_clear(self);
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

// compact = (demand_bits, demand_rank, key_first, key_lcp, value_bytes, value_offsets,
//            terminator, trie, end_ids, n_nodes, token_buffer, token_offsets, matchable, check):
// checked against the stored rows; with check (a loaded file), every key's common prefix too
bool open_compact(CoreObject* self, PyObject* spec) {
    PyObject *bo, *ro, *fo, *lo, *vbo, *voo, *trie, *endo, *tbo, *too, *mo;
    Py_buffer term;
    long long n_nodes;
    int check;
    if (!PyArg_ParseTuple(spec, "OOOOOOy*O!OLOOOp", &bo, &ro, &fo, &lo, &vbo, &voo, &term,
                          &TokenTrieType, &trie, &endo, &n_nodes, &tbo, &too, &mo, &check))
        return false;
    std::string tstr(static_cast<const char*>(term.buf), static_cast<size_t>(term.len));
    PyBuffer_Release(&term);
    if (!trie_ready(reinterpret_cast<TokenTrieObject*>(trie), "compact layout")) return false;
    auto* x = new Compact(reinterpret_cast<TokenTrieObject*>(trie));
    delete self->cx;
    self->cx = x;
    self->s.cx = x;
    if (!get_view(bo, x->v_bits, 'u', 8, "demand_bits") || !get_view(ro, x->v_rank, 'i', 4, "demand_rank") ||
        !get_view(fo, x->v_first, 'i', 4, "key_first") || !get_view(lo, x->v_lcp, 'i', 4, "key_lcp") ||
        !get_view(vbo, x->v_vb, 'u', 1, "value_bytes") || !get_view(voo, x->v_voff, 'i', 8, "value_offsets") ||
        !get_view(tbo, x->v_tbuf, 'u', 1, "token_buffer") || !get_view(too, x->v_toff, 'i', 8, "token_offsets") ||
        !get_view(mo, x->v_match, 'u', 1, "matchable"))
        return false;
    x->tbuf = static_cast<const uint8_t*>(x->v_tbuf.b.buf);
    x->toff = static_cast<const int64_t*>(x->v_toff.b.buf);
    x->matchable = static_cast<const uint8_t*>(x->v_match.b.buf);
    x->n_tokens = x->v_match.b.len;
    bool tok_ok = x->v_toff.b.len / 8 == x->n_tokens + 1 && x->toff[0] == 0 &&
                  x->toff[x->n_tokens] <= x->v_tbuf.b.len;
    for (int64_t t = 0; tok_ok && t < x->n_tokens; ++t) tok_ok = x->toff[t + 1] >= x->toff[t];
    if (!tok_ok) {
        PyErr_SetString(PyExc_ValueError, "compact layout: token offsets do not fit the token buffer");
        return false;
    }
    PyObject* s = PySequence_Fast(endo, "end_ids must be a sequence of ints");
    if (!s) return false;
    for (Py_ssize_t q = 0; q < PySequence_Fast_GET_SIZE(s); ++q)
        x->end_ids.push_back(static_cast<int32_t>(PyLong_AsLong(PySequence_Fast_GET_ITEM(s, q))));
    Py_DECREF(s);
    if (PyErr_Occurred()) return false;
    std::sort(x->end_ids.begin(), x->end_ids.end());
    x->bits = static_cast<const uint64_t*>(x->v_bits.b.buf);
    x->rank = static_cast<const int32_t*>(x->v_rank.b.buf);
    KeyView& k = x->keys;
    k.vb = static_cast<const uint8_t*>(x->v_vb.b.buf);
    k.voff = static_cast<const int64_t*>(x->v_voff.b.buf);
    k.first = static_cast<const int32_t*>(x->v_first.b.buf);
    k.lcp = static_cast<const int32_t*>(x->v_lcp.b.buf);
    k.K = x->v_voff.b.len / 8 - 1;
    k.term = tstr;
    const int64_t n_states = n_nodes + 2, words = (n_states + 63) / 64;
    bool ok = n_nodes >= 1 && k.K >= 1 && x->v_bits.b.len / 8 == words && x->v_rank.b.len / 4 == words &&
              x->v_first.b.len / 4 == k.K && x->v_lcp.b.len / 4 == k.K;
    int64_t dropped = 0;
    for (int64_t w = 0; ok && w < words; ++w) {
        ok = x->rank[w] == dropped;
        dropped += __builtin_popcountll(x->bits[w]);
    }
    // END and DEAD are stored; every key's bytes and nodes within the set
    ok = ok && !((x->bits[n_nodes >> 6] >> (n_nodes & 63)) & 1) &&
         !((x->bits[(n_nodes + 1) >> 6] >> ((n_nodes + 1) & 63)) & 1) &&
         self->v_row_ptr.b.len / 4 == n_states - dropped + 1 && k.voff[0] == 0 &&
         k.voff[k.K] <= x->v_vb.b.len;
    int64_t next_first = 1;
    for (int64_t i = 0; ok && i < k.K; ++i) {
        ok = k.voff[i + 1] >= k.voff[i] && k.first[i] == next_first;
        int64_t l = 0;  // the walks read keys where lcp says they agree: the true lcp, and sorted
        if (ok && i && check) {
            l = k.common(i - 1, i);
            ok = l < k.klen(i) && (l == k.klen(i - 1) || k.byte(i - 1, l) < k.byte(i, l));
        } else if (i) {
            l = k.lcp[i];
            ok = ok && l >= 0 && l <= std::min(k.klen(i - 1), k.klen(i));
        }
        ok = ok && k.lcp[i] == l;
        next_first += k.klen(i) - l;
    }
    if (!ok || next_first != n_nodes) {
        PyErr_SetString(PyExc_ValueError, "compact layout: its arrays do not describe one set");
        return false;
    }
    x->n_nodes = n_nodes;
    static std::atomic<uint64_t> next_uid{1};
    x->uid = next_uid.fetch_add(1);
    return true;
}

// Core(row_ptr, tokens, children, far_pos, far_child, ends, width, compact=None)
// Every array checked (check_serving, and the compact layout by open_compact): ValueError naming
// the first entry out of range. A Core initialises once: its arrays may be read by a call that
// released the GIL, so they are never swapped under it.
int Core_init(CoreObject* self, PyObject* args, PyObject*) {
    PyObject *rp, *tk, *ch, *fp, *fc, *en, *spec = Py_None;
    long long width;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Core is already initialised: make a new one");
        return -1;
    }
    Core_clear(self);  // what a failed __init__ left
    if (!PyArg_ParseTuple(args, "OOOOOOL|O", &rp, &tk, &ch, &fp, &fc, &en, &width, &spec)) return -1;
    if (width < 1 || width > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "width=%lld: expected 1..%d", width, INT32_MAX);
        return -1;
    }
    if (!get_view(rp, self->v_row_ptr, 'i', 4, "row_ptr") ||
        !get_view(tk, self->v_tokens, 'i', 4, "tokens") ||
        !get_view(ch, self->v_children, 'u', 2, "children") ||
        !get_view(fp, self->v_far_pos, 'i', 4, "far_pos") ||
        !get_view(fc, self->v_far_child, 'i', 4, "far_child") ||
        !get_view(en, self->v_ends, 'i', 4, "ends"))
        return -1;
    int64_t nrp = self->v_row_ptr.b.len / 4;
    if (nrp < (spec == Py_None ? 4 : 3)) {
        PyErr_SetString(PyExc_ValueError, spec == Py_None ? "row_ptr: fewer than 4 entries (a root, END and DEAD)"
                                                          : "row_ptr: fewer than 3 entries (END and DEAD)");
        return -1;
    }
    Py_INCREF(tk);
    Py_XSETREF(self->tokens_obj, tk);
    self->s.row_ptr = static_cast<const int32_t*>(self->v_row_ptr.b.buf);
    self->s.tokens = static_cast<const int32_t*>(self->v_tokens.b.buf);
    self->s.children = static_cast<const uint16_t*>(self->v_children.b.buf);
    self->s.far_pos = static_cast<const int32_t*>(self->v_far_pos.b.buf);
    self->s.far_child = static_cast<const int32_t*>(self->v_far_child.b.buf);
    self->s.ends = static_cast<const int32_t*>(self->v_ends.b.buf);
    self->s.n_far = self->v_far_pos.b.len / 4;
    self->s.n_ends = self->v_ends.b.len / 4;
    self->s.n_pairs = self->v_tokens.b.len / 4;
    self->s.n_states = nrp - 1;
    if (spec != Py_None) {
        if (!PyTuple_Check(spec) || !open_compact(self, spec)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "compact must be a tuple or None");
            return -1;
        }
        self->s.n_states = self->cx->n_nodes + 2;
    }
    self->s.end_state = self->s.n_states - 2;
    self->s.dead_state = self->s.n_states - 1;
    self->s.width = width;
    self->s.words = (width + 31) / 32;
    if (self->v_children.b.len / 2 != self->s.n_pairs || self->v_far_child.b.len / 4 != self->s.n_far) {
        PyErr_Format(PyExc_ValueError, "children (%zd) and far_child (%zd) must match tokens (%lld) and far_pos (%lld)",
                     self->v_children.b.len / 2, self->v_far_child.b.len / 4,
                     static_cast<long long>(self->s.n_pairs), static_cast<long long>(self->s.n_far));
        return -1;
    }
    std::string why;
    if (check_serving(&self->s, nrp - 1, &why)) {
        PyErr_Format(PyExc_ValueError, "Core: %s", why.c_str());
        return -1;
    }
    self->ready = true;
    return 0;
}







PyObject* Core_advance(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "advance(state, token)");
        return nullptr;
    }
    int64_t s, t;
    if (!core_ready(self) || !as_i64(args[0], &s) || !as_i64(args[1], &t)) return nullptr;
    return PyLong_FromLongLong(core_advance(&self->s, s, t));
}


PyObject* make_mask(CoreObject* self, int64_t s) {
    if (!core_ready(self)) return nullptr;
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(self->s.n_states)) {
        PyErr_Format(PyExc_ValueError, "state=%lld: not a state of this set (0..%lld)",
                     static_cast<long long>(s), static_cast<long long>(self->s.n_states - 1));
        return nullptr;
    }
    const int64_t r = stored_row(&self->s, s);
    if (r < 0) {  // a walked row: a new array
        std::vector<int32_t> ids;
        int64_t n;
        const int32_t* p = row_ids(&self->s, s, &n, ids);
        npy_intp dims[1] = {static_cast<npy_intp>(n)};
        PyObject* arr = PyArray_SimpleNew(1, dims, NPY_INT32);
        if (arr && n) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(arr)), p, static_cast<size_t>(n) * 4);
        return arr;
    }
    int64_t lo;
    const int64_t n = row_span(&self->s, r, &lo);
    npy_intp dims[1] = {static_cast<npy_intp>(n)};
    PyObject* arr = PyArray_New(&PyArray_Type, 1, dims, NPY_INT32, nullptr,
                                const_cast<int32_t*>(self->s.tokens + lo), 0, NPY_ARRAY_CARRAY_RO,
                                nullptr);
    if (!arr) return nullptr;
    Py_INCREF(self->tokens_obj);
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), self->tokens_obj) < 0) {
        Py_DECREF(arr);
        return nullptr;
    }
    return arr;
}

PyObject* Core_mask(CoreObject* self, PyObject* arg) {
    int64_t s;
    if (!as_i64(arg, &s)) return nullptr;
    return make_mask(self, s);
}

PyObject* Core_is_terminal(CoreObject* self, PyObject* arg) {
    int64_t s;
    if (!core_ready(self) || !as_i64(arg, &s)) return nullptr;
    if (s == self->s.end_state) Py_RETURN_TRUE;
    if (s < 0 || s >= self->s.end_state) Py_RETURN_FALSE;
    const int32_t* e = self->s.ends;
    const int32_t* f = std::lower_bound(e, e + self->s.n_ends, static_cast<int32_t>(s));
    if (f != e + self->s.n_ends && *f == s) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

// A writable int32 2-D (or 1-D) buffer whose rows are contiguous; torch CPU tensors through
// their zero-copy .numpy() view.
struct Mask2D {
    Py_buffer b;
    bool held = false;
    PyObject* tmp = nullptr;
    char* base = nullptr;
    int64_t rows = 0, words = 0, row_stride = 0;
    ~Mask2D() {
        if (held) PyBuffer_Release(&b);
        Py_XDECREF(tmp);
    }
    bool open(PyObject* obj, int itemsize, const char* what) {
        if (PyObject_GetBuffer(obj, &b, PyBUF_RECORDS) < 0) {
            // torch CPU tensors: their .numpy() view shares the memory (no copy)
            PyErr_Clear();
            if (!PyObject_HasAttrString(obj, "numpy")) {
                PyErr_Format(PyExc_TypeError,
                             "%s: expected a writable array (numpy, or a torch CPU tensor), got %s",
                             what, Py_TYPE(obj)->tp_name);
                return false;
            }
            tmp = PyObject_CallMethod(obj, "numpy", nullptr);
            if (!tmp) return false;
            if (PyObject_GetBuffer(tmp, &b, PyBUF_RECORDS) < 0) return false;
        }
        held = true;
        if (b.itemsize != itemsize || (b.ndim != 1 && b.ndim != 2)) {
            PyErr_Format(PyExc_TypeError, "%s: expected a 1-D or 2-D array of %d-byte items", what,
                         itemsize);
            return false;
        }
        int64_t inner = b.ndim == 2 ? b.strides[1] : b.strides[0];
        if (inner != itemsize) {
            PyErr_Format(PyExc_ValueError, "%s: rows must be contiguous", what);
            return false;
        }
        base = static_cast<char*>(b.buf);
        rows = b.ndim == 2 ? b.shape[0] : 1;
        words = b.ndim == 2 ? b.shape[1] : b.shape[0];
        row_stride = b.ndim == 2 ? b.strides[0] : 0;
        return true;
    }
    inline int32_t* row32(int64_t r) const { return reinterpret_cast<int32_t*>(base + r * row_stride); }
};




bool check_words(const Serving* c, const Mask2D& m) {
    if (m.words < c->words) {
        PyErr_Format(PyExc_ValueError,
                     "bitmask rows have %lld int32 words; this set needs %lld (ceil(width / 32))",
                     static_cast<long long>(m.words), static_cast<long long>(c->words));
        return false;
    }
    return true;
}

// fill(state, bitmask, index=0)
PyObject* Core_fill(CoreObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (!core_ready(self)) return nullptr;
    PyObject* idx_obj = nargs == 3 ? args[2] : nullptr;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; ++k) {
        PyObject* name = PyTuple_GET_ITEM(kwnames, k);
        if (PyUnicode_CompareWithASCIIString(name, "index") == 0 && !idx_obj) {
            idx_obj = args[nargs + k];
        } else {
            PyErr_Format(PyExc_TypeError, "fill_next_token_bitmask() got an unexpected keyword %R", name);
            return nullptr;
        }
    }
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "fill_next_token_bitmask(state, bitmask, index=0)");
        return nullptr;
    }
    int64_t s, idx = 0;
    if (!as_i64(args[0], &s) || (idx_obj && !as_i64(idx_obj, &idx))) return nullptr;
    Mask2D m;
    if (!m.open(args[1], 4, "bitmask") || !check_words(&self->s, m)) return nullptr;
    if (idx < 0) idx += m.rows;
    if (idx < 0 || idx >= m.rows) {
        PyErr_Format(PyExc_IndexError, "index %lld out of range for %lld bitmask rows",
                     static_cast<long long>(idx), static_cast<long long>(m.rows));
        return nullptr;
    }
    fill_row(&self->s, s, m.row32(idx), m.words);
    Py_RETURN_NONE;
}


// advance_batch(states, tokens, out) -> None; all int64 1-D of one length (out may be states).
// Rows of a batch sit anywhere in the set's arrays: each step's loads are issued ahead
// (prefetch) so that the cache misses of different rows overlap.
PyObject* Core_advance_batch(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "advance_batch(states, tokens[, out])");
        return nullptr;
    }
    if (!core_ready(self)) return nullptr;
    I64View st, tk, out;
    if (!st.open(args[0], "states") || !tk.open(args[1], "tokens")) return nullptr;
    if (st.n != tk.n) {
        PyErr_SetString(PyExc_ValueError, "states and tokens differ in length");
        return nullptr;
    }
    // without ``out``, a new array is returned: the public API's common case in one call (each
    // numpy call it saves runs with cold caches in a server, right after a 5 MB bitmask fill)
    PyObject* made = nullptr;
    if (nargs == 2) {
        npy_intp dims[1] = {static_cast<npy_intp>(st.n)};
        made = PyArray_SimpleNew(1, dims, NPY_INT64);
        if (!made) return nullptr;
    }
    if (!out.open(made ? made : args[2], "out", true)) {
        Py_XDECREF(made);
        return nullptr;
    }
    if (out.n != st.n) {
        PyErr_SetString(PyExc_ValueError, "states, tokens and out differ in length");
        Py_XDECREF(made);
        return nullptr;
    }
    int64_t* o = const_cast<int64_t*>(out.p);
    const int64_t n = st.n;
    advance_batch(&self->s, st.p, tk.p, n, o);
    if (made) return made;
    Py_RETURN_NONE;
}

// fill_batch(states, bitmask, rows_or_None)
PyObject* Core_fill_batch(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "fill_batch(states, bitmask, rows)");
        return nullptr;
    }
    if (!core_ready(self)) return nullptr;
    I64View st, rw;
    Mask2D m;
    if (!st.open(args[0], "states") || !m.open(args[1], 4, "bitmask") || !check_words(&self->s, m))
        return nullptr;
    bool has_rows = args[2] != Py_None;
    if (has_rows && !rw.open(args[2], "rows")) return nullptr;
    if (has_rows && rw.n != st.n) {
        PyErr_SetString(PyExc_ValueError, "states and rows differ in length");
        return nullptr;
    }
    // the rows checked here are the rows written below: copied, since the caller's array could
    // change once the GIL is released (states need no copy: each is checked where it is read)
    std::vector<int64_t> target(static_cast<size_t>(st.n));
    for (int64_t i = 0; i < st.n; ++i) {
        const int64_t given = has_rows ? rw.p[i] : i;
        const int64_t r = given < 0 ? given + m.rows : given;
        if (r < 0 || r >= m.rows) {
            PyErr_Format(PyExc_IndexError, "rows[%lld] = %lld out of range for %lld bitmask rows",
                         static_cast<long long>(i), static_cast<long long>(given), static_cast<long long>(m.rows));
            return nullptr;
        }
        target[static_cast<size_t>(i)] = r;
    }
    Py_BEGIN_ALLOW_THREADS;
    fill_rows(&self->s, self->cx != nullptr, st.p, target.data(), st.n, m.base, m.row_stride, m.words);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

// The arguments apply_sparse and copy_sparse share: states, a 2-D logits buffer, rows (or None:
// row i), the bits of -inf and the item size; every target row checked in range, and copied (the
// caller's array could change once the GIL is released).
struct SparseArgs {
    I64View st, rw;
    long long bits = 0, isz = 0;
    Mask2D m;
    bool has_rows = false;
    std::vector<int64_t> target;
    bool open(CoreObject* self, PyObject* const* args, int i_states, int i_logits, int i_rows, int i_bits,
              const char* what) {
        if (!core_ready(self) || !st.open(args[i_states], "states")) return false;
        bits = PyLong_AsLongLong(args[i_bits]);
        isz = PyLong_AsLongLong(args[i_bits + 1]);
        if (PyErr_Occurred()) return false;
        if (isz != 2 && isz != 4) {
            PyErr_SetString(PyExc_ValueError, "itemsize must be 2 or 4");
            return false;
        }
        if (!m.open(args[i_logits], static_cast<int>(isz), what)) return false;
        has_rows = args[i_rows] != Py_None;
        if (has_rows && !rw.open(args[i_rows], "rows")) return false;
        if (has_rows && rw.n != st.n) {
            PyErr_SetString(PyExc_ValueError, "states and rows differ in length");
            return false;
        }
        target.resize(static_cast<size_t>(st.n));
        for (int64_t i = 0; i < st.n; ++i) {
            const int64_t r = has_rows ? rw.p[i] : i;
            if (r < 0 || r >= m.rows) {
                PyErr_Format(PyExc_IndexError, "rows[%lld] = %lld out of range for %lld %s rows",
                             static_cast<long long>(i), static_cast<long long>(r), static_cast<long long>(m.rows), what);
                return false;
            }
            target[static_cast<size_t>(i)] = r;
        }
        return true;
    }
    int64_t row(int64_t i) const { return target[static_cast<size_t>(i)]; }
};

// apply_sparse(states, logits, rows_or_None, neg_inf_bits: int, itemsize: int)
// Row rows[i] of logits keeps the values of the tokens allowed at states[i]; every other entry
// becomes -inf (given as the bit pattern of the logits' dtype). Touches each row once.
PyObject* Core_apply_sparse(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "apply_sparse(states, logits, rows, neg_inf_bits, itemsize)");
        return nullptr;
    }
    SparseArgs a;
    if (!a.open(self, args, 0, 1, 2, 3, "logits")) return nullptr;
    const int64_t V = a.m.words;
    const long long bits = a.bits, isz = a.isz;
    std::vector<uint32_t> keep4;
    std::vector<uint16_t> keep2;
    std::vector<int32_t> scratch;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t i = 0; i < a.st.n; ++i) {
        int64_t s = valid_state(&self->s, a.st.p[i]);
        int64_t hi;
        const int32_t* tk = row_ids(&self->s, s, &hi, scratch);
        char* row = a.m.base + a.row(i) * a.m.row_stride;
        if (isz == 4) {
            keep_only(reinterpret_cast<uint32_t*>(row), V, tk, hi, static_cast<uint32_t>(bits), keep4);
        } else {
            keep_only(reinterpret_cast<uint16_t*>(row), V, tk, hi, static_cast<uint16_t>(bits), keep2);
        }
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

// copy_sparse(states, src_or_None, dst, rows_or_None, neg_inf_bits: int, itemsize: int)
// Only the tokens allowed at states[i] in row rows[i] of dst are written: copied from the same
// row of src, or set to -inf when src is None (undoing an earlier copy). Nothing else is touched:
// a dst kept at -inf serves as masked logits at the cost of the allowed tokens alone.
PyObject* Core_copy_sparse(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "copy_sparse(states, src, dst, rows, neg_inf_bits, itemsize)");
        return nullptr;
    }
    SparseArgs a;
    if (!a.open(self, args, 0, 2, 3, 4, "dst")) return nullptr;
    Mask2D src;
    const bool has_src = args[1] != Py_None;
    if (has_src) {
        if (!src.open(args[1], static_cast<int>(a.isz), "src")) return nullptr;
        if (src.words != a.m.words || src.rows != a.m.rows) {
            PyErr_SetString(PyExc_ValueError, "src and dst differ in shape");
            return nullptr;
        }
    }
    const int64_t V = a.m.words;
    const long long bits = a.bits, isz = a.isz;
    std::vector<int32_t> scratch;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t i = 0; i < a.st.n; ++i) {
        int64_t s = valid_state(&self->s, a.st.p[i]);
        int64_t hi;
        const int32_t* tk = row_ids(&self->s, s, &hi, scratch);
        const int64_t r = a.row(i);
        char* row = a.m.base + r * a.m.row_stride;
        const char* from = has_src ? src.base + r * src.row_stride : nullptr;
        if (isz == 4) {
            copy_allowed_ids(reinterpret_cast<uint32_t*>(row),
                             reinterpret_cast<const uint32_t*>(from), V, tk, hi,
                             static_cast<uint32_t>(bits));
        } else {
            copy_allowed_ids(reinterpret_cast<uint16_t*>(row),
                             reinterpret_cast<const uint16_t*>(from), V, tk, hi,
                             static_cast<uint16_t>(bits));
        }
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

PyObject* Core_get_end(CoreObject* self, void*) {
    return core_ready(self) ? PyLong_FromLongLong(self->s.end_state) : nullptr;
}
PyObject* Core_get_dead(CoreObject* self, void*) {
    return core_ready(self) ? PyLong_FromLongLong(self->s.dead_state) : nullptr;
}

PyMethodDef Core_methods[] = {
    {"advance", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_advance)),
     METH_FASTCALL, "advance(state, token) -> next state (DEAD if refused)"},
    {"mask", reinterpret_cast<PyCFunction>(Core_mask), METH_O,
     "mask(state) -> allowed ids (read-only int32 view)"},
    {"is_terminal", reinterpret_cast<PyCFunction>(Core_is_terminal), METH_O, "is_terminal(state)"},
    {"fill", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_fill)),
     METH_FASTCALL | METH_KEYWORDS, "fill(state, bitmask, index=0)"},
    {"advance_batch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_advance_batch)),
     METH_FASTCALL, "advance_batch(states, tokens, out)"},
    {"fill_batch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_fill_batch)),
     METH_FASTCALL, "fill_batch(states, bitmask, rows)"},
    {"apply_sparse", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_apply_sparse)),
     METH_FASTCALL, "apply_sparse(states, logits, rows, neg_inf_bits, itemsize)"},
    {"copy_sparse", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_copy_sparse)),
     METH_FASTCALL, "copy_sparse(states, src, dst, rows, neg_inf_bits, itemsize)"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef Core_getset[] = {
    {"END", reinterpret_cast<getter>(Core_get_end), nullptr, "end state", nullptr},
    {"DEAD", reinterpret_cast<getter>(Core_get_dead), nullptr, "dead state", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};


// Fills in the Core type (made ready by the module's init).
void setup_core_type() {
    CoreType.tp_name = "trierouter.registry._core.Core";
    CoreType.tp_basicsize = sizeof(CoreObject);
    CoreType.tp_flags = Py_TPFLAGS_DEFAULT;
    CoreType.tp_new = PyType_GenericNew;
    CoreType.tp_init = reinterpret_cast<initproc>(Core_init);
    CoreType.tp_dealloc = reinterpret_cast<destructor>(Core_dealloc);
    CoreType.tp_methods = Core_methods;
    CoreType.tp_getset = Core_getset;
    CoreType.tp_doc = "Serving over a ChoiceSet's arrays.";
}

}  // namespace trierouter
