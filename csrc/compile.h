// The set compile: chunks, row sorting, memo of Aho-Corasick steps (values -> serving arrays).
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
#include "support/threads.h"
#include "token_trie.h"

namespace trierouter {

// A child offset of the serving layout: the value ends here (END), or the child is far (in
// far_pos / far_child).
constexpr uint16_t TO_END = 0xFFFF;
constexpr uint16_t FAR = 0xFFFE;

// -- the compile's chunks: consecutive values walked on threads of their own ---------------------

constexpr int64_t SPLIT_MIN = 2048;  // values per chunk, at least (compile's split_min default)

struct NodePair {
    int32_t node, token, child;
};

struct Chunk {
    size_t b = 0, e = 0;  // its values
    int32_t sid = 1;      // its first node
    int32_t own = 0;      // nodes below it are shared ancestors (an earlier chunk's)
    int32_t nodes = 0;    // after the trie pass: the next chunk's first node
    int64_t need = 0;     // the shared ancestors' depths: 0 .. need
    std::vector<int32_t> path0;   // their ids, by depth
    std::vector<int64_t> side;    // the pairs counted into them, by depth
    std::vector<NodePair> pend;   // the pairs written into them
    std::vector<NodePair> fars;   // far children of its own rows
    uint8_t used[256] = {0};      // the bytes of its values
};

inline int64_t chunk_count(int64_t nv, int64_t threads, int64_t split_min) {
    if (threads <= 1 || split_min <= 0) return 1;
    return std::max<int64_t>(1, std::min<int64_t>({threads, nv / split_min, 64}));
}

// Chunk boundaries near an even split, each where the value's common prefix with the previous
// one is shortest within a window (fewer shared ancestors); ``chunks[c].b`` and ``.e`` are set.
void plan_chunks(std::vector<Chunk>& chunks, const int32_t* lcps, size_t nv);

// The compact layout's rule, shared by compile and compact_layout: key i's nodes from depth
// out[i] on have at most max_keys keys below them. Node (i, d) has that many iff
// i + max_keys >= n or some key in (i, i + max_keys] shares fewer than d bytes with its
// predecessor: a sliding minimum of lcp (lcp[i]: key i's common prefix with key i - 1).
void walked_depths(const int32_t* lcp, int64_t n, int64_t max_keys, int32_t* out);

// ------------------------------------------------------------------------------------------------
// compile

struct Pair {
    int32_t token;
    int32_t child;
};

inline void sort_row(Pair* a, size_t n) {
    if (n < 24) {
        for (size_t i = 1; i < n; ++i) {
            Pair x = a[i];
            size_t j = i;
            while (j > 0 && a[j - 1].token > x.token) {
                a[j] = a[j - 1];
                --j;
            }
            a[j] = x;
        }
    } else {
        std::sort(a, a + n, [](const Pair& x, const Pair& y) { return x.token < y.token; });
    }
}

inline void cswap(uint64_t& a, uint64_t& b) {  // branchless compare-exchange (cmov)
    const uint64_t x = a < b ? a : b, y = a < b ? b : a;
    a = x;
    b = y;
}

// Rows of more than 16 pairs: their ids set as bits (two levels: a word per 64 ids, a summary bit
// per nonzero word), read back in order, the codes waiting in a table by id. About two passes
// over the row and a scan of the summary (a word per 4,096 ids): under half the time of the
// 6-bit radix below on the rows of 100,000 tool names (a 3x-pass radix over ~170 pairs each).
struct IdBits {
    size_t n_ids;
    std::vector<uint64_t> bits, summary;
    std::vector<uint16_t> code;
    explicit IdBits(size_t ids)
        : n_ids(ids), bits(ids / 64 + 1, 0), summary(ids / 4096 + 1, 0), code(ids + 1) {}
    // false, leaving the row as it was, when an id repeats or is not below n_ids
    bool sort(int32_t* tk, uint16_t* ch, size_t n) {
        uint64_t seen = 0;
        for (size_t i = 0; i < n; ++i) {
            const size_t t = static_cast<uint32_t>(tk[i]);
            if (t >= n_ids) {
                clear(tk, i);
                return false;
            }
            const uint64_t m = uint64_t(1) << (t & 63);
            seen |= bits[t >> 6] & m;
            bits[t >> 6] |= m;
            summary[t >> 12] |= uint64_t(1) << ((t >> 6) & 63);
            code[t] = ch[i];
        }
        if (seen) {
            clear(tk, n);
            return false;
        }
        size_t at = 0;
        for (size_t s = 0; s < summary.size(); ++s) {
            uint64_t sw = summary[s];
            if (!sw) continue;
            summary[s] = 0;
            do {
                const size_t wi = s * 64 + static_cast<size_t>(__builtin_ctzll(sw));
                sw &= sw - 1;
                uint64_t w = bits[wi];
                bits[wi] = 0;
                do {
                    const size_t t = wi * 64 + static_cast<size_t>(__builtin_ctzll(w));
                    w &= w - 1;
                    tk[at] = static_cast<int32_t>(t);
                    ch[at++] = code[t];
                } while (w);
            } while (sw);
        }
        return true;
    }
    void clear(const int32_t* tk, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            const size_t t = static_cast<uint32_t>(tk[i]);
            bits[t >> 6] = 0;
            summary[t >> 12] = 0;
        }
    }
};

// Sorts a row's (token, code) pairs by token. Rows come out of the walk in the byte order of the
// tokens, so the order by id is a random permutation: small rows go through branchless sorting
// networks (no mispredicted branches), large ones through ``big`` (IdBits) or else an LSD radix
// sort on the id.
inline void sort_row2(int32_t* tk, uint16_t* ch, size_t n, IdBits* big = nullptr) {
    if (n < 2) return;
    if (n == 2) {
        const int32_t a = tk[0], b = tk[1];
        const uint16_t ca = ch[0], cb = ch[1];
        const bool sw = b < a;
        tk[0] = sw ? b : a;
        tk[1] = sw ? a : b;
        ch[0] = sw ? cb : ca;
        ch[1] = sw ? ca : cb;
        return;
    }
    auto pack = [&](uint64_t* w) {
        for (size_t i = 0; i < n; ++i) w[i] = (static_cast<uint64_t>(static_cast<uint32_t>(tk[i])) << 16) | ch[i];
    };
    auto unpack = [&](const uint64_t* w) {
        for (size_t i = 0; i < n; ++i) {
            tk[i] = static_cast<int32_t>(w[i] >> 16);
            ch[i] = static_cast<uint16_t>(w[i] & 0xFFFF);
        }
    };
    if (n <= 8) {
        uint64_t w[8];
        pack(w);
        for (size_t i = n; i < 8; ++i) w[i] = ~uint64_t(0);  // padding sorts last
        // networks for 3, 4, 6 and 8 inputs (the smallest known), padded up to them
        if (n == 3) {
            cswap(w[0], w[2]); cswap(w[0], w[1]); cswap(w[1], w[2]);
        } else if (n == 4) {
            cswap(w[0], w[1]); cswap(w[2], w[3]); cswap(w[0], w[2]); cswap(w[1], w[3]); cswap(w[1], w[2]);
        } else if (n <= 6) {
            cswap(w[0], w[5]); cswap(w[1], w[3]); cswap(w[2], w[4]); cswap(w[1], w[2]); cswap(w[3], w[4]);
            cswap(w[0], w[3]); cswap(w[2], w[5]); cswap(w[0], w[1]); cswap(w[2], w[3]); cswap(w[4], w[5]);
            cswap(w[1], w[2]); cswap(w[3], w[4]);
        } else {
            cswap(w[0], w[2]); cswap(w[1], w[3]); cswap(w[4], w[6]); cswap(w[5], w[7]);
            cswap(w[0], w[4]); cswap(w[1], w[5]); cswap(w[2], w[6]); cswap(w[3], w[7]);
            cswap(w[0], w[1]); cswap(w[2], w[3]); cswap(w[4], w[5]); cswap(w[6], w[7]);
            cswap(w[2], w[4]); cswap(w[3], w[5]);
            cswap(w[1], w[4]); cswap(w[3], w[6]);
            cswap(w[1], w[2]); cswap(w[3], w[4]); cswap(w[5], w[6]);
        }
        unpack(w);
        return;
    }
    if (n <= 16) {  // Batcher's odd-even merge network, 63 compare-exchanges
        uint64_t w[16];
        pack(w);
        for (size_t i = n; i < 16; ++i) w[i] = ~uint64_t(0);
            cswap(w[0], w[1]); cswap(w[2], w[3]); cswap(w[0], w[2]); cswap(w[1], w[3]); cswap(w[1], w[2]); cswap(w[4], w[5]);
            cswap(w[6], w[7]); cswap(w[4], w[6]); cswap(w[5], w[7]); cswap(w[5], w[6]); cswap(w[0], w[4]); cswap(w[2], w[6]);
            cswap(w[2], w[4]); cswap(w[1], w[5]); cswap(w[3], w[7]); cswap(w[3], w[5]); cswap(w[1], w[2]); cswap(w[3], w[4]);
            cswap(w[5], w[6]); cswap(w[8], w[9]); cswap(w[10], w[11]); cswap(w[8], w[10]); cswap(w[9], w[11]); cswap(w[9], w[10]);
            cswap(w[12], w[13]); cswap(w[14], w[15]); cswap(w[12], w[14]); cswap(w[13], w[15]); cswap(w[13], w[14]); cswap(w[8], w[12]);
            cswap(w[10], w[14]); cswap(w[10], w[12]); cswap(w[9], w[13]); cswap(w[11], w[15]); cswap(w[11], w[13]); cswap(w[9], w[10]);
            cswap(w[11], w[12]); cswap(w[13], w[14]); cswap(w[0], w[8]); cswap(w[4], w[12]); cswap(w[4], w[8]); cswap(w[2], w[10]);
            cswap(w[6], w[14]); cswap(w[6], w[10]); cswap(w[2], w[4]); cswap(w[6], w[8]); cswap(w[10], w[12]); cswap(w[1], w[9]);
            cswap(w[5], w[13]); cswap(w[5], w[9]); cswap(w[3], w[11]); cswap(w[7], w[15]); cswap(w[7], w[11]); cswap(w[3], w[5]);
            cswap(w[7], w[9]); cswap(w[11], w[13]); cswap(w[1], w[2]); cswap(w[3], w[4]); cswap(w[5], w[6]); cswap(w[7], w[8]);
            cswap(w[9], w[10]); cswap(w[11], w[12]); cswap(w[13], w[14]);
        unpack(w);
        return;
    }
    size_t k = 1;
    while (k < n && tk[k - 1] <= tk[k]) ++k;
    if (k == n) return;
    if (big && big->sort(tk, ch, n)) return;
    uint64_t local[512];
    std::vector<uint64_t> heap;
    uint64_t* w = local;
    if (n > 256) {
        heap.resize(2 * n);
        w = heap.data();
    }
    pack(w);
    {  // LSD radix on the id, 6 bits a pass (as many passes as the largest id needs)
        uint64_t* a = w;
        uint64_t* b = w + n;
        uint32_t top = 0;
        for (size_t i = 0; i < n; ++i) top |= static_cast<uint32_t>(tk[i]);
        for (int shift = 16; shift < 48 && (static_cast<uint64_t>(top) << 16) >> shift; shift += 6) {
            uint32_t cnt[65] = {0};
            for (size_t i = 0; i < n; ++i) cnt[((a[i] >> shift) & 63) + 1]++;
            for (int d = 0; d < 64; ++d) cnt[d + 1] += cnt[d];
            for (size_t i = 0; i < n; ++i) b[cnt[(a[i] >> shift) & 63]++] = a[i];
            std::swap(a, b);
        }
        w = a;
    }
    unpack(w);
}

// one remembered Aho-Corasick step: (state << 8 | byte) + 1, the next state and its outputs
// Per trie node, the span of its state's outputs (pass 2 reads no state): olo << 8 | count in
// 4 bytes where every span fits (fewer than 2**24 outputs, at most 255 a state), else
// olo << 32 | ohi in 8.
struct Spans {
    bool narrow;
    Buf<uint32_t> s32;
    Buf<uint64_t> s64;
    explicit Spans(const TokenTrie* t)
        : narrow(t->outs->size() < (size_t(1) << 24) && t->max_span < 256) {}
    bool resize(size_t n) { return narrow ? s32.resize(n) : s64.resize(n); }
    inline void set(size_t i, int32_t lo, int32_t hi) {
        if (narrow)
            s32[i] = static_cast<uint32_t>(lo) << 8 | static_cast<uint32_t>(hi - lo);
        else
            s64[i] = static_cast<uint64_t>(static_cast<uint32_t>(lo)) << 32 | static_cast<uint32_t>(hi);
    }
    inline int32_t lo(size_t i) const {
        return narrow ? static_cast<int32_t>(s32[i] >> 8) : static_cast<int32_t>(s64[i] >> 32);
    }
    inline void get(size_t i, int32_t* lo, int32_t* hi) const {
        if (narrow) {
            const uint32_t x = s32[i];
            *lo = static_cast<int32_t>(x >> 8);
            *hi = *lo + static_cast<int32_t>(x & 0xFF);
        } else {
            const uint64_t x = s64[i];
            *lo = static_cast<int32_t>(x >> 32);
            *hi = static_cast<int32_t>(x & 0xFFFFFFFFu);
        }
    }
    void release() {
        s32.release();
        s64.release();
    }
};

struct GoMemo {
    uint32_t key;
    int32_t q, olo, ohi;
    uint64_t lens;  // the outputs' lengths, one byte each, when there are at most 8 of < 256
};
constexpr int GO_MEMO_BITS = 14;  // 16,384 entries, 384 KB


// -- the compile pass ---------------------------------------------------------------------------

// One compile's inputs: the values' bytes (each followed by the terminator of ``tl`` bytes, in
// ``joined``; sorted, deduplicated and relocated in place), the tokenizer's trie, the sorted end
// ids, and the options of compile() (see the binding's compile()).
struct CompileInput {
    Buf<Str>& strs;
    Buf<uint8_t>& joined;
    const TokenTrie* tri;
    int64_t tl;
    const std::vector<int32_t>& eos;
    bool allow_end;
    long long max_keys;  // > 0: the compact layout (see compact_layout)
    long long threads, split_min;
};

// The serving arrays (ChoiceSet's), the compact layout's (info empty when not compact), and the
// values no token sequence spells (``bad``, with value_bytes / value_offsets, on kUnreachable).
struct CompileOutput {
    Buf<int32_t> row_ptr, tokens, far_pos, far_child, ends, lcps, drank, kfirst;
    Buf<uint16_t> children;
    Buf<uint8_t> vbytes;
    Buf<int64_t> voff, info;
    Buf<uint64_t> dbits;
    std::vector<int64_t> bad;
};

enum class CompileStatus { kOk, kNoMemory, kTooManyNodes, kTooManyPairs, kUnreachable };

// Values to the serving layout in one pass (no Python call: the binding releases the GIL):
// sort, trie in preorder with each node's Aho-Corasick state, rows counted, rows written (in
// chunks on threads of their own for large sets), pruned where a value may not be spellable,
// far children, compact layout. Phases timed with ``lap``.
CompileStatus compile_set(CompileInput& in, CompileOutput& o, Lap& lap);

}  // namespace trierouter
