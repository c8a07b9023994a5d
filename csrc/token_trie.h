// TokenTrie: forward trie of the matchable tokens' bytes with Aho-Corasick links (per tokenizer, built once).
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
#include "support/sort.h"

namespace trierouter {

// ------------------------------------------------------------------------------------------------
// TokenTrie: forward trie of the matchable tokens' bytes (per tokenizer, built once).

struct alignas(32) StateInfo {  // what the hot loops read of one state, in one cache line
    int32_t clo, chi, fail, d1row;  // children span, failure link, goto1 row (-1: deeper)
    int32_t olo, ohi;               // span of outputs: every token that is a suffix of the state
    int32_t dict, pad;
};
struct Out {
    int32_t len, token;
};

// (branch share) per trie, built on first use by dfa_masks' row sharing: each node's depth,
// the length of the longest token in its subtree (0: none), and each token id's length
struct TrieShape {
    std::vector<uint16_t> depth, height;  // (uint16: 2 bytes a node, read by the walks)
    std::vector<uint16_t> tok_len;
    int32_t max_len = 0;
    bool ok = false;  // false: the trie is not in preorder or a token is too long (no sharing)
};

// The trie's arrays. Plain data: zeroed storage is an empty trie (a Python TokenTrie embeds one in
// memory its allocator zeroed); ``destroy_token_trie`` frees what ``build_token_trie`` made.
struct TokenTrie {
    int32_t n_nodes;
    int32_t n_ids;  // len(tokens)
    int32_t root_child[256];
    uint8_t single[256];
    // forward trie (preorder ids; root 0): children of u are child_node[child_ptr[u]..] with
    // bytes child_label[...]; tokens ending at u are tok_ids[tok_ptr[u]..tok_ptr[u+1]]
    BigVec<int32_t>* child_ptr;
    BigVec<int32_t>* child_node;
    BigVec<uint8_t>* child_label;
    BigVec<int32_t>* tok_ptr;
    BigVec<int32_t>* tok_ids;
    // Aho-Corasick: failure link, dictionary link (nearest proper suffix state with tokens, -1),
    // depth (= token length at a token's node), and full transitions for the root and depth-1
    // states (row d1row[u] of goto1, -1 for deeper states)
    BigVec<int32_t>* fail;
    BigVec<int32_t>* dict;
    BigVec<int32_t>* depth;
    BigVec<int32_t>* d1row;
    BigVec<int32_t>* goto1;
    BigVec<StateInfo>* info;
    BigVec<Out>* outs;
    int32_t max_span;  // the most outputs of one state
    double build_seconds;
    TrieShape* shape;  // nullptr until dfa_masks shares rows over this trie
};

struct TT {  // raw pointers for the hot loops
    const StateInfo* si;
    const int32_t *cnode, *tids, *goto1, *tptr;
    const uint8_t* clab;
    const Out* outs;
    explicit TT(const TokenTrie* t)
        : si(t->info->data()), cnode(t->child_node->data()), tids(t->tok_ids->data()),
          goto1(t->goto1->data()), tptr(t->tok_ptr->data()), clab(t->child_label->data()),
          outs(t->outs ? t->outs->data() : nullptr) {}
    inline int32_t child(int32_t u, uint8_t b) const {
        const int32_t lo = si[u].clo, len = si[u].chi - lo;
        const uint8_t* l = clab + lo;
        if (len <= 16) {
            for (int32_t i = 0; i < len; ++i)
                if (l[i] == b) return cnode[lo + i];
            return -1;
        }
        const void* f = std::memchr(l, b, static_cast<size_t>(len));
        return f ? cnode[lo + (static_cast<const uint8_t*>(f) - l)] : -1;
    }
    // Aho-Corasick transition
    inline int32_t go(int32_t s, uint8_t b) const {
        for (;;) {
            const int32_t r = si[s].d1row;
            if (r >= 0) return goto1[(static_cast<int64_t>(r) << 8) | b];
            const int32_t c = child(s, b);
            if (c >= 0) return c;
            s = si[s].fail;
        }
    }
    inline bool has_tok(int32_t s) const { return tptr[s + 1] > tptr[s]; }
};


// Frees the arrays of ``t`` (left empty).
void destroy_token_trie(TokenTrie& t);

// Builds ``t`` (empty) from the matchable tokens ``ents`` (bytes and id, none empty; sorted here
// in place) of a vocabulary of ``n_ids`` ids. Throws std::bad_alloc.
void build_token_trie(TokenTrie& t, BigVec<Ent>& ents, int32_t n_ids);

// The bytes the trie's arrays hold.
size_t token_trie_nbytes(const TokenTrie& t);

// The shape of a trie for dfa_masks' row sharing (built once per trie, on first use; not
// thread-safe: called under the GIL).
const TrieShape* trie_shape(TokenTrie* t);

}  // namespace trierouter
