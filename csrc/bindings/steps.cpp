// Core (Python type): steps over a ChoiceSet's arrays: advance, masks, bitmask fills, batches,
// sparse logits (the algorithms in steps.h).
#include <atomic>

#include "bindings/core_object.h"
#include "bindings/fast_method.h"

namespace trierouter {

namespace {

// A 1-D array argument inside a tuple (the compact spec), TypeError naming it if it is not one.
template <class T>
In1<T> item_array(nb::handle h, const char* name, const char* type) {
    In1<T> a;
    if (!nb::try_cast(h, a, false))
        throw nb::type_error((std::string(name) + ": expected a contiguous 1-D array of " + type).c_str());
    return a;
}

// compact = (demand_bits, demand_rank, key_first, key_lcp, value_bytes, value_offsets,
//            terminator, trie, end_ids, n_nodes, token_buffer, token_offsets, matchable, check):
// checked against the stored rows; with check (a loaded file), every key's common prefix too
void open_compact(CoreObj& c, const nb::tuple& spec) {
    if (spec.size() != 14) throw nb::type_error("compact: expected a tuple of 14 items");
    if (!nb::isinstance<nb::bytes>(spec[6])) throw nb::type_error("compact: the terminator must be bytes");
    const nb::bytes term = nb::borrow<nb::bytes>(spec[6]);
    const TokenTrie& tri = ready_trie(spec[7], "compact layout");
    auto x = std::make_unique<Compact>(&tri, spec[7]);
    x->bits_a = item_array<uint64_t>(spec[0], "demand_bits", "uint64");
    x->rank_a = item_array<int32_t>(spec[1], "demand_rank", "int32");
    x->first_a = item_array<int32_t>(spec[2], "key_first", "int32");
    x->lcp_a = item_array<int32_t>(spec[3], "key_lcp", "int32");
    x->vb_a = item_array<uint8_t>(spec[4], "value_bytes", "uint8");
    x->voff_a = item_array<int64_t>(spec[5], "value_offsets", "int64");
    x->tbuf_a = item_array<uint8_t>(spec[10], "token_buffer", "uint8");
    x->toff_a = item_array<int64_t>(spec[11], "token_offsets", "int64");
    x->match_a = item_array<uint8_t>(spec[12], "matchable", "uint8");
    const int64_t n_nodes = nb::cast<int64_t>(spec[9]);
    const bool check = nb::cast<Truthy>(spec[13]);
    x->tbuf = x->tbuf_a.data();
    x->toff = x->toff_a.data();
    x->matchable = x->match_a.data();
    x->n_tokens = static_cast<int64_t>(x->match_a.shape(0));
    const int64_t n_tbuf = static_cast<int64_t>(x->tbuf_a.shape(0));
    bool tok_ok = static_cast<int64_t>(x->toff_a.shape(0)) == x->n_tokens + 1 && x->toff[0] == 0 &&
                  x->toff[x->n_tokens] <= n_tbuf;
    for (int64_t t = 0; tok_ok && t < x->n_tokens; ++t) tok_ok = x->toff[t + 1] >= x->toff[t];
    if (!tok_ok) throw nb::value_error("compact layout: token offsets do not fit the token buffer");
    x->end_ids = sorted_ids(spec[8]);
    x->bits = x->bits_a.data();
    x->rank = x->rank_a.data();
    KeyView& k = x->keys;
    k.vb = x->vb_a.data();
    k.voff = x->voff_a.data();
    k.first = x->first_a.data();
    k.lcp = x->lcp_a.data();
    k.K = static_cast<int64_t>(x->voff_a.shape(0)) - 1;
    k.term.assign(term.c_str(), term.size());
    const int64_t n_states = n_nodes + 2, words = (n_states + 63) / 64;
    bool ok = n_nodes >= 1 && k.K >= 1 && static_cast<int64_t>(x->bits_a.shape(0)) == words &&
              static_cast<int64_t>(x->rank_a.shape(0)) == words && static_cast<int64_t>(x->first_a.shape(0)) == k.K &&
              static_cast<int64_t>(x->lcp_a.shape(0)) == k.K;
    int64_t dropped = 0;
    for (int64_t w = 0; ok && w < words; ++w) {
        ok = x->rank[w] == dropped;
        dropped += __builtin_popcountll(x->bits[w]);
    }
    // END and DEAD are stored; every key's bytes and nodes within the set
    ok = ok && !((x->bits[n_nodes >> 6] >> (n_nodes & 63)) & 1) &&
         !((x->bits[(n_nodes + 1) >> 6] >> ((n_nodes + 1) & 63)) & 1) &&
         static_cast<int64_t>(c.row_ptr.shape(0)) == n_states - dropped + 1 && k.voff[0] == 0 &&
         k.voff[k.K] <= static_cast<int64_t>(x->vb_a.shape(0));
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
    if (!ok || next_first != n_nodes) throw nb::value_error("compact layout: its arrays do not describe one set");
    x->n_nodes = n_nodes;
    static std::atomic<uint64_t> next_uid{1};
    x->uid = next_uid.fetch_add(1);
    c.cx = std::move(x);
    c.s.cx = c.cx.get();
}

// Core(row_ptr, tokens, children, far_pos, far_child, ends, width, compact=None)
// Every array checked (check_serving, and the compact layout by open_compact): ValueError naming
// the first entry out of range. A Core initialises once: its arrays may be read by a call that
// released the GIL, so they are never swapped under it; a failed __init__ may be retried.
void core_init(nb::handle self, In1<int32_t> row_ptr, nb::handle tokens, In1<uint16_t> children,
               In1<int32_t> far_pos, In1<int32_t> far_child, In1<int32_t> ends, int64_t width, nb::handle compact) {
    CoreObj& c = constructed<CoreObj>(self);
    if (c.ready) throw std::runtime_error("Core is already initialised: make a new one");
    c = CoreObj{};  // what a failed __init__ left
    In1<int32_t> tk;
    if (!nb::try_cast(tokens, tk, false)) throw nb::type_error("tokens: expected a contiguous 1-D array of int32");
    if (width < 1 || width > INT32_MAX)
        throw nb::value_error(("width=" + std::to_string(width) + ": expected 1.." + std::to_string(INT32_MAX)).c_str());
    const bool has_compact = !compact.is_none();
    const int64_t nrp = static_cast<int64_t>(row_ptr.shape(0));
    if (nrp < (has_compact ? 3 : 4))
        throw nb::value_error(has_compact ? "row_ptr: fewer than 3 entries (END and DEAD)"
                                          : "row_ptr: fewer than 4 entries (a root, END and DEAD)");
    c.row_ptr = row_ptr;
    c.tokens = tk;
    c.children = children;
    c.far_pos = far_pos;
    c.far_child = far_child;
    c.ends = ends;
    c.tokens_obj = nb::borrow(tokens);
    Serving& s = c.s;
    s.row_ptr = row_ptr.data();
    s.tokens = tk.data();
    s.children = children.data();
    s.far_pos = far_pos.data();
    s.far_child = far_child.data();
    s.ends = ends.data();
    s.n_far = static_cast<int64_t>(far_pos.shape(0));
    s.n_ends = static_cast<int64_t>(ends.shape(0));
    s.n_pairs = static_cast<int64_t>(tk.shape(0));
    s.n_states = nrp - 1;
    if (has_compact) {
        if (!nb::isinstance<nb::tuple>(compact)) throw nb::type_error("compact must be a tuple or None");
        open_compact(c, nb::borrow<nb::tuple>(compact));
        s.n_states = c.cx->n_nodes + 2;
    }
    s.end_state = s.n_states - 2;
    s.dead_state = s.n_states - 1;
    s.width = width;
    s.words = (width + 31) / 32;
    if (static_cast<int64_t>(children.shape(0)) != s.n_pairs || static_cast<int64_t>(far_child.shape(0)) != s.n_far)
        throw nb::value_error(("children (" + std::to_string(children.shape(0)) + ") and far_child (" +
                               std::to_string(far_child.shape(0)) + ") must match tokens (" + std::to_string(s.n_pairs) +
                               ") and far_pos (" + std::to_string(s.n_far) + ")")
                                  .c_str());
    std::string why;
    if (check_serving(&s, nrp - 1, &why)) throw nb::value_error(("Core: " + why).c_str());
    c.ready = true;
}

int64_t py_advance(nb::handle self, IntArg state, IntArg token) { return core_advance(&core_of(self).s, state, token); }

nb::object py_mask(nb::handle self, IntArg state) { return make_mask(core_of(self), state); }

bool py_is_terminal(nb::handle self, IntArg state) {
    const CoreObj& c = core_of(self);
    const int64_t s = state;
    if (s == c.s.end_state) return true;
    if (s < 0 || s >= c.s.end_state) return false;
    const int32_t* e = c.s.ends;
    const int32_t* f = std::lower_bound(e, e + c.s.n_ends, static_cast<int32_t>(s));
    return f != e + c.s.n_ends && *f == s;
}

// A writable 2-D (or 1-D) array of ``itemsize``-byte items whose rows are contiguous (numpy, or
// a torch CPU tensor through DLPack).
struct Rows {
    char* base = nullptr;
    int64_t rows = 0, words = 0, row_stride = 0;  // row_stride in bytes
    template <bool Optional>
    Rows(const WritableArg<Optional>& a, int64_t itemsize, const char* what) {
        const size_t nd = a.ndim;
        if (static_cast<int64_t>(a.itemsize) != itemsize || (nd != 1 && nd != 2))
            throw nb::type_error((std::string(what) + ": expected a 1-D or 2-D array of " + std::to_string(itemsize) +
                                  "-byte items")
                                     .c_str());
        if (a.stride[nd - 1] != itemsize && a.shape[nd - 1] > 1)
            throw nb::value_error((std::string(what) + ": rows must be contiguous").c_str());
        base = a.base;
        rows = nd == 2 ? a.shape[0] : 1;
        words = a.shape[nd - 1];
        row_stride = nd == 2 ? a.stride[0] : 0;
    }
    int32_t* row32(int64_t r) const { return reinterpret_cast<int32_t*>(base + r * row_stride); }
};

void check_words(const Serving& s, const Rows& m) {
    if (m.words < s.words)
        throw nb::value_error(("bitmask rows have " + std::to_string(m.words) + " int32 words; this set needs " +
                               std::to_string(s.words) + " (ceil(width / 32))")
                                  .c_str());
}

// fill(state, bitmask, index=0)
void py_fill(nb::handle self, IntArg state, const WritableArg<>& bitmask, IntArg index) {
    const CoreObj& c = core_of(self);
    const Rows m(bitmask, 4, "bitmask");
    check_words(c.s, m);
    int64_t idx = index;
    if (idx < 0) idx += m.rows;
    if (idx < 0 || idx >= m.rows)
        throw nb::index_error(("index " + std::to_string(static_cast<int64_t>(index)) + " out of range for " +
                               std::to_string(m.rows) + " bitmask rows")
                                  .c_str());
    fill_row(&c.s, state, m.row32(idx), m.words);
}

// advance_batch(states, tokens, out=None) -> None, or a new array without ``out``; all int64
// 1-D of one length (out may be states). Rows of a batch sit anywhere in the set's arrays: each
// step's loads are issued ahead (prefetch) so that the cache misses of different rows overlap.
nb::object py_advance_batch(nb::handle self, const Array1<int64_t>& states, const Array1<int64_t>& tokens,
                            const Array1<int64_t, kOptional | kWritable>& out) {
    const CoreObj& c = core_of(self);
    const size_t n = states.size();
    if (tokens.size() != n) throw nb::value_error("states and tokens differ in length");
    if (!out.given()) {  // the public API's common case in one call
        int64_t* o;
        nb::object made = new_array<int64_t>({n}, &o);
        advance_batch(&c.s, states.data(), tokens.data(), static_cast<int64_t>(n), o);
        return made;
    }
    if (out.size() != n) throw nb::value_error("states, tokens and out differ in length");
    advance_batch(&c.s, states.data(), tokens.data(), static_cast<int64_t>(n), out.data());
    return nb::none();
}

// The target rows of a batch: rows[i] (or i when rows is None), negative from the end when
// ``negative``; IndexError naming the first out of range. A copy: the caller's array could
// change once the GIL is released.
std::vector<int64_t> target_rows(const Array1<int64_t>& states, const Array1<int64_t, kOptional>& rows, int64_t n_rows,
                                 bool negative, const char* what) {
    const size_t n = states.size();
    const bool has_rows = rows.given();
    if (has_rows && rows.size() != n) throw nb::value_error("states and rows differ in length");
    std::vector<int64_t> target(n);
    for (size_t i = 0; i < n; ++i) {
        const int64_t given = has_rows ? rows.data()[i] : static_cast<int64_t>(i);
        const int64_t r = negative && given < 0 ? given + n_rows : given;
        if (r < 0 || r >= n_rows)
            throw nb::index_error(("rows[" + std::to_string(i) + "] = " + std::to_string(given) + " out of range for " +
                                   std::to_string(n_rows) + " " + what + "rows")
                                      .c_str());
        target[i] = r;
    }
    return target;
}

// fill_batch(states, bitmask, rows_or_None)
void py_fill_batch(nb::handle self, const Array1<int64_t>& states, const WritableArg<>& bitmask,
                   const Array1<int64_t, kOptional>& rows) {
    const CoreObj& c = core_of(self);
    const Rows m(bitmask, 4, "bitmask");
    check_words(c.s, m);
    // states need no copy: each is checked where it is read
    const std::vector<int64_t> target = target_rows(states, rows, m.rows, true, "bitmask ");
    nb::gil_scoped_release nogil;
    fill_rows(&c.s, c.cx != nullptr, states.data(), target.data(), static_cast<int64_t>(states.size()), m.base,
              m.row_stride, m.words);
}

void check_itemsize(int64_t itemsize) {
    if (itemsize != 2 && itemsize != 4) throw nb::value_error("itemsize must be 2 or 4");
}

// apply_sparse(states, logits, rows_or_None, neg_inf_bits, itemsize)
// Row rows[i] of logits keeps the values of the tokens allowed at states[i]; every other entry
// becomes -inf (given as the bit pattern of the logits' dtype). Touches each row once.
void py_apply_sparse(nb::handle self, const Array1<int64_t>& states, const WritableArg<>& logits,
                     const Array1<int64_t, kOptional>& rows, IntArg bits, IntArg itemsize) {
    const CoreObj& c = core_of(self);
    check_itemsize(itemsize);
    const Rows m(logits, itemsize, "logits");
    const std::vector<int64_t> target = target_rows(states, rows, m.rows, false, "logits ");
    const int64_t V = m.words, n = static_cast<int64_t>(states.size());
    const int64_t* st = states.data();
    std::vector<uint32_t> keep4;
    std::vector<uint16_t> keep2;
    std::vector<int32_t> scratch;
    nb::gil_scoped_release nogil;
    for (int64_t i = 0; i < n; ++i) {
        int64_t hi;
        const int32_t* tk = row_ids(&c.s, valid_state(&c.s, st[i]), &hi, scratch);
        char* row = m.base + target[static_cast<size_t>(i)] * m.row_stride;
        if (itemsize == 4)
            keep_only(reinterpret_cast<uint32_t*>(row), V, tk, hi, static_cast<uint32_t>(bits), keep4);
        else
            keep_only(reinterpret_cast<uint16_t*>(row), V, tk, hi, static_cast<uint16_t>(bits), keep2);
    }
}

// copy_sparse(states, src_or_None, dst, rows_or_None, neg_inf_bits, itemsize)
// Only the tokens allowed at states[i] in row rows[i] of dst are written: copied from the same
// row of src, or set to -inf when src is None (undoing an earlier copy). Nothing else is touched:
// a dst kept at -inf serves as masked logits at the cost of the allowed tokens alone.
void py_copy_sparse(nb::handle self, const Array1<int64_t>& states, const WritableArg<true>& src,
                    const WritableArg<>& dst, const Array1<int64_t, kOptional>& rows, IntArg bits, IntArg itemsize) {
    const CoreObj& c = core_of(self);
    check_itemsize(itemsize);
    const Rows m(dst, itemsize, "dst");
    const std::vector<int64_t> target = target_rows(states, rows, m.rows, false, "dst ");
    const bool has_src = src.given();
    const char* src_base = nullptr;
    int64_t src_stride = 0;
    if (has_src) {
        const Rows from(src, itemsize, "src");
        if (from.words != m.words || from.rows != m.rows) throw nb::value_error("src and dst differ in shape");
        src_base = from.base;
        src_stride = from.row_stride;
    }
    const int64_t V = m.words, n = static_cast<int64_t>(states.size());
    const int64_t* st = states.data();
    std::vector<int32_t> scratch;
    nb::gil_scoped_release nogil;
    for (int64_t i = 0; i < n; ++i) {
        int64_t hi;
        const int32_t* tk = row_ids(&c.s, valid_state(&c.s, st[i]), &hi, scratch);
        const int64_t r = target[static_cast<size_t>(i)];
        char* row = m.base + r * m.row_stride;
        const char* from = has_src ? src_base + r * src_stride : nullptr;
        if (itemsize == 4)
            copy_allowed_ids(reinterpret_cast<uint32_t*>(row), reinterpret_cast<const uint32_t*>(from), V, tk, hi,
                             static_cast<uint32_t>(bits));
        else
            copy_allowed_ids(reinterpret_cast<uint16_t*>(row), reinterpret_cast<const uint16_t*>(from), V, tk, hi,
                             static_cast<uint16_t>(bits));
    }
}

}  // namespace

nb::object make_mask(const CoreObj& c, int64_t s) {
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(c.s.n_states))
        throw nb::value_error(("state=" + std::to_string(s) + ": not a state of this set (0.." +
                               std::to_string(c.s.n_states - 1) + ")")
                                  .c_str());
    const int64_t r = stored_row(&c.s, s);
    if (r < 0) {  // a walked row: a new array
        std::vector<int32_t> ids;
        int64_t n;
        const int32_t* p = row_ids(&c.s, s, &n, ids);
        return copy_numpy(p, static_cast<size_t>(n));
    }
    int64_t lo;
    const size_t n = static_cast<size_t>(row_span(&c.s, r, &lo));
    return nb::cast(nb::ndarray<nb::numpy, const int32_t, nb::ndim<1>>(c.s.tokens + lo, {n}, c.tokens_obj));
}

void bind_steps(nb::module_& m) {
    auto cls = nb::class_<CoreObj>(m, "Core", "Steps over a ChoiceSet's arrays.")
                   .def("__init__", &core_init, "row_ptr"_a.noconvert(), "tokens"_a, "children"_a.noconvert(),
                        "far_pos"_a.noconvert(), "far_child"_a.noconvert(), "ends"_a.noconvert(), "width"_a,
                        "compact"_a = nb::none())
                   .def_prop_ro(
                       "END", [](nb::handle self) { return core_of(self).s.end_state; }, "end state")
                   .def_prop_ro(
                       "DEAD", [](nb::handle self) { return core_of(self).s.dead_state; }, "dead state");
    // per step or batch: CPython method descriptors (fast_method.h)
    fast_method<&py_advance>(cls, "advance", {{"state"}, {"token"}}, "The next state (DEAD if refused).");
    fast_method<&py_mask>(cls, "mask", {{"state"}}, "The allowed ids (a read-only int32 view).");
    fast_method<&py_is_terminal>(cls, "is_terminal", {{"state"}}, "Whether a value ends at state.");
    fast_method<&py_fill>(cls, "fill", {{"state"}, {"bitmask"}, {"index", nb::int_(0)}},
                          "Write the bitmask of state into row index.");
    fast_method<&py_advance_batch>(cls, "advance_batch", {{"states"}, {"tokens"}, {"out", nb::none()}},
                                   "The next states: into out, or a new array without it.");
    fast_method<&py_fill_batch>(cls, "fill_batch", {{"states"}, {"bitmask"}, {"rows"}},
                                "Write the bitmask of states[i] into row rows[i] (row i when rows is None).");
    fast_method<&py_apply_sparse>(cls, "apply_sparse",
                                  {{"states"}, {"logits"}, {"rows"}, {"neg_inf_bits"}, {"itemsize"}},
                                  "Set every logit a state refuses to -inf.");
    fast_method<&py_copy_sparse>(cls, "copy_sparse",
                                 {{"states"}, {"src"}, {"dst"}, {"rows"}, {"neg_inf_bits"}, {"itemsize"}},
                                 "Copy the allowed logits from src to dst (-inf them when src is None).");
}

}  // namespace trierouter
