// Steps over a ChoiceSet's arrays: a step (state, token) -> state, the allowed ids of a state,
// a packed bitmask row, a batch of steps. Inline where a step must stay one call from Python
// (Core.advance, MatcherBase); a compact layout's rows are walked on demand (compact.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compact.h"
#include "compile.h"
#include "token_trie.h"

namespace trierouter {

// A compact layout's serving side: which states are walked on demand (demand_bits;
// demand_rank[w] = such states before word w), the keys and the token trie.
struct CompactWalk {
    const uint64_t* bits = nullptr;
    const int32_t* rank = nullptr;
    // the vocabulary's token bytes (buffer, offsets) and matchable flags: an advance compares
    // the token's bytes with the node's keys instead of walking the row
    const uint8_t* tbuf = nullptr;
    const int64_t* toff = nullptr;
    const uint8_t* matchable = nullptr;
    int64_t n_tokens = 0;
    KeyView keys;
    TT tt;
    std::vector<int32_t> end_ids;  // sorted; empty when the set leaves them out (allow_end=False)
    int64_t n_nodes = 0;
    uint64_t uid = 0;  // names this layout in the walked-row caches (never reused)
    explicit CompactWalk(const TokenTrie* t) : tt(t) {}
};

// The serving arrays of a ChoiceSet (read only; from a compile or a memory-mapped file): row s
// of the CSR (row_ptr, tokens sorted, children codes: offset from s, TO_END, FAR -> far_pos /
// far_child), ends, and the states END and DEAD. ``cx``: the compact layout (null: every row
// stored, row_ptr indexed by state). Zeroed storage is an empty set (a Core embeds one).
struct Serving {
    const int32_t* row_ptr;
    const int32_t* tokens;
    const uint16_t* children;
    const int32_t* far_pos;
    const int32_t* far_child;
    const int32_t* ends;
    int64_t n_far, n_ends, n_states, n_pairs, end_state, dead_state, width, words;
    const CompactWalk* cx;
};

// Compact layout: the index of s's stored row, or -1 when s's row is walked on demand (s valid).
inline int64_t stored_row(const Serving* c, int64_t s) {
    const CompactWalk* x = c->cx;
    if (!x) return s;
    const uint64_t word = x->bits[s >> 6], bit = uint64_t(1) << (s & 63);
    if (word & bit) return -1;
    return s - x->rank[s >> 6] - __builtin_popcountll(word & (bit - 1));
}

// advance from a walked node: the token's bytes against the node's keys (no walk). The first
// key that continues with them added the node they lead to (the keys before it do not share
// path + bytes, so its common prefix with its predecessor is shorter).
int64_t walked_advance(const Serving* c, int64_t s, int64_t token);

// Stored row r's span of ``tokens``: [*lo, *lo + n). The arrays are checked when a Core opens them
// (check_serving); a span that left ``tokens`` since (arrays changed under the Core) is empty.
inline int64_t row_span(const Serving* c, int64_t r, int64_t* lo) {
    const int64_t a = c->row_ptr[r], b = c->row_ptr[r + 1];
    *lo = a;
    return (a >= 0 && a <= b && b <= c->n_pairs) ? b - a : 0;
}

inline int64_t core_advance(const Serving* c, int64_t s, int64_t token) {
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(c->n_states)) return c->dead_state;
    const int64_t r = stored_row(c, s);
    if (r < 0) return walked_advance(c, s, token);
    int64_t lo;
    int64_t n = row_span(c, r, &lo);
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
    if (f == c->far_pos + c->n_far || *f != at) return c->dead_state;  // (checked on open)
    return c->far_child[f - c->far_pos];
}

inline int64_t valid_state(const Serving* c, int64_t s) {
    return static_cast<uint64_t>(s) < static_cast<uint64_t>(c->n_states) ? s : c->dead_state;
}

// The ids allowed at s (valid): a span of the stored tokens, or a walked row copied to ``ids``.
const int32_t* row_ids(const Serving* c, int64_t s, int64_t* n, std::vector<int32_t>& ids);

// row_ids of a walked row, into the thread's own storage (valid until its next walk).
const int32_t* walked_ids(const Serving* c, int64_t s, int64_t* n);

// A row is written 2 KB at a time: the stretch is zeroed, then the bits of its ids (a row's ids
// are sorted) are set while its lines are still in L1. Measured A/B on this 2-core EPYC, in one
// process, 256 Qwen2 rows (4.9 MB, ~80 ids a row): 7-10% faster than one memset of the whole
// row before its ids (likely: glibc zeroes 19 KB with `rep stosb`, and the ids' words then come
// from further out than L1); 1, 1.5, 4 and 8 KB stretches and 32-byte stores of our own were
// slower; writing each word once (zero stretches between ids, words built in registers) 2x
// slower (the stretches are short, the branches unpredictable); streaming stores 2-4x slower.
constexpr int64_t FILL_STRETCH = 512;  // words

inline void fill_row(const Serving* c, int64_t s, int32_t* row, int64_t words) {
    s = valid_state(c, s);
    const int64_t r = stored_row(c, s);
    int64_t j = 0, hi;
    const int32_t* tk;
    if (r >= 0) {
        int64_t lo;
        hi = row_span(c, r, &lo);
        tk = c->tokens + lo;
    } else {
        tk = walked_ids(c, s, &hi);
    }
    uint32_t* w = reinterpret_cast<uint32_t*>(row);
    for (int64_t p0 = 0; p0 < words; p0 += FILL_STRETCH) {
        const int64_t p1 = std::min(words, p0 + FILL_STRETCH);
        std::memset(w + p0, 0, static_cast<size_t>(p1 - p0) * 4);
        // ids are sorted: the row's part below this stretch's end (a negative id, which only
        // arrays changed since their check could hold, reads as past the end: never written)
        for (const int64_t lim = p1 << 5; j < hi && tk[j] >= 0 && tk[j] < lim; ++j) {
            const uint32_t t = static_cast<uint32_t>(tk[j]);
            w[t >> 5] |= 1u << (t & 31);
        }
    }
}

// fill_row for n states into rows of a packed bitmask: state states[i] into the row at
// base + target[i] * stride (each target checked by the caller). In the full layout the next
// row's ids and the one after's row pointer are prefetched while a row is written.
inline void fill_rows(const Serving* c, bool compact, const int64_t* states, const int64_t* target,
                      int64_t n, char* base, int64_t stride, int64_t words) {
    for (int64_t i = 0; i < n; ++i) {
        if (i + 1 < n && !compact) {  // the next row's ids (every line of them) load while this row is written
            int64_t lo;
            const int64_t k = row_span(c, valid_state(c, states[i + 1]), &lo);
            const char* a = reinterpret_cast<const char*>(c->tokens + lo);
            const char* b = reinterpret_cast<const char*>(c->tokens + lo + k);
            for (; a < b; a += 64) __builtin_prefetch(a);
        }
        if (i + 2 < n && !compact) __builtin_prefetch(c->row_ptr + valid_state(c, states[i + 2]));
        fill_row(c, states[i], reinterpret_cast<int32_t*>(base + target[i] * stride), words);
    }
}

// Sparse masking of one logits row ``x`` (``V`` entries of T: float32 or bfloat16/float16 bits)
// at the ``n`` allowed ids ``tk`` (ids outside 0..V-1 skipped).
// keep_only: the allowed entries keep their values, every other becomes ``fill`` (-inf); the
// kept values go through ``keep`` (scratch), so the row is written once.
template <typename T>
void keep_only(T* x, int64_t V, const int32_t* tk, int64_t n, T fill, std::vector<T>& keep) {
    keep.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        const int32_t t = tk[j];
        keep[static_cast<size_t>(j)] = t >= 0 && t < V ? x[t] : T{0};
    }
    std::fill(x, x + V, fill);
    for (int64_t j = 0; j < n; ++j) {
        const int32_t t = tk[j];
        if (t >= 0 && t < V) x[t] = keep[static_cast<size_t>(j)];
    }
}

// copy_allowed_ids: only the allowed entries are written: copied from ``y`` (the same row of
// another array), or set to ``fill`` when ``y`` is null.
template <typename T>
void copy_allowed_ids(T* x, const T* y, int64_t V, const int32_t* tk, int64_t n, T fill) {
    for (int64_t j = 0; j < n; ++j) {
        const int32_t t = tk[j];
        if (t >= 0 && t < V) x[t] = y ? y[t] : fill;
    }
}

// Why the serving arrays of ``c`` (``n_rows`` stored rows) cannot be served: nullptr when every
// row span lies in ``tokens``, every id in 0..width-1, every far position and far child, and the
// completed nodes, in range and ascending; else a message naming the first entry out of range
// (written to ``why``). A Core checks the arrays it is given once, when it opens them.
const char* check_serving(const Serving* c, int64_t n_rows, std::string* why);

// out[i] = the state after tokens[i] from states[i], i < n (out may be states).
void advance_batch(const Serving* c, const int64_t* states, const int64_t* tokens, int64_t n, int64_t* out);

}  // namespace trierouter
