// Tool automata's entry points: dfa_wire, dfa_compress, dfa_masks(_many), dfa_list_masks,
// spelled_count, walk_counts.
#include <memory>

#include "automata.h"
#include "bindings/common.h"
#include "token_trie.h"

namespace trierouter {

namespace {

template <class A>
A array_arg(nb::handle h, const char* what, const char* expected) {
    A a;
    if (!nb::try_cast(h, a, false)) throw nb::type_error((std::string(what) + ": expected " + expected).c_str());
    return a;
}

// The arrays of one dfa_wire call, held while ``Wire``'s spans point into them.
struct WireArgs {
    std::vector<In1<int32_t>> fs, fb, fd;
    std::unique_ptr<I64Seq> offs, lstate, lfrom, extra;
};

// dfa_wire's arguments (srcs, bytes, dsts, offsets, n, link_state, link_from, extra) opened into
// ``w`` and ``wire``'s spans set over them; TypeError / ValueError when they are not. The edges'
// ranges are checked by wire_run.
void wire_open(WireArgs& w, Wire& wire, const nb::tuple& args) {
    if (args.size() != 8) throw nb::type_error("dfa_wire: expected 8 arguments");
    for (size_t i = 0; i < 3; ++i)
        if (!nb::isinstance<nb::list>(args[i])) throw nb::type_error("dfa_wire: srcs, bytes and dsts must be lists");
    const nb::list srcs = nb::borrow<nb::list>(args[0]), bytes = nb::borrow<nb::list>(args[1]),
                   dsts = nb::borrow<nb::list>(args[2]);
    const int64_t n = nb::cast<int64_t>(args[4]);
    const size_t nf = srcs.size();
    w.offs = std::make_unique<I64Seq>(args[3], "offsets");
    w.lstate = std::make_unique<I64Seq>(args[5], "link_state");
    w.lfrom = std::make_unique<I64Seq>(args[6], "link_from");
    w.extra = std::make_unique<I64Seq>(args[7], "extra");
    if (bytes.size() != nf || dsts.size() != nf || static_cast<size_t>(w.offs->n) != nf ||
        w.lstate->n != w.lfrom->n || w.extra->n % 3 || n < 0 || n > (int64_t{1} << 31) - 1)
        throw nb::value_error("dfa_wire: bad sizes");
    const char* i32 = "a contiguous 1-D int32 array";
    for (size_t i = 0; i < nf; ++i) {
        w.fs.push_back(array_arg<In1<int32_t>>(srcs[i], "src", i32));
        w.fb.push_back(array_arg<In1<int32_t>>(bytes[i], "byte", i32));
        w.fd.push_back(array_arg<In1<int32_t>>(dsts[i], "dst", i32));
        if (w.fb[i].shape(0) != w.fs[i].shape(0) || w.fd[i].shape(0) != w.fs[i].shape(0))
            throw nb::value_error("dfa_wire: a fragment's edge arrays differ in length");
    }
    wire.n = n;
    auto span = [](const In1<int32_t>& a) { return Span<int32_t>{a.data(), static_cast<int64_t>(a.shape(0))}; };
    for (size_t k = 0; k < nf; ++k) {
        wire.fs.push_back(span(w.fs[k]));
        wire.fb.push_back(span(w.fb[k]));
        wire.fd.push_back(span(w.fd[k]));
    }
    wire.offs = {w.offs->p, w.offs->n};
    wire.lstate = {w.lstate->p, w.lstate->n};
    wire.lfrom = {w.lfrom->p, w.lfrom->n};
    wire.extra = {w.extra->p, w.extra->n};
}

// dfa_wire(srcs, bytes, dsts, offsets, n, link_state, link_from, extra) -> (src, byte, dst): the
//   edges of fragments wired into one automaton of n states (what slots/fragment.py's
//   Builder.finish computes). Fragment i's edges (lists of int32 arrays) are shifted by
//   offsets[i]; link j (link_from[j] = i << 32 | local) copies fragment i's own edges leaving
//   its state ``local`` to state link_state[j]; extra (flat triples src, byte, dst) are single
//   edges. offsets, link_state, link_from and extra: lists of ints or int64 arrays. The result
//   is sorted by (src, byte), a repeated identical edge kept once; ValueError ("ambiguous
//   continuation on byte B at state S", the first such (S, B)) when two edges leave S on B to
//   different states. Runs under the GIL (short calls on the compiling thread: a release would
//   hand the GIL to the masks' worker for a switch interval).
nb::tuple dfa_wire(nb::handle srcs, nb::handle bytes, nb::handle dsts, nb::handle offsets, int64_t n,
                   nb::handle link_state, nb::handle link_from, nb::handle extra) {
    WireArgs wa;
    Wire w;
    wire_open(wa, w, nb::make_tuple(srcs, bytes, dsts, offsets, n, link_state, link_from, extra));
    Buf<int32_t> os, ob, od;
    if (!wire_run(w, os, ob, od)) raise_run_error(w.err);
    nb::object a = to_numpy(os), b = to_numpy(ob);
    return nb::make_tuple(a, b, to_numpy(od));
}

// dfa_compress(src, byte, dst, n) -> (table int32 (n, classes), byte_class int32[256]): an
//   automaton given as edges (src --byte--> dst, at most one per (src, byte); a repeated edge
//   must be identical) as a dense table over byte classes; bytes whose edges are the same at
//   every state share a class, numbered in order of their smallest byte.
nb::tuple dfa_compress(const In1<int32_t>& src, const In1<int32_t>& byte, const In1<int32_t>& dst, int64_t n) {
    const int64_t m = static_cast<int64_t>(src.shape(0));
    if (n < 0 || n > (int64_t{1} << 31) - 1 || byte.shape(0) != src.shape(0) || dst.shape(0) != src.shape(0))
        throw nb::value_error("dfa_compress: bad sizes");
    const int32_t *s = src.data(), *b = byte.data(), *d = dst.data();
    for (int64_t i = 0; i < m; ++i)
        if (s[i] < 0 || s[i] >= n || b[i] < 0 || b[i] > 255 || d[i] < -1 || d[i] >= n)
            throw nb::value_error("dfa_compress: an edge out of range");
    Buf<int32_t> table, cls;
    int64_t nk = 0;
    if (!cls.resize(256) || !compress_run(s, b, d, m, n, table, cls.p, nk)) throw std::bad_alloc();
    nb::object tab = to_numpy(table, nk);
    return nb::make_tuple(tab, to_numpy(cls));
}

// One dfa_masks call: the arrays its job's spans point into, and the packed rows' array
// (words > 0) until handed out. Destroyed under the GIL.
struct MasksCall {
    MasksJob j;
    std::unique_ptr<Table> tab;
    In1<int32_t> cls;
    In1<int64_t> st;
    Bytes altv;
    WireArgs wire;
    std::vector<int64_t> states;  // the states checked here, read by the run (GIL released)
    nb::object rows_o;
};

// Opens the arguments of a dfa_masks call: (table, byte_class, states, trie, words=0,
// alt_trie=None, alt=None, share=True), or (wire, states, trie, ...) with the tuple of
// dfa_wire's arguments in place of the table and byte classes. TypeError / ValueError /
// RuntimeError (a TokenTrie not built) when they are not a valid call.
void masks_open(MasksCall& c, const nb::tuple& args) {
    MasksJob& j = c.j;
    const size_t n = args.size();
    const bool wired = n > 0 && nb::isinstance<nb::tuple>(args[0]);
    const size_t at = wired ? 1 : 2;  // the position of states
    if (n < at + 2 || n > at + 6) throw nb::type_error("dfa_masks: expected (table, byte_class | wire), states, trie[, words, alt_trie, alt, share]");
    nb::handle st_o = args[at], tri_o = args[at + 1];
    j.words = n > at + 2 ? nb::cast<int64_t>(args[at + 2]) : 0;
    nb::handle alt_tri_o = n > at + 3 ? args[at + 3] : nb::none();
    nb::handle alt_o = n > at + 4 ? args[at + 4] : nb::none();
    j.share_rows = n > at + 5 ? static_cast<bool>(nb::cast<Truthy>(args[at + 5])) : 1;
    if (!is_instance<TokenTrieObj>(tri_o)) throw nb::type_error("dfa_masks: trie must be a TokenTrie");
    if (!alt_tri_o.is_none() && !is_instance<TokenTrieObj>(alt_tri_o))
        throw nb::type_error("alt_trie must be a TokenTrie or None");
    j.tri = const_cast<TokenTrie*>(&ready_trie(tri_o, "dfa_masks"));
    j.alt_tri = alt_tri_o.is_none() ? nullptr : const_cast<TokenTrie*>(&ready_trie(alt_tri_o, "dfa_masks (alt_trie)"));
    if (wired) {
        j.wire = std::make_unique<Wire>();
        wire_open(c.wire, *j.wire, nb::borrow<nb::tuple>(args[0]));
    }
    c.st = array_arg<In1<int64_t>>(st_o, "states", "a contiguous 1-D int64 array");
    const int64_t n_st = static_cast<int64_t>(c.st.shape(0));
    if (!wired) {
        c.tab = std::make_unique<Table>(array_arg<Bytes>(args[0], "table", "a contiguous int32, int16 or int8 array"),
                                        "table");
        c.cls = array_arg<In1<int32_t>>(args[1], "byte_class", "a contiguous 1-D int32 array");
    }
    if (j.alt_tri) {
        if (alt_o.is_none() || j.words != 0) throw nb::value_error("alt_trie needs alt (one flag per state) and words=0");
        c.altv = array_arg<Bytes>(alt_o, "alt", "a contiguous buffer");
        if (static_cast<int64_t>(c.altv.nbytes()) != n_st || c.altv.itemsize() != 1)
            throw nb::value_error("alt: one byte per state");
        j.alt = static_cast<const uint8_t*>(c.altv.data());
    }
    const int64_t* sp = c.st.data();
    if (wired) {  // the table is made by the run: the states checked against its size here
        for (int64_t i = 0; i < n_st; ++i)
            if (sp[i] < -1 || sp[i] >= j.wire->n) throw nb::value_error("states: out of range");
        j.ns = j.wire->n;
    } else {
        const Table& t = *c.tab;
        check_dfa(t.p, t.rows, t.ndim == 2 ? t.cols : -1, c.cls, c.st, -1);
        j.ns = t.rows;
        j.nc = t.cols;
    }
    if (!j.ptr.resize(static_cast<size_t>(n_st) + 1)) throw std::bad_alloc();
    if (j.words < 0) throw nb::value_error("words must be >= 0");
    if (j.words > 0) {
        for (int32_t t : *j.tri->tok_ids)
            if (static_cast<int64_t>(t) >= j.words * 32) throw nb::value_error("words: a token id past the row");
        int32_t* rows;
        c.rows_o = new_array<int32_t>({static_cast<size_t>(n_st), static_cast<size_t>(j.words)}, &rows, true);
        j.rows = reinterpret_cast<uint32_t*>(rows);
    }
    c.states.assign(sp, sp + n_st);  // a copy: the caller's array could change once the GIL is released
    j.st = {c.states.data(), n_st};
    if (!wired) {
        j.tab = {c.tab->p, c.tab->n};
        j.cls = {c.cls.data(), static_cast<int64_t>(c.cls.shape(0))};
    }
    // Row sharing (ids mode; the states walking ``tri``): the row of automaton state q is
    // the set of tokens whose bytes are all defined from q. Two states q, q' that agree on the
    // definedness of every byte string of length <= L (level L of Moore's partition
    // refinement, from one block, on definedness alone) agree on every token of length <= L:
    // row(q) = {t in row(q'): len(t) <= L} + the tokens longer than L walked from q, a walk
    // that enters only trie nodes holding a token longer than L below them. Past the longest
    // token (or once the partition is stable) the rows are equal: copied. Exact by
    // construction; the levels are built only when two such states have >= 16 live bytes.
    if (j.share_rows && j.words == 0 && n_st >= 2) {
        j.shape = trie_shape(j.tri);
        if (!j.shape->ok) j.shape = nullptr;
    }
}

// The result of a job run: the packed rows (words > 0), else (ptr, ids); with a wire,
// (table, byte_class, that).
nb::object masks_result(MasksCall& c) {
    MasksJob& j = c.j;
    nb::object r;
    if (c.rows_o.is_valid()) {
        r = std::move(c.rows_o);
    } else {
        r = csr_result(j.ptr, j.reordered ? j.out : j.ids);
    }
    if (!j.wire) return r;
    nb::object tab = j.ns <= 128 ? to_numpy(j.tab8, j.nc) : j.ns <= 32768 ? to_numpy(j.tab16, j.nc) : to_numpy(j.wide, j.nc);
    nb::object cls = to_numpy(j.own_cls);
    return nb::make_tuple(tab, cls, r);
}

// dfa_masks(table: int32, int16 or int8 (n_states, n_classes), byte_class: int32[256],
//   states: int64[], trie) -> (ptr int64[len(states) + 1], ids int32[]): per state, the sorted
//   matchable tokens whose bytes all have edges from it (a walk of the token trie in lockstep with
//   the automaton, so tokens sharing a prefix share its steps).
//   With words > 0: instead, one packed row per state (int32 (len(states), words), bit t of a
//   row = token t allowed), written straight from the walk. A state of -1 gets an empty row.
//   With alt_trie and alt (uint8, one flag per entry of states): the flagged states walk
//   alt_trie instead (for the tool automata: the trie of the tokens holding a quote; None:
//   none). share=False: every row walked over the token trie (no row sharing nor class trie;
//   the same result).
// dfa_masks(wire, states, trie, ...) (wire: the tuple of dfa_wire's arguments, in place of the
//   table and byte classes) -> (table, byte_class, masks): the automaton wired (dfa_wire),
//   compressed to byte classes (dfa_compress; its table int8, int16 or int32, the narrowest
//   its states fit) and walked as above, all with the GIL released; dfa_wire's ValueError if
//   it cannot be wired.
nb::object dfa_masks(const nb::args& args) {
    MasksCall c;
    masks_open(c, args);
    bool ok;
    {
        nb::gil_scoped_release nogil;
        ok = masks_run(c.j);
    }
    if (!ok) raise_run_error(c.j.err);
    return masks_result(c);
}

// dfa_masks_many(calls) -> list: the results of dfa_masks(*call) for each argument tuple of
// ``calls`` (a sequence), in order, in one release of the GIL. For a thread computing many
// automata's masks beside Python work on another (an eager registry): one GIL handoff per
// list, not per automaton. A call that is not valid raises before any walk runs.
nb::list dfa_masks_many(nb::handle calls_o) {
    if (!nb::isinstance<nb::sequence>(calls_o)) throw nb::type_error("dfa_masks_many: calls must be a sequence");
    const nb::tuple calls = nb::tuple(nb::borrow(calls_o));  // held: the arguments stay alive while released
    std::vector<std::unique_ptr<MasksCall>> jobs;
    for (size_t i = 0; i < calls.size(); ++i) {
        if (!nb::isinstance<nb::tuple>(calls[i]))
            throw nb::type_error(("dfa_masks_many: call " + std::to_string(i) + " is not a tuple of dfa_masks' arguments").c_str());
        jobs.emplace_back(new MasksCall);
        masks_open(*jobs.back(), nb::borrow<nb::tuple>(calls[i]));
    }
    bool ok = true;
    size_t failed = 0;
    {
        nb::gil_scoped_release nogil;
        for (size_t i = 0; i < jobs.size() && ok; ++i) {
            ok = masks_run(jobs[i]->j);
            failed = i;
        }
    }
    if (!ok) raise_run_error(jobs[failed]->j.err);
    nb::list res;
    for (auto& job : jobs) res.append(masks_result(*job));
    return res;
}

// dfa_list_masks(table, byte_class, states, cand: int32[], buffer: uint8[], offsets: int64[])
//   -> (ptr, ids): per state, the tokens of ``cand`` (ids into offsets) whose bytes
//   buffer[offsets[t]:offsets[t + 1]] all have edges from it; sorted.
nb::tuple dfa_list_masks(const Bytes& table, const In1<int32_t>& byte_class, const In1<int64_t>& states,
                         const In1<int32_t>& cand, const Bytes& buffer, const In1<int64_t>& offsets) {
    const Table tab(table, "table");
    check_dfa(tab.p, tab.rows, tab.ndim == 2 ? tab.cols : -1, byte_class, states, 0);
    check_token_spans(cand, offsets, static_cast<int64_t>(buffer.nbytes()), "cand / offsets: out of range");
    Buf<int64_t> ptr;
    Buf<int32_t> ids;
    // the ids checked above, copied: the caller's arrays could change once the GIL is released
    const std::vector<int64_t> st(states.data(), states.data() + states.shape(0));
    const std::vector<int32_t> cands(cand.data(), cand.data() + cand.shape(0));
    bool ok;
    {
        nb::gil_scoped_release nogil;
        ok = list_masks(tab.p, tab.cols, byte_class.data(), st.data(), static_cast<int64_t>(st.size()), cands.data(),
                        static_cast<int64_t>(cands.size()), static_cast<const uint8_t*>(buffer.data()),
                        offsets.data(), ptr, ids);
    }
    if (!ok) throw std::bad_alloc();
    return csr_result(ptr, ids);
}

// spelled_count(trie, allowed: 32 bytes (a 256-bit set, bit b of byte b >> 3), limit) -> int:
//   how many tokens of ``trie`` have all their bytes in ``allowed``, counted up to ``limit``
//   (the walk stops there). A state of an automaton over these bytes allows at most that many
//   tokens: pieces.shared_rows tells with it that no state of a piece alone has a wide mask.
int64_t spelled_count(nb::handle trie, const Bytes& allowed, int64_t limit) {
    const TokenTrie* tri = &ready_trie(trie, "spelled_count");
    if (allowed.nbytes() != 32) throw nb::value_error("spelled_count: allowed must be 32 bytes (256 bits)");
    uint8_t in[256];
    const uint8_t* a = static_cast<const uint8_t*>(allowed.data());
    for (int b = 0; b < 256; ++b) in[b] = (a[b >> 3] >> (b & 7)) & 1;
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
    return std::min<int64_t>(count, std::max<int64_t>(limit, 0));
}

// walk_counts(table: int32 (n_states, 256), starts: int64[], count_state: int, ids: int32[],
//             buffer: uint8[], offsets: int64[]) -> (final int32[len(starts) * len(ids)],
//             counts int16[...]): for every start state and token, the state after the token's
//   bytes (-1 once an edge is missing) and how many steps landed on count_state (for JSON
//   strings: characters completed).
nb::tuple walk_counts(const In<int32_t>& table, const In1<int64_t>& starts, int64_t count_state,
                      const In1<int32_t>& ids, const Bytes& buffer, const In1<int64_t>& offsets) {
    if (table.ndim() != 2 || table.shape(1) != 256) throw nb::value_error("table must be (n_states, 256)");
    const int64_t ns = static_cast<int64_t>(table.shape(0));
    const int32_t* tab = table.data();
    for (size_t i = 0; i < starts.shape(0); ++i)
        if (starts.data()[i] < 0 || starts.data()[i] >= ns) throw nb::value_error("starts: out of range");
    for (int64_t i = 0; i < ns * 256; ++i)
        if (tab[i] >= ns) throw nb::value_error("table: a target past the last state");
    check_token_spans(ids, offsets, static_cast<int64_t>(buffer.nbytes()), "ids / offsets: out of range");
    const size_t n_st = starts.shape(0), n_ids = ids.shape(0);
    Buf<int32_t> fin;
    Buf<int16_t> cnt;
    if (!fin.resize(n_st * n_ids) || !cnt.resize(n_st * n_ids)) throw std::bad_alloc();
    // the ids checked above, copied: the caller's arrays could change once the GIL is released
    const std::vector<int64_t> st(starts.data(), starts.data() + n_st);
    const std::vector<int32_t> toks(ids.data(), ids.data() + n_ids);
    const uint8_t* bytes = static_cast<const uint8_t*>(buffer.data());
    const int64_t* off = offsets.data();
    {
        nb::gil_scoped_release nogil;
        for (size_t k = 0; k < n_st; ++k) {
            for (size_t i = 0; i < n_ids; ++i) {
                const int32_t t = toks[i];
                int32_t q = static_cast<int32_t>(st[k]);
                int32_t c = 0;
                for (int64_t j = off[t]; j < off[t + 1]; ++j) {
                    q = tab[static_cast<int64_t>(q) * 256 + bytes[j]];
                    if (q < 0) break;
                    c += q == count_state;
                }
                fin[k * n_ids + i] = q;
                cnt[k * n_ids + i] = static_cast<int16_t>(std::min(c, 32767));
            }
        }
    }
    nb::object a = to_numpy(fin);
    return nb::make_tuple(a, to_numpy(cnt));
}

}  // namespace

void bind_automata(nb::module_& m) {
    m.def("dfa_wire", &dfa_wire, "srcs"_a, "bytes"_a, "dsts"_a, "offsets"_a, "n"_a, "link_state"_a, "link_from"_a,
          "extra"_a, "dfa_wire(srcs, bytes, dsts, offsets, n, link_state, link_from, extra) -> (src, byte, dst)");
    m.def("dfa_compress", &dfa_compress, "src"_a.noconvert(), "byte"_a.noconvert(), "dst"_a.noconvert(), "n"_a,
          "dfa_compress(src, byte, dst, n) -> (table, byte_class)");
    m.def("dfa_masks", &dfa_masks,
          "dfa_masks(table, byte_class, states, trie, words=0, alt_trie=None, alt=None, share=True) -> (ptr, ids), "
          "or packed rows; dfa_masks(wire, states, trie, ...) -> (table, byte_class, that)");
    m.def("dfa_masks_many", &dfa_masks_many, "calls"_a,
          "dfa_masks_many(calls) -> [dfa_masks(*call) for call in calls], in one release of the GIL");
    m.def("dfa_list_masks", &dfa_list_masks, "table"_a.noconvert(), "byte_class"_a.noconvert(),
          "states"_a.noconvert(), "cand"_a.noconvert(), "buffer"_a.noconvert(), "offsets"_a.noconvert(),
          "dfa_list_masks(table, byte_class, states, cand, buffer, offsets) -> (ptr, ids)");
    m.def("spelled_count", &spelled_count, "trie"_a, "allowed"_a.noconvert(), "limit"_a,
          "spelled_count(trie, allowed, limit) -> tokens spelled with the allowed bytes alone, up to limit");
    m.def("walk_counts", &walk_counts, "table"_a.noconvert(), "starts"_a.noconvert(), "count_state"_a,
          "ids"_a.noconvert(), "buffer"_a.noconvert(), "offsets"_a.noconvert(),
          "walk_counts(table, starts, count_state, ids, buffer, offsets) -> (final, counts)");
}

}  // namespace trierouter
