// Compact layout walks (see compact.h).
#include "compact.h"

#include "compile.h"

namespace trierouter {

void demand_walk(const KeyView& k, const TT& tt, int32_t u, int64_t lo, int64_t hi, int64_t p,
                 std::vector<DemandPair>& out) {
    int64_t j = lo;
    if (k.klen(j) == p) ++j;  // the key that ends here sorts first and goes no further
    while (j < hi) {
        int64_t g = j + 1;
        while (g < hi && k.lcp[g] > p) ++g;  // keys with key j's byte at p
        const int32_t v = tt.child(u, k.byte(j, p));
        if (v >= 0) {
            // j is the first key of its group, so it added the node at depth p + 1
            const int32_t target = k.first[j] + static_cast<int32_t>(p - k.lcp[j]);
            for (int32_t q = tt.tptr[v]; q < tt.tptr[v + 1]; ++q) out.push_back({tt.tids[q], target});
            if (tt.si[v].chi > tt.si[v].clo) demand_walk(k, tt, v, j, g, p + 1, out);
        }
        j = g;
    }
}

void demand_row(const KeyView& k, const TT& tt, const std::vector<int32_t>& end_ids,
                int32_t end_state, int64_t s, std::vector<DemandPair>& out) {
    out.clear();
    int64_t i, d;
    k.locate(s, &i, &d);
    int64_t hi = i + 1;
    while (hi < k.K && k.lcp[hi] >= d) ++hi;
    if (k.klen(i) == d)
        for (int32_t e : end_ids) out.push_back({e, end_state});
    demand_walk(k, tt, 0, i, hi, d, out);
    std::sort(out.begin(), out.end(),
              [](const DemandPair& a, const DemandPair& b) { return a.token < b.token; });
}

CompactStatus compact_layout(const CompactInput& in, CompactLayout& out) {
    const int32_t* row_ptr = in.row_ptr;
    const int32_t* tokens = in.tokens;
    const uint16_t* children = in.children;
    const int32_t* far_pos = in.far_pos;
    const int32_t* far_child = in.far_child;
    const int64_t n_states = in.n_states, n_far = in.n_far, n_nodes = n_states - 2;
    const long long max_keys = in.max_keys;
    const TokenTrie* trie = in.trie;
    const std::vector<int32_t>& end_ids = in.end_ids;
    KeyView k = in.keys;
    Buf<int32_t>&first = out.first, &lcp = out.lcp;
    constexpr size_t PAGES_FROM = size_t(64) << 10;  // as the compile's compact arrays
    first.pages_from = lcp.pages_from = PAGES_FROM;
    bool ok = first.resize(static_cast<size_t>(k.K)) && lcp.resize(static_cast<size_t>(k.K));
    if (!ok) return CompactStatus::kNoMemory;
    const int64_t words = (n_states + 63) / 64;
    Buf<uint64_t>& bits = out.bits;
    Buf<int32_t>&rank = out.rank, &nrp = out.row_ptr, &ntk = out.tokens, &nfp = out.far_pos, &nfc = out.far_child;
    Buf<uint16_t>& nch = out.children;
    bits.pages_from = rank.pages_from = nrp.pages_from = ntk.pages_from = nfp.pages_from = PAGES_FROM;
    nfc.pages_from = nch.pages_from = PAGES_FROM;
    if (!bits.assign(static_cast<size_t>(words), 0) || !rank.resize(static_cast<size_t>(words)))
        return CompactStatus::kNoMemory;
    int64_t& mismatched = out.mismatched;
    mismatched = 0;
    int64_t next_first = 1;
    // keys: common prefix with the previous key, and the first node each adds
    for (int64_t i = 0; i < k.K; ++i) {
        const int64_t l = i ? k.common(i - 1, i) : 0;
        lcp[static_cast<size_t>(i)] = static_cast<int32_t>(l);
        first[static_cast<size_t>(i)] = static_cast<int32_t>(next_first);
        next_first += k.klen(i) - l;
    }
    k.first = first.p;
    k.lcp = lcp.p;
    ok = next_first == n_nodes;
    auto mark = [&](int64_t s) { bits[static_cast<size_t>(s >> 6)] |= uint64_t(1) << (s & 63); };
    std::vector<int32_t> from(static_cast<size_t>(k.K));
    if (ok) walked_depths(lcp.p, k.K, max_keys, from.data());
    for (int64_t i = 0; ok && i < k.K; ++i)
        for (int64_t d = from[static_cast<size_t>(i)]; d <= k.klen(i); ++d)
            mark(first[static_cast<size_t>(i)] + d - lcp[static_cast<size_t>(i)] - 1);
    if (ok && k.K <= max_keys) mark(0);
    bool verify = false;  // some byte no single token spells
    if (ok && trie) {
        uint8_t used[256] = {0};
        for (int64_t q = 0; q < k.voff[k.K]; ++q) used[k.vb[q]] = 1;
        for (char ch : k.term) used[static_cast<uint8_t>(ch)] = 1;
        for (int b = 0; b < 256; ++b) verify = verify || (used[b] && !trie->single[b]);
    }
    if (ok && verify) {
        const TT tt(trie);
        std::vector<DemandPair> row;
        for (int64_t w = 0; w < words; ++w) {
            for (uint64_t b = bits[static_cast<size_t>(w)]; b; b &= b - 1) {
                const int64_t s = (w << 6) + __builtin_ctzll(b);
                demand_row(k, tt, end_ids, static_cast<int32_t>(n_nodes), s, row);
                const int64_t lo = row_ptr[s], n = row_ptr[s + 1] - lo;
                bool same = n == static_cast<int64_t>(row.size());
                for (int64_t q = 0; same && q < n; ++q) {
                    const int64_t at = lo + q;
                    const uint16_t c = children[at];
                    int64_t target = s + c;
                    if (c == TO_END) target = n_nodes;
                    else if (c == FAR) {
                        const int32_t* fp = std::lower_bound(far_pos, far_pos + n_far, static_cast<int32_t>(at));
                        target = fp != far_pos + n_far && *fp == at ? far_child[fp - far_pos] : -1;
                    }
                    same = tokens[at] == row[static_cast<size_t>(q)].token &&
                           target == row[static_cast<size_t>(q)].target;
                }
                if (!same) {
                    bits[static_cast<size_t>(w)] &= ~(uint64_t(1) << (s & 63));
                    ++mismatched;
                }
            }
        }
    }
    // the stored rows: every state whose bit is clear, in order
    int64_t dropped = 0;
    for (int64_t w = 0; ok && w < words; ++w) {
        rank[static_cast<size_t>(w)] = static_cast<int32_t>(dropped);
        dropped += __builtin_popcountll(bits[static_cast<size_t>(w)]);
    }
    int64_t kept_pairs = 0;
    auto walked = [&](int64_t s) { return (bits[static_cast<size_t>(s >> 6)] >> (s & 63)) & 1; };
    for (int64_t s = 0; ok && s < n_states; ++s)
        if (!walked(s)) kept_pairs += row_ptr[s + 1] - row_ptr[s];
    ok = ok && nrp.resize(static_cast<size_t>(n_states - dropped + 1)) &&
         ntk.resize(static_cast<size_t>(kept_pairs)) && nch.resize(static_cast<size_t>(kept_pairs));
    int64_t f = 0, w = 0, r = 0;
    for (int64_t s = 0; ok && s < n_states; ++s) {
        if (walked(s)) continue;
        const int64_t lo = row_ptr[s], len = row_ptr[s + 1] - lo;
        nrp[static_cast<size_t>(r++)] = static_cast<int32_t>(w);
        std::memcpy(ntk.p + w, tokens + lo, static_cast<size_t>(len) * 4);
        std::memcpy(nch.p + w, children + lo, static_cast<size_t>(len) * 2);
        for (; f < n_far && far_pos[f] < lo + len; ++f)  // far children (in pair order)
            if (far_pos[f] >= lo)
                ok = ok && nfp.push(static_cast<int32_t>(w + far_pos[f] - lo)) && nfc.push(far_child[f]);
        w += len;
    }
    if (ok) nrp[static_cast<size_t>(r)] = static_cast<int32_t>(w);
    if (!ok) return next_first != n_nodes ? CompactStatus::kBadNodes : CompactStatus::kNoMemory;
    return CompactStatus::kOk;
}

}  // namespace trierouter
