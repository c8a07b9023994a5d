// Steps over a set's arrays: walked rows (compact layout) and batches of steps (see steps.h).
#include "steps.h"

namespace trierouter {

// The walked row of s, from a thread's cache of recent rows (direct-mapped by state): a step
// walks the row its fill walked before (advance, then the next state's mask), and a batch's
// advance the rows its previous fill walked. Valid until the thread's next walk.
struct WalkedRow {
    uint64_t uid = 0;
    int64_t state = -1;
    std::vector<DemandPair> row;
};
constexpr size_t WALK_CACHE = 1024;

inline const std::vector<DemandPair>& walked_row(const Serving* c, int64_t s) {
    thread_local std::vector<WalkedRow> cache(WALK_CACHE);
    const CompactWalk* x = c->cx;
    WalkedRow& e = cache[static_cast<size_t>(s) & (WALK_CACHE - 1)];
    if (e.uid != x->uid || e.state != s) {
        demand_row(x->keys, x->tt, x->end_ids, static_cast<int32_t>(c->end_state), s, e.row);
        e.uid = x->uid;
        e.state = s;
    }
    return e.row;
}

// The ids allowed at s (valid): a span of the stored tokens, or a walked row copied to ``ids``.
const int32_t* row_ids(const Serving* c, int64_t s, int64_t* n, std::vector<int32_t>& ids) {
    const int64_t r = stored_row(c, s);
    if (r >= 0) {
        int64_t lo;
        *n = row_span(c, r, &lo);
        return c->tokens + lo;
    }
    const auto& row = walked_row(c, s);
    ids.resize(row.size());
    for (size_t q = 0; q < row.size(); ++q) ids[q] = row[q].token;
    *n = static_cast<int64_t>(row.size());
    return ids.data();
}

// advance from a walked node: the token's bytes against the node's keys (no walk). The first
// key that continues with them added the node they lead to (the keys before it do not share
// path + bytes, so its common prefix with its predecessor is shorter).
int64_t walked_advance(const Serving* c, int64_t s, int64_t token) {
    const CompactWalk* x = c->cx;
    const KeyView& k = x->keys;
    int64_t i, d;
    k.locate(s, &i, &d);
    if (std::binary_search(x->end_ids.begin(), x->end_ids.end(), token))
        return k.klen(i) == d ? c->end_state : c->dead_state;
    if (token < 0 || token >= x->n_tokens || !x->matchable[token]) return c->dead_state;
    const uint8_t* b = x->tbuf + x->toff[token];
    const int64_t L = x->toff[token + 1] - x->toff[token];
    for (int64_t j = i; j < k.K && (j == i || k.lcp[j] >= d); ++j) {
        if (k.klen(j) < d + L) continue;
        int64_t q = 0;
        while (q < L && k.byte(j, d + q) == b[q]) ++q;
        if (q == L) return k.first[j] + (d + L) - k.lcp[j] - 1;
        if (k.byte(j, d + q) > b[q]) break;  // sorted: no later key continues with the token
    }
    return c->dead_state;
}

const int32_t* walked_ids(const Serving* c, int64_t s, int64_t* n) {
    thread_local std::vector<int32_t> scratch;  // (only a walked row reads the thread's storage)
    return row_ids(c, s, n, scratch);
}

const char* check_serving(const Serving* c, int64_t n_rows, std::string* why) {
    auto out = [why](const char* what, int64_t i, int64_t v, int64_t lo, int64_t hi) {
        *why = std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
               " out of range " + std::to_string(lo) + ".." + std::to_string(hi);
        return why->c_str();
    };
    if (c->row_ptr[0] != 0) return out("row_ptr", 0, c->row_ptr[0], 0, 0);
    for (int64_t r = 1; r <= n_rows; ++r)
        if (c->row_ptr[r] < c->row_ptr[r - 1] || c->row_ptr[r] > c->n_pairs)
            return out("row_ptr", r, c->row_ptr[r], c->row_ptr[r - 1], c->n_pairs);
    for (int64_t j = 0; j < c->n_pairs; ++j)
        if (c->tokens[j] < 0 || c->tokens[j] >= c->width)
            return out("tokens", j, c->tokens[j], 0, c->width - 1);
    for (int64_t q = 0; q < c->n_far; ++q) {
        const int64_t lo = q ? c->far_pos[q - 1] + 1 : 0;
        if (c->far_pos[q] < lo || c->far_pos[q] >= c->n_pairs)
            return out("far_pos", q, c->far_pos[q], lo, c->n_pairs - 1);
        if (c->far_child[q] < 0 || c->far_child[q] >= c->n_states)
            return out("far_child", q, c->far_child[q], 0, c->n_states - 1);
    }
    for (int64_t e = 0; e < c->n_ends; ++e) {
        const int64_t lo = e ? c->ends[e - 1] + 1 : 0;
        if (c->ends[e] < lo || c->ends[e] >= c->end_state) return out("ends", e, c->ends[e], lo, c->end_state - 1);
    }
    return nullptr;
}

void advance_batch(const Serving* c, const int64_t* states, const int64_t* tokens, int64_t n, int64_t* o) {
    // The rows of a batch are random and far apart (tens of MB at K = 100,000), so every request
    // misses the caches two or three times in a chain (row_ptr, then the row's ids and codes).
    // In blocks of 64: first every row_ptr entry is prefetched, then (those loads in flight
    // together) every row's start, then the searches run on cached lines. A sliding prefetch
    // 8 ahead kept only a few misses in flight and often read row_ptr before it had arrived.
    constexpr int64_t BLOCK = 64;
    auto valid = [c](int64_t s) { return static_cast<uint64_t>(s) < static_cast<uint64_t>(c->n_states); };
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {
        const int64_t b1 = std::min(n, b0 + BLOCK);
        if (!c->cx) {  // (the compact layout: row_ptr is not indexed by state)
        for (int64_t i = b0; i < b1; ++i)
            if (valid(states[i])) __builtin_prefetch(c->row_ptr + states[i]);
        for (int64_t i = b0; i < b1; ++i)
            if (valid(states[i])) {
                const int32_t lo = c->row_ptr[states[i]];
                __builtin_prefetch(c->tokens + lo);
                __builtin_prefetch(c->children + lo);
            }
        }
        for (int64_t i = b0; i < b1; ++i) o[i] = core_advance(c, states[i], tokens[i]);
    }
}

}  // namespace trierouter
