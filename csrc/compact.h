// Compact layout: rows of nodes with few values below are walked on demand over the keys.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#include "support/buffers.h"
#include "token_trie.h"

namespace trierouter {

// ------------------------------------------------------------------------------------------------
// Compact layout: the rows of nodes with few values below (at most ``max_keys``) are not stored;
// they are walked on demand, the same lockstep walk as the compile's, over the sorted keys
// (value + terminator) and the tokenizer's forward trie. A node is named by the key that added it
// to the trie and its depth: key i adds the nodes first[i] .. at depths lcp[i] + 1 .. len(key i)
// (preorder), and the first key of a group of keys sharing a prefix adds that prefix's node.

struct KeyView {
    const uint8_t* vb = nullptr;
    const int64_t* voff = nullptr;
    const int32_t* first = nullptr;
    const int32_t* lcp = nullptr;
    int64_t K = 0;
    std::string term;
    inline int64_t klen(int64_t j) const {
        return voff[j + 1] - voff[j] + static_cast<int64_t>(term.size());
    }
    inline uint8_t byte(int64_t j, int64_t p) const {
        const int64_t vl = voff[j + 1] - voff[j];
        return p < vl ? vb[voff[j] + p] : static_cast<uint8_t>(term[static_cast<size_t>(p - vl)]);
    }
    // the common prefix of keys a and b (the values' bytes compared directly, then the rest)
    inline int64_t common(int64_t a, int64_t b) const {
        const int64_t oa = voff[a], ob = voff[b];
        const int64_t m = std::min(voff[a + 1] - oa, voff[b + 1] - ob);
        int64_t l = 0;
        while (l < m && vb[oa + l] == vb[ob + l]) ++l;
        if (l < m) return l;
        const int64_t n = std::min(klen(a), klen(b));
        while (l < n && byte(a, l) == byte(b, l)) ++l;
        return l;
    }
    // the key that added node s >= 1 (the last one whose first node is <= s) and s's depth
    inline void locate(int64_t s, int64_t* i, int64_t* d) const {
        if (s == 0) {
            *i = 0;
            *d = 0;
            return;
        }
        const int32_t* f = std::upper_bound(first, first + K, static_cast<int32_t>(s));
        *i = (f - first) - 1;
        *d = lcp[*i] + 1 + (s - first[*i]);
    }
};

struct DemandPair {
    int32_t token, target;
};

// Emits (token, node) for every token t with bytes(t) == key[p0 .. p) along keys [lo, hi), which
// share their first p bytes and have at least p; u is the token-trie state after key[p0 .. p).
void demand_walk(const KeyView& k, const TT& tt, int32_t u, int64_t lo, int64_t hi, int64_t p,
                 std::vector<DemandPair>& out);

// The row of node s (valid, not END / DEAD), sorted by token.
void demand_row(const KeyView& k, const TT& tt, const std::vector<int32_t>& end_ids,
                int32_t end_state, int64_t s, std::vector<DemandPair>& out);

// compact_layout's inputs: a full layout's arrays (n_states rows: nodes, END, DEAD), its keys
// (values + terminator: vb, voff, K, term; first / lcp are computed), the trie to check the
// dropped rows against (null: no check), the sorted end ids, and max_keys.
struct CompactInput {
    const int32_t* row_ptr;
    const int32_t* tokens;
    const uint16_t* children;
    const int32_t* far_pos;
    const int32_t* far_child;
    int64_t n_states, n_far;
    KeyView keys;
    const TokenTrie* trie;
    const std::vector<int32_t>& end_ids;
    long long max_keys;
};

// The compact layout: the stored rows (row_ptr over them, tokens, children, far_pos /
// far_child), which states are walked (bits, rank), the keys' first nodes and common prefixes,
// and how many dropped rows differed from their walk (kept then).
struct CompactLayout {
    Buf<int32_t> first, lcp, rank, row_ptr, tokens, far_pos, far_child;
    Buf<uint16_t> children;
    Buf<uint64_t> bits;
    int64_t mismatched = 0;
};

enum class CompactStatus { kOk, kNoMemory, kBadNodes };

// The rows of the nodes with at most max_keys keys below dropped (walked on demand); where some
// byte of the keys has no single-byte token in the trie, each dropped row is first walked and
// compared with the stored one, and kept where they differ. kBadNodes: the keys do not make
// n_states - 2 nodes.
CompactStatus compact_layout(const CompactInput& in, CompactLayout& out);

}  // namespace trierouter
