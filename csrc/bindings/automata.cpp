// Tool automata's entry points: dfa_wire, dfa_compress, dfa_masks(_many), dfa_list_masks, the CSR
// helpers of fixed formats and shared pieces, spelled_count, walk_counts.
#include "bindings/common.h"
#include "automata.h"
#include "token_trie.h"

namespace trierouter {

// The buffers of one dfa_wire call, held while ``Wire``'s spans point into them.
struct WireArgs {
    std::vector<I32View> fs, fb, fd;
    I64Seq offs, lstate, lfrom, extra;
    int64_t n = 0;
};

// False with a Python error set when ``args`` is not a tuple of dfa_wire's arguments; else the
// buffers opened into ``w`` and ``wire``'s spans set over them. The edges' ranges are checked by
// wire_run.
bool wire_open(WireArgs& w, Wire& wire, PyObject* args) {
    PyObject *srcs_o, *bytes_o, *dsts_o, *offs_o, *lstate_o, *lfrom_o, *extra_o;
    long long n_ll;
    if (!PyArg_ParseTuple(args, "O!O!O!OLOOO", &PyList_Type, &srcs_o, &PyList_Type, &bytes_o,
                          &PyList_Type, &dsts_o, &offs_o, &n_ll, &lstate_o, &lfrom_o, &extra_o))
        return false;
    const Py_ssize_t nf = PyList_GET_SIZE(srcs_o);
    if (!w.offs.open(offs_o, "offsets") || !w.lstate.open(lstate_o, "link_state") ||
        !w.lfrom.open(lfrom_o, "link_from") || !w.extra.open(extra_o, "extra"))
        return false;
    if (PyList_GET_SIZE(bytes_o) != nf || PyList_GET_SIZE(dsts_o) != nf || w.offs.n != nf ||
        w.lstate.n != w.lfrom.n || w.extra.n % 3 || n_ll < 0 || n_ll > (int64_t{1} << 31) - 1) {
        PyErr_SetString(PyExc_ValueError, "dfa_wire: bad sizes");
        return false;
    }
    w.n = n_ll;
    try {
        w.fs = std::vector<I32View>(static_cast<size_t>(nf));
        w.fb = std::vector<I32View>(static_cast<size_t>(nf));
        w.fd = std::vector<I32View>(static_cast<size_t>(nf));
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
        return false;
    }
    for (Py_ssize_t i = 0; i < nf; ++i) {
        const size_t k = static_cast<size_t>(i);
        if (!w.fs[k].open(PyList_GET_ITEM(srcs_o, i), "src") || !w.fb[k].open(PyList_GET_ITEM(bytes_o, i), "byte") ||
            !w.fd[k].open(PyList_GET_ITEM(dsts_o, i), "dst"))
            return false;
        if (w.fb[k].n != w.fs[k].n || w.fd[k].n != w.fs[k].n) {
            PyErr_SetString(PyExc_ValueError, "dfa_wire: a fragment's edge arrays differ in length");
            return false;
        }
    }
    try {
        wire.n = w.n;
        wire.fs.resize(static_cast<size_t>(nf));
        wire.fb.resize(static_cast<size_t>(nf));
        wire.fd.resize(static_cast<size_t>(nf));
        for (size_t k = 0; k < static_cast<size_t>(nf); ++k) {
            wire.fs[k] = {w.fs[k].p, w.fs[k].n};
            wire.fb[k] = {w.fb[k].p, w.fb[k].n};
            wire.fd[k] = {w.fd[k].p, w.fd[k].n};
        }
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
        return false;
    }
    wire.offs = {w.offs.p, w.offs.n};
    wire.lstate = {w.lstate.p, w.lstate.n};
    wire.lfrom = {w.lfrom.p, w.lfrom.n};
    wire.extra = {w.extra.p, w.extra.n};
    return true;
}


// dfa_wire(srcs, bytes, dsts, offsets, n, link_state, link_from, extra) -> (src, byte, dst): the
//   edges of fragments wired into one automaton of n states (what slots/fragment.py's
//   Builder.finish computes). Fragment i's edges (lists of int32 arrays) are shifted by
//   offsets[i]; link j (link_from[j] = i << 32 | local) copies fragment
//   i's own edges leaving its state ``local`` to state link_state[j]; extra (flat triples src,
//   byte, dst) are single edges. offsets, link_state, link_from and extra: lists of ints or
//   int64 arrays. The result is sorted by (src, byte), a repeated identical
//   edge kept once; ValueError ("ambiguous continuation on byte B at state S", the first such
//   (S, B)) when two edges leave S on B to different states.
//   A fragment whose edges are already strictly sorted by (src, byte), above the previous such
//   fragment's, is copied as a run (the common case: fragments come out of this function
//   sorted); the other edges (links, extra, unsorted fragments) are grouped by source and
//   merged in state by state. Runs under the GIL (short calls on the compiling thread: a
//   release would hand the GIL to the masks' worker for a switch interval).
PyObject* py_dfa_wire(PyObject*, PyObject* args) {
    WireArgs wa;
    Wire w;
    if (!wire_open(wa, w, args)) return nullptr;
    Buf<int32_t> os, ob, od;
    if (!wire_run(w, os, ob, od)) return raise_run_error(w.err);
    PyObject* a = to_numpy(os, NPY_INT32);
    PyObject* b = to_numpy(ob, NPY_INT32);
    return tuple_result({a, b, to_numpy(od, NPY_INT32)});
}


// dfa_compress(src: int32[], byte: int32[], dst: int32[], n: int) -> (table int32 (n, classes),
//   byte_class int32[256]): an automaton given as edges (src --byte--> dst, at most one per
//   (src, byte); a repeated edge must be identical) as a dense table over byte classes; bytes
//   whose edges are the same at every state share a class, numbered in order of their smallest
//   byte.
PyObject* py_dfa_compress(PyObject*, PyObject* args) {
    PyObject *src_o, *byte_o, *dst_o;
    long long n_ll;
    if (!PyArg_ParseTuple(args, "OOOL", &src_o, &byte_o, &dst_o, &n_ll)) return nullptr;
    I32View src, byte, dst;
    if (!src.open(src_o, "src") || !byte.open(byte_o, "byte") || !dst.open(dst_o, "dst")) return nullptr;
    if (n_ll < 0 || n_ll > (int64_t{1} << 31) - 1 || src.n != byte.n || src.n != dst.n) {
        PyErr_SetString(PyExc_ValueError, "dfa_compress: bad sizes");
        return nullptr;
    }
    const int64_t n = n_ll;
    for (int64_t i = 0; i < src.n; ++i)
        if (src.p[i] < 0 || src.p[i] >= n || byte.p[i] < 0 || byte.p[i] > 255 || dst.p[i] < -1 || dst.p[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "dfa_compress: an edge out of range");
            return nullptr;
        }
    Buf<int32_t> table, cls;
    int64_t nk = 0;
    try {
        if (!cls.resize(256) || !compress_run(src.p, byte.p, dst.p, src.n, n, table, cls.p, nk)) return PyErr_NoMemory();
    } catch (const std::bad_alloc&) {
        return PyErr_NoMemory();
    }
    PyObject* tab = to_numpy(table, NPY_INT32, nk);
    return tuple_result({tab, tab ? to_numpy(cls, NPY_INT32) : nullptr});
}


// One dfa_masks call's Python side: the buffers its job's spans point into, and the packed rows'
// array (words > 0) until handed out. Destroyed under the GIL.
struct MasksCall {
    MasksJob j;
    TableView tab;
    I32View cls;
    I64View st;
    ByteView altv;
    WireArgs wire;
    std::vector<int64_t> states;  // the states checked here, read by the run (GIL released)
    PyObject* rows_o = nullptr;
    MasksCall() = default;
    MasksCall(const MasksCall&) = delete;
    MasksCall& operator=(const MasksCall&) = delete;
    ~MasksCall() { Py_XDECREF(rows_o); }
};

// False with a Python error set when the arguments are not a valid dfa_masks call.
bool masks_open(MasksCall& c, PyObject* args) {
    MasksJob& j = c.j;
    TokenTrieObject* tri_o = nullptr;
    PyObject *tab_o = nullptr, *cls_o = nullptr, *st_o, *alt_o = nullptr, *wire_o = nullptr;
    PyObject* alt_tri_o = nullptr;
    if (PyTuple_GET_SIZE(args) > 0 && PyTuple_Check(PyTuple_GET_ITEM(args, 0))) {  // a wire
        if (!PyArg_ParseTuple(args, "O!OO!|nOOp", &PyTuple_Type, &wire_o, &st_o, &TokenTrieType, &tri_o, &j.words,
                              &alt_tri_o, &alt_o, &j.share_rows))
            return false;
        try {
            j.wire.reset(new Wire);
        } catch (const std::bad_alloc&) {
            PyErr_NoMemory();
            return false;
        }
        if (!wire_open(c.wire, *j.wire, wire_o)) return false;
    } else if (!PyArg_ParseTuple(args, "OOOO!|nOOp", &tab_o, &cls_o, &st_o, &TokenTrieType, &tri_o, &j.words,
                                 &alt_tri_o, &alt_o, &j.share_rows)) {
        return false;
    }
    if (alt_tri_o == Py_None) alt_tri_o = nullptr;
    if (alt_tri_o && !PyObject_TypeCheck(alt_tri_o, &TokenTrieType)) {
        PyErr_SetString(PyExc_TypeError, "alt_trie must be a TokenTrie or None");
        return false;
    }
    if (!trie_ready(tri_o, "dfa_masks") ||
        (alt_tri_o && !trie_ready(reinterpret_cast<TokenTrieObject*>(alt_tri_o), "dfa_masks (alt_trie)")))
        return false;
    j.tri = &tri_o->trie;
    j.alt_tri = alt_tri_o ? &reinterpret_cast<TokenTrieObject*>(alt_tri_o)->trie : nullptr;
    if (!c.st.open(st_o, "states")) return false;
    if (!j.wire && (!c.tab.open(tab_o, "table") || !c.cls.open(cls_o, "byte_class"))) return false;
    if (j.alt_tri) {
        if (!alt_o || j.words != 0) {
            PyErr_SetString(PyExc_ValueError, "alt_trie needs alt (one flag per state) and words=0");
            return false;
        }
        if (!c.altv.open(alt_o)) return false;
        if (c.altv.n != c.st.n || c.altv.b.itemsize != 1) {
            PyErr_SetString(PyExc_ValueError, "alt: one byte per state");
            return false;
        }
        j.alt = c.altv.p;
    }
    if (j.wire) {  // the table is made by the run: the states checked against its size here
        for (int64_t i = 0; i < c.st.n; ++i)
            if (c.st.p[i] < -1 || c.st.p[i] >= j.wire->n) {
                PyErr_SetString(PyExc_ValueError, "states: out of range");
                return false;
            }
        j.ns = j.wire->n;
    } else {
        if (!check_dfa(c.tab, c.cls, c.st, -1)) return false;
        j.ns = c.tab.b.shape[0];
        j.nc = c.tab.b.shape[1];
    }
    if (!j.ptr.resize(static_cast<size_t>(c.st.n) + 1)) {
        PyErr_NoMemory();
        return false;
    }
    if (j.words < 0) {
        PyErr_SetString(PyExc_ValueError, "words must be >= 0");
        return false;
    }
    if (j.words > 0) {
        for (int32_t t : *j.tri->tok_ids)
            if (static_cast<int64_t>(t) >= static_cast<int64_t>(j.words) * 32) {
                PyErr_SetString(PyExc_ValueError, "words: a token id past the row");
                return false;
            }
        npy_intp dims[2] = {static_cast<npy_intp>(c.st.n), static_cast<npy_intp>(j.words)};
        c.rows_o = PyArray_ZEROS(2, dims, NPY_INT32, 0);
        if (!c.rows_o) return false;
        j.rows = static_cast<uint32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(c.rows_o)));
    }
    try {  // a copy: the caller's array could change once the GIL is released
        c.states.assign(c.st.p, c.st.p + c.st.n);
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
        return false;
    }
    j.st = {c.states.data(), c.st.n};
    if (!j.wire) {
        j.tab = {c.tab.p, c.tab.n};
        j.cls = {c.cls.p, c.cls.n};
    }
    // Row sharing (ids mode; the states walking ``tri``): the row of automaton state q is
    // the set of tokens whose bytes are all defined from q. Two states q, q' that agree on the
    // definedness of every byte string of length <= L (level L of Moore's partition
    // refinement, from one block, on definedness alone) agree on every token of length <= L:
    // row(q) = {t in row(q'): len(t) <= L} + the tokens longer than L walked from q, a walk
    // that enters only trie nodes holding a token longer than L below them. Past the longest
    // token (or once the partition is stable) the rows are equal: copied. Exact by
    // construction; the levels are built only when two such states have >= 16 live bytes.
    if (j.share_rows && j.words == 0 && c.st.n >= 2) {
        try {
            j.shape = trie_shape(j.tri);
        } catch (const std::bad_alloc&) {
            PyErr_NoMemory();
            return false;
        }
        if (!j.shape->ok) j.shape = nullptr;
    }
    return true;
}


// The result of a job run: the packed rows (words > 0), else (ptr, ids); with a wire,
// (table, byte_class, that).
PyObject* masks_result(MasksCall& c) {
    MasksJob& j = c.j;
    PyObject* r;
    if (c.rows_o) {
        r = c.rows_o;
        c.rows_o = nullptr;
    } else {
        r = csr_result(j.ptr, j.reordered ? j.out : j.ids);
    }
    if (!j.wire || !r) return r;
    PyObject* tab = j.ns <= 128     ? to_numpy(j.tab8, NPY_INT8, j.nc)
                    : j.ns <= 32768 ? to_numpy(j.tab16, NPY_INT16, j.nc)
                                    : to_numpy(j.wide, NPY_INT32, j.nc);
    PyObject* cls = tab ? to_numpy(j.own_cls, NPY_INT32) : nullptr;
    return tuple_result({tab, cls, r});
}

// dfa_masks(table: int32, int16 or int8 (n_states, n_classes), byte_class: int32[256], states: int64[], trie)
//   -> (ptr int64[len(states) + 1], ids int32[]): per state, the sorted matchable tokens whose
//   bytes all have edges from it (a walk of the token trie in lockstep with the automaton, so
//   tokens sharing a prefix share its steps).
//   With words > 0: instead, one packed row per state (int32 (len(states), words), bit t of a
//   row = token t allowed), written straight from the walk. A state of -1 gets an empty row.
//   With alt_trie and alt (uint8, one flag per entry of states): the flagged states walk
//   alt_trie instead (for the tool automata: the trie of the tokens holding a quote; None:
//   none). share=False: every row walked over the token trie (no row sharing nor class trie,
//   below; the same result).
// dfa_masks(wire, states, trie, ...) (wire: the tuple of dfa_wire's arguments, in place of the
//   table and byte classes) -> (table, byte_class, masks): the automaton wired (dfa_wire),
//   compressed to byte classes (dfa_compress; its table int8, int16 or int32, the narrowest
//   its states fit) and walked as above, all with the GIL released; dfa_wire's ValueError if
//   it cannot be wired.
PyObject* py_dfa_masks(PyObject*, PyObject* args) {
    MasksCall c;
    if (!masks_open(c, args)) return nullptr;
    bool ok;
    Py_BEGIN_ALLOW_THREADS;
    ok = masks_run(c.j);
    Py_END_ALLOW_THREADS;
    if (!ok) return raise_run_error(c.j.err);
    return masks_result(c);
}

// dfa_masks_many(calls) -> list: the results of dfa_masks(*call) for each argument tuple of
// ``calls`` (a sequence), in order, in one release of the GIL. For a thread computing many
// automata's masks beside Python work on another (an eager registry): one GIL handoff per
// list, not per automaton. A call that is not valid raises before any walk runs.
PyObject* py_dfa_masks_many(PyObject*, PyObject* arg) {
    PyObject* calls = PySequence_Tuple(arg);  // held: the arguments stay alive while released
    if (!calls) return nullptr;
    const Py_ssize_t n = PyTuple_GET_SIZE(calls);
    PyObject* res = nullptr;
    {
        std::vector<std::unique_ptr<MasksCall>> jobs;
        bool ok = true;
        try {
            jobs.reserve(static_cast<size_t>(n));
            for (Py_ssize_t i = 0; i < n; ++i) jobs.emplace_back(new MasksCall);
        } catch (const std::bad_alloc&) {
            ok = false;
            PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n && ok; ++i) {
            PyObject* a = PyTuple_GET_ITEM(calls, i);
            if (!PyTuple_Check(a)) {
                PyErr_Format(PyExc_TypeError, "dfa_masks_many: call %zd is not a tuple of dfa_masks' arguments", i);
                ok = false;
            } else {
                ok = masks_open(*jobs[static_cast<size_t>(i)], a);
            }
        }
        if (ok) {
            size_t failed = 0;
            Py_BEGIN_ALLOW_THREADS;
            for (size_t i = 0; i < jobs.size() && ok; ++i) {
                ok = masks_run(jobs[i]->j);
                failed = i;
            }
            Py_END_ALLOW_THREADS;
            if (!ok) raise_run_error(jobs[failed]->j.err);
        }
        if (ok) res = PyList_New(n);
        for (Py_ssize_t i = 0; i < n && res; ++i) {
            PyObject* r = masks_result(*jobs[static_cast<size_t>(i)]);
            if (!r) Py_CLEAR(res);
            else PyList_SET_ITEM(res, i, r);
        }
    }  // the jobs go here, under the GIL
    Py_DECREF(calls);
    return res;
}

// dfa_list_masks(table, byte_class, states, cand: int32[], buffer: uint8[], offsets: int64[])
//   -> (ptr, ids): per state, the tokens of ``cand`` (ids into offsets) whose bytes
//   buffer[offsets[t]:offsets[t + 1]] all have edges from it; sorted.
PyObject* py_dfa_list_masks(PyObject*, PyObject* args) {
    PyObject *tab_o, *cls_o, *st_o, *cand_o, *buf_o, *off_o;
    if (!PyArg_ParseTuple(args, "OOOOOO", &tab_o, &cls_o, &st_o, &cand_o, &buf_o, &off_o)) return nullptr;
    TableView tab;
    I32View cls, cand;
    I64View st, off;
    ByteView buf;
    if (!tab.open(tab_o, "table") || !cls.open(cls_o, "byte_class") || !st.open(st_o, "states") ||
        !cand.open(cand_o, "cand") || !off.open(off_o, "offsets") || !buf.open(buf_o))
        return nullptr;
    if (!check_dfa(tab, cls, st, 0)) return nullptr;
    const int64_t nc = tab.b.shape[1];
    const uint8_t* bytes = buf.p;
    if (!check_token_spans(cand, off, buf.n, "cand / offsets: out of range")) return nullptr;
    Buf<int64_t> ptr;
    Buf<int32_t> ids;
    // the ids checked above, copied: the caller's arrays could change once the GIL is released
    const std::vector<int64_t> states(st.p, st.p + st.n);
    const std::vector<int32_t> cands(cand.p, cand.p + cand.n);
    bool ok;
    Py_BEGIN_ALLOW_THREADS;
    ok = list_masks(tab.p, nc, cls.p, states.data(), st.n, cands.data(), cand.n, bytes, off.p, ptr, ids);
    Py_END_ALLOW_THREADS;
    if (!ok) return PyErr_NoMemory();
    return csr_result(ptr, ids);
}

// -- fixed formats and shared pieces (branch fmt): CSR lists extended and packed -----------------


// csr_extend(ptr: int64[n + 1], ids: int32[], states: int64[m], lo: int64[m], hi: int64[m],
//   pool: int32[]) -> (ptr, ids): the lists ids[ptr[s]:ptr[s + 1]], each followed by
//   pool[lo[j]:hi[j]] for every j with states[j] == s (in order of j); no sorting.
PyObject* py_csr_extend(PyObject*, PyObject* args) {
    PyObject *ptr_o, *ids_o, *st_o, *lo_o, *hi_o, *pool_o;
    if (!PyArg_ParseTuple(args, "OOOOOO", &ptr_o, &ids_o, &st_o, &lo_o, &hi_o, &pool_o)) return nullptr;
    I64View ptr, st, lo, hi;
    I32View ids, pool;
    if (!ptr.open(ptr_o, "ptr") || !ids.open(ids_o, "ids") || !st.open(st_o, "states") ||
        !lo.open(lo_o, "lo") || !hi.open(hi_o, "hi") || !pool.open(pool_o, "pool"))
        return nullptr;
    if (!check_csr(ptr, ids.n, "csr_extend")) return nullptr;
    const int64_t n = ptr.n - 1;
    if (lo.n != st.n || hi.n != st.n) {
        PyErr_SetString(PyExc_ValueError, "csr_extend: states, lo and hi differ in length");
        return nullptr;
    }
    for (int64_t j = 0; j < st.n; ++j)
        if (st.p[j] < 0 || st.p[j] >= n || lo.p[j] < 0 || lo.p[j] > hi.p[j] || hi.p[j] > pool.n) {
            PyErr_SetString(PyExc_ValueError, "csr_extend: a state or span out of range");
            return nullptr;
        }
    Buf<int64_t> out_ptr;
    Buf<int32_t> out;
    std::vector<int64_t> add(static_cast<size_t>(n) + 1, 0), at(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < st.n; ++j) add[static_cast<size_t>(st.p[j])] += hi.p[j] - lo.p[j];
    if (!out_ptr.resize(static_cast<size_t>(n) + 1)) return PyErr_NoMemory();
    out_ptr[0] = 0;
    for (int64_t s = 0; s < n; ++s)
        out_ptr[static_cast<size_t>(s) + 1] =
            out_ptr[static_cast<size_t>(s)] + (ptr.p[s + 1] - ptr.p[s]) + add[static_cast<size_t>(s)];
    if (!out.resize(static_cast<size_t>(out_ptr[static_cast<size_t>(n)]) + 1)) return PyErr_NoMemory();
    out.n -= 1;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t k = ptr.p[s + 1] - ptr.p[s];
        if (k) std::memcpy(out.p + out_ptr[static_cast<size_t>(s)], ids.p + ptr.p[s], static_cast<size_t>(k) * 4);
        at[static_cast<size_t>(s)] = out_ptr[static_cast<size_t>(s)] + k;
    }
    for (int64_t j = 0; j < st.n; ++j) {
        const int64_t k = hi.p[j] - lo.p[j];
        int64_t& a = at[static_cast<size_t>(st.p[j])];
        if (k) std::memcpy(out.p + a, pool.p + lo.p[j], static_cast<size_t>(k) * 4);
        a += k;
    }
    return csr_result(out_ptr, out);
}

// csr_pack(ptr: int64[n + 1], ids: int32[], which: int64[m], words: int) -> int32 (m, words):
//   row j packs the list of entry which[j] (bit t of a row = id t, XGrammar's layout).
PyObject* py_csr_pack(PyObject*, PyObject* args) {
    PyObject *ptr_o, *ids_o, *wh_o;
    Py_ssize_t words;
    if (!PyArg_ParseTuple(args, "OOOn", &ptr_o, &ids_o, &wh_o, &words)) return nullptr;
    I64View ptr, wh;
    I32View ids;
    if (!ptr.open(ptr_o, "ptr") || !ids.open(ids_o, "ids") || !wh.open(wh_o, "which")) return nullptr;
    if (!check_csr(ptr, ids.n, "csr_pack")) return nullptr;
    if (words < 0) {
        PyErr_SetString(PyExc_ValueError, "csr_pack: words must be >= 0");
        return nullptr;
    }
    for (int64_t j = 0; j < wh.n; ++j) {
        if (wh.p[j] < 0 || wh.p[j] >= ptr.n - 1) {
            PyErr_SetString(PyExc_ValueError, "csr_pack: which out of range");
            return nullptr;
        }
        for (int64_t k = ptr.p[wh.p[j]]; k < ptr.p[wh.p[j] + 1]; ++k)
            if (ids.p[k] < 0 || static_cast<int64_t>(ids.p[k]) >= static_cast<int64_t>(words) * 32) {
                PyErr_SetString(PyExc_ValueError, "csr_pack: an id past the row");
                return nullptr;
            }
    }
    npy_intp dims[2] = {static_cast<npy_intp>(wh.n), static_cast<npy_intp>(words)};
    PyObject* rows_o = PyArray_ZEROS(2, dims, NPY_INT32, 0);
    if (!rows_o) return nullptr;
    uint32_t* rows = static_cast<uint32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(rows_o)));
    for (int64_t j = 0; j < wh.n; ++j) {
        uint32_t* r = rows + static_cast<size_t>(j) * static_cast<size_t>(words);
        for (int64_t k = ptr.p[wh.p[j]]; k < ptr.p[wh.p[j] + 1]; ++k)
            r[static_cast<uint32_t>(ids.p[k]) >> 5] |= uint32_t{1} << (ids.p[k] & 31);
    }
    return rows_o;
}

// csr_split(ptr: int64[m + 1], ids: int32[], at: int64[m], n: int, wide: int, drop: bytes-like
//   (one flag per id), words: int) -> (where int32[n], rows int32 (w, words), lptr int64[n + 1],
//   lids int32[]): a shared piece's standalone masks (list j: local state at[j], ascending) split
//   in one pass: each list of ``wide`` ids or more packed into the next row (where[at[j]] = its
//   row, -1 elsewhere), every other list kept at its state without the ids flagged in ``drop``
//   (the quote tokens, walked per tool); what pieces.rows did with some twenty numpy calls.
PyObject* py_csr_split(PyObject*, PyObject* args) {
    PyObject *ptr_o, *ids_o, *at_o, *drop_o;
    Py_ssize_t n, wide, words;
    if (!PyArg_ParseTuple(args, "OOOnnOn", &ptr_o, &ids_o, &at_o, &n, &wide, &drop_o, &words)) return nullptr;
    I64View ptr, at;
    I32View ids;
    ByteView drop;
    if (!ptr.open(ptr_o, "ptr") || !ids.open(ids_o, "ids") || !at.open(at_o, "at") || !drop.open(drop_o))
        return nullptr;
    if (!check_csr(ptr, ids.n, "csr_split")) return nullptr;
    if (at.n != ptr.n - 1 || n < 0 || words < 0) {
        PyErr_SetString(PyExc_ValueError, "csr_split: at must have one state per list, n and words >= 0");
        return nullptr;
    }
    for (int64_t j = 0; j < at.n; ++j)
        if (at.p[j] < 0 || at.p[j] >= n || (j > 0 && at.p[j] <= at.p[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "csr_split: at must be ascending states below n");
            return nullptr;
        }
    for (int64_t k = 0; k < ids.n; ++k)
        if (ids.p[k] < 0 || ids.p[k] >= drop.n || static_cast<int64_t>(ids.p[k]) >= static_cast<int64_t>(words) * 32) {
            PyErr_SetString(PyExc_ValueError, "csr_split: an id past drop or the row");
            return nullptr;
        }
    npy_intp nd[1] = {static_cast<npy_intp>(n)};
    PyObject* where_o = PyArray_SimpleNew(1, nd, NPY_INT32);
    if (!where_o) return nullptr;
    int32_t* where = static_cast<int32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(where_o)));
    std::fill(where, where + n, -1);
    int32_t n_wide = 0;
    for (int64_t j = 0; j < at.n; ++j)
        if (ptr.p[j + 1] - ptr.p[j] >= wide) where[at.p[j]] = n_wide++;
    npy_intp dims[2] = {static_cast<npy_intp>(n_wide), static_cast<npy_intp>(words)};
    PyObject* rows_o = PyArray_ZEROS(2, dims, NPY_INT32, 0);
    Buf<int64_t> lptr;
    Buf<int32_t> lids;
    if (!rows_o || !lptr.resize(static_cast<size_t>(n) + 1)) {
        Py_DECREF(where_o);
        Py_XDECREF(rows_o);
        return rows_o ? PyErr_NoMemory() : nullptr;
    }
    uint32_t* rows = static_cast<uint32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(rows_o)));
    std::fill(lptr.p, lptr.p + n + 1, 0);
    bool ok = true;
    int64_t s = 0;  // the next local state whose lptr entry is to be written
    for (int64_t j = 0; j < at.n && ok; ++j) {
        for (; s <= at.p[j]; ++s) lptr[static_cast<size_t>(s)] = static_cast<int64_t>(lids.n);
        const int32_t r = where[at.p[j]];
        if (r >= 0) {
            uint32_t* row = rows + static_cast<size_t>(r) * static_cast<size_t>(words);
            for (int64_t k = ptr.p[j]; k < ptr.p[j + 1]; ++k)
                row[static_cast<uint32_t>(ids.p[k]) >> 5] |= uint32_t{1} << (ids.p[k] & 31);
        } else {
            for (int64_t k = ptr.p[j]; k < ptr.p[j + 1] && ok; ++k)
                if (!drop.p[ids.p[k]]) ok = lids.push(ids.p[k]);
        }
    }
    for (; ok && s <= n; ++s) lptr[static_cast<size_t>(s)] = static_cast<int64_t>(lids.n);
    if (!ok) {
        Py_DECREF(where_o);
        Py_DECREF(rows_o);
        return PyErr_NoMemory();
    }
    PyObject* a = to_numpy(lptr, NPY_INT64);
    return tuple_result({where_o, rows_o, a, to_numpy(lids, NPY_INT32)});
}

// spelled_count(trie, allowed: 32 bytes (a 256-bit set, bit b of byte b >> 3), limit) -> int:
//   how many tokens of ``trie`` have all their bytes in ``allowed``, counted up to ``limit``
//   (the walk stops there). A state of an automaton over these bytes allows at most that many
//   tokens: pieces.shared_rows tells with it that no state of a piece alone has a wide mask.
PyObject* py_spelled_count(PyObject*, PyObject* args) {
    TokenTrieObject* tri_o;
    Py_buffer allowed;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!y*n", &TokenTrieType, &tri_o, &allowed, &limit)) return nullptr;
    if (!trie_ready(tri_o, "spelled_count")) {
        PyBuffer_Release(&allowed);
        return nullptr;
    }
    const TokenTrie* tri = &tri_o->trie;
    uint8_t in[256];
    const bool ok = allowed.len == 32;
    if (ok)
        for (int b = 0; b < 256; ++b) in[b] = (static_cast<const uint8_t*>(allowed.buf)[b >> 3] >> (b & 7)) & 1;
    PyBuffer_Release(&allowed);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "spelled_count: allowed must be 32 bytes (256 bits)");
        return nullptr;
    }
    const TT tt(tri);
    int64_t count = 0;
    std::vector<int32_t> stack;
    for (int b = 0; b < 256; ++b)
        if (in[b] && tri->root_child[b] >= 0) stack.push_back(tri->root_child[b]);
    while (!stack.empty() && count < limit) {
        const int32_t u = stack.back();
        stack.pop_back();
        count += tt.tptr[u + 1] - tt.tptr[u];
        for (int32_t j = tt.si[u].clo; j < tt.si[u].chi; ++j)
            if (in[tt.clab[j]]) stack.push_back(tt.cnode[j]);
    }
    return PyLong_FromLongLong(std::min<int64_t>(count, std::max<Py_ssize_t>(limit, 0)));
}


// walk_counts(table: int32 (n_states, 256), starts: int64[], count_state: int, ids: int32[],
//             buffer: uint8[], offsets: int64[]) -> (final int32[len(starts) * len(ids)],
//             counts int16[...]): for every start state and token, the state after the token's
//   bytes (-1 once an edge is missing) and how many steps landed on count_state (for JSON
//   strings: characters completed).
PyObject* py_walk_counts(PyObject*, PyObject* args) {
    PyObject *tab_o, *st_o, *ids_o, *buf_o, *off_o;
    long long count_state;
    if (!PyArg_ParseTuple(args, "OOLOOO", &tab_o, &st_o, &count_state, &ids_o, &buf_o, &off_o))
        return nullptr;
    I32View tab, ids;
    I64View st, off;
    ByteView buf;
    if (!tab.open(tab_o, "table") || !st.open(st_o, "starts") || !ids.open(ids_o, "ids") ||
        !off.open(off_o, "offsets") || !buf.open(buf_o))
        return nullptr;
    if (tab.b.ndim != 2 || tab.b.shape[1] != 256) {
        PyErr_SetString(PyExc_ValueError, "table must be (n_states, 256)");
        return nullptr;
    }
    const int64_t ns = tab.b.shape[0];
    const uint8_t* bytes = buf.p;
    for (int64_t i = 0; i < st.n; ++i)
        if (st.p[i] < 0 || st.p[i] >= ns) {
            PyErr_SetString(PyExc_ValueError, "starts: out of range");
            return nullptr;
        }
    for (int64_t i = 0; i < ns * 256; ++i)
        if (tab.p[i] >= ns) {
            PyErr_SetString(PyExc_ValueError, "table: a target past the last state");
            return nullptr;
        }
    if (!check_token_spans(ids, off, buf.n, "ids / offsets: out of range")) return nullptr;
    Buf<int32_t> fin;
    Buf<int16_t> cnt;
    const size_t total = static_cast<size_t>(st.n) * static_cast<size_t>(ids.n);
    if (!fin.resize(total) || !cnt.resize(total)) return PyErr_NoMemory();
    // the ids checked above, copied: the caller's arrays could change once the GIL is released
    const std::vector<int64_t> starts(st.p, st.p + st.n);
    const std::vector<int32_t> toks(ids.p, ids.p + ids.n);
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t k = 0; k < st.n; ++k) {
        for (int64_t i = 0; i < ids.n; ++i) {
            const int32_t t = toks[static_cast<size_t>(i)];
            int32_t q = static_cast<int32_t>(starts[static_cast<size_t>(k)]);
            int32_t c = 0;
            for (int64_t j = off.p[t]; j < off.p[t + 1]; ++j) {
                q = tab.p[static_cast<int64_t>(q) * 256 + bytes[j]];
                if (q < 0) break;
                c += q == count_state;
            }
            const size_t at = static_cast<size_t>(k) * static_cast<size_t>(ids.n) + static_cast<size_t>(i);
            fin[at] = q;
            cnt[at] = static_cast<int16_t>(std::min(c, 32767));
        }
    }
    Py_END_ALLOW_THREADS;
    PyObject* a = to_numpy(fin, NPY_INT32);
    return tuple_result({a, to_numpy(cnt, NPY_INT16)});
}



}  // namespace trierouter
