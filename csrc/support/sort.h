// Sorting byte strings: MSD/LSD radix sorts over 8 or 16 bytes at a time, stable.
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
#include "support/threads.h"

namespace trierouter {

struct Str {
    const uint8_t* p;
    int64_t n;
};

inline bool str_less(const Str& a, const Str& b) {
    int64_t m = a.n < b.n ? a.n : b.n;
    int c = m ? std::memcmp(a.p, b.p, static_cast<size_t>(m)) : 0;
    return c < 0 || (c == 0 && a.n < b.n);
}
inline bool str_eq(const Str& a, const Str& b) {
    return a.n == b.n && (a.n == 0 || std::memcmp(a.p, b.p, static_cast<size_t>(a.n)) == 0);
}

struct Ent {
    Str s;
    int32_t id;
};
inline const Str& skey(const Str& x) { return x; }
inline const Str& skey(const Ent& x) { return x.s; }

// Sorting values: 8 bytes at a time. Each string's next 8 bytes (big endian, zero padded) and
// how many bytes remain (capped at 9: "more than 8") form a key; an LSD radix sort orders the
// keys, and each group whose keys are equal and continue goes on with the next 8 bytes. The
// first level reads the strings in memory order, and the keys fit a cache line per 4 strings.
struct KeyStr {
    uint64_t key;
    uint32_t rem;
    uint32_t idx;
};

inline uint64_t key_at(const Str& s, int64_t depth, uint32_t* rem) {
    const int64_t left = s.n - depth;
    uint64_t k = 0;
    if (left >= 8) {
        std::memcpy(&k, s.p + depth, 8);
        k = __builtin_bswap64(k);
        *rem = left > 8 ? 9u : 8u;
    } else {
        for (int64_t j = 0; j < left; ++j) k |= static_cast<uint64_t>(s.p[depth + j]) << (56 - 8 * j);
        *rem = static_cast<uint32_t>(left);
    }
    return k;
}

inline bool key_less(const KeyStr& x, const KeyStr& y) {
    if (x.key != y.key) return x.key < y.key;
    if (x.rem != y.rem) return x.rem < y.rem;
    return x.idx < y.idx;
}

// MSD radix on the byte of the key at ``shift`` (56 = the first), a comparison sort below 64
// keys; ties broken by the index, so the order is stable. ``tmp``: scratch of n keys.
void sort_keys(KeyStr* a, size_t n, int shift, KeyStr* tmp);

constexpr size_t LSD_MIN = 16384;  // from this many keys, LSD radix passes over all of them
constexpr size_t WIDE_MIN = 4096;  // from this many, mostly longer than 8 bytes: sort_values16

inline Str& skey_ref(Str& x) { return x; }
inline Str& skey_ref(Ent& x) { return x.s; }

// Puts a[] in the order of the keys' indices (``K``: KeyStr or KeyStr16); ``relocate``: see
// sort_values.
template <class T, class K>
void reorder(T* a, const K* ks, size_t n, Buf<uint8_t>* relocate) {
    Buf<T> sorted;
    if (relocate) sorted.huge_min = relocate->huge_min;
    if (!sorted.resize(n)) throw std::bad_alloc();
    for (size_t i = 0; i < n; ++i) sorted[i] = a[ks[i].idx];
    if (relocate) {
        size_t total = 0;
        for (size_t i = 0; i < n; ++i) total += static_cast<size_t>(skey(sorted[i]).n);
        if (!relocate->resize(total + 1)) throw std::bad_alloc();
        uint8_t* out = relocate->data();
        for (size_t i = 0; i < n; ++i) {
            if (i + 8 < n) __builtin_prefetch(skey(sorted[i + 8]).p);
            Str& si = skey_ref(sorted[i]);
            if (si.n) std::memcpy(out, si.p, static_cast<size_t>(si.n));
            si.p = out;
            out += si.n;
        }
    }
    std::copy(sorted.p, sorted.p + n, a);
}

// One stable LSD radix pass over n keys by ``digit`` (< buckets <= 2048): ks into tmp, then the
// two buffers swap.
template <class K, class D>
void lsd_pass(Buf<K>& ks, Buf<K>& tmp, size_t n, D digit, size_t buckets, std::vector<size_t>& cnt) {
    std::fill(cnt.begin(), cnt.begin() + static_cast<std::ptrdiff_t>(buckets) + 1, size_t(0));
    for (size_t i = 0; i < n; ++i) cnt[digit(ks[i]) + 1]++;
    for (size_t b = 0; b < buckets; ++b) cnt[b + 1] += cnt[b];
    for (size_t i = 0; i < n; ++i) tmp[cnt[digit(ks[i])]++] = ks[i];
    std::swap(ks.p, tmp.p);
    std::swap(ks.mapped, tmp.mapped);
    std::swap(ks.cap, tmp.cap);
}

template <class T>
void sort_values(T* a, size_t n, int64_t depth, Buf<uint8_t>* relocate = nullptr);

// Many strings that go on past 8 bytes (tool names: 27 bytes on average, their first 8 bytes
// shared by ~100 each): the next 16 bytes as two keys and the remainder capped at 17 ("more than
// 16"), all in one LSD radix sort, instead of 8 bytes and then a sort per group of equal first
// 8 bytes (at K = 100,000 tool names: 985 such groups, and the groups cost twice the first level).
struct KeyStr16 {
    uint64_t hi, lo;
    uint32_t rem, idx;
};

template <class T>
void sort_values16(T* a, size_t n, int64_t depth, Buf<uint8_t>* relocate) {
    Buf<KeyStr16> ks, tmp;
    if (relocate) ks.huge_min = tmp.huge_min = relocate->huge_min;
    if (!ks.resize(n) || !tmp.resize(n)) throw std::bad_alloc();
    uint64_t or_hi = 0, and_hi = ~uint64_t(0), or_lo = 0, and_lo = ~uint64_t(0);
    for (size_t i = 0; i < n; ++i) {
        const Str& x = skey(a[i]);
        uint32_t r1, r2 = 0;
        const uint64_t hi = key_at(x, depth, &r1);
        const uint64_t lo = r1 == 9 ? key_at(x, depth + 8, &r2) : 0;
        ks[i] = {hi, lo, r1 == 9 ? 8 + r2 : r1, static_cast<uint32_t>(i)};  // 0 .. 17
        or_hi |= hi;
        and_hi &= hi;
        or_lo |= lo;
        and_lo &= lo;
    }
    std::vector<size_t> cnt(2049);
    auto pass = [&](auto digit, size_t buckets) { lsd_pass(ks, tmp, n, digit, buckets, cnt); };
    pass([](const KeyStr16& k) { return static_cast<size_t>(k.rem); }, 18);
    const uint64_t vary_lo = or_lo ^ and_lo, vary_hi = or_hi ^ and_hi;
    for (int shift = 0; shift < 64; shift += 11)
        if ((vary_lo >> shift) & 0x7FF)
            pass([shift](const KeyStr16& k) { return static_cast<size_t>((k.lo >> shift) & 0x7FF); }, 2048);
    for (int shift = 0; shift < 64; shift += 11)
        if ((vary_hi >> shift) & 0x7FF)
            pass([shift](const KeyStr16& k) { return static_cast<size_t>((k.hi >> shift) & 0x7FF); }, 2048);
    { Buf<KeyStr16> drop; std::swap(drop.p, tmp.p); std::swap(drop.mapped, tmp.mapped); }
    reorder(a, ks.p, n, relocate);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && ks[j].hi == ks[i].hi && ks[j].lo == ks[i].lo && ks[j].rem == ks[i].rem) ++j;
        if (j - i > 1 && ks[i].rem == 17) sort_values(a + i, j - i, depth + 16);
        i = j;
    }
}

// Stable: strings with equal bytes keep their input order (the token trie relies on it: equal
// bytes under several ids come out in ascending ids). ``relocate``: after ordering the first 8
// bytes, copy the strings into it in that order, so that the deeper levels (and everything after
// the sort) read memory in order.
template <class T>
void sort_values(T* a, size_t n, int64_t depth, Buf<uint8_t>* relocate) {
    if (n < 2) return;
    if (n <= 32 && !relocate) {  // whole remaining strings compared: no deeper levels
        // insertion sort (stable; std::stable_sort would allocate a buffer per group)
        auto less = [depth](const T& x0, const T& y0) {
            const Str& x = skey(x0);
            const Str& y = skey(y0);
            const int64_t dx = std::min(depth, x.n), dy = std::min(depth, y.n);
            return str_less(Str{x.p + dx, x.n - dx}, Str{y.p + dy, y.n - dy});
        };
        for (size_t i = 1; i < n; ++i) {
            T x = a[i];
            size_t j = i;
            for (; j > 0 && less(x, a[j - 1]); --j) a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    if (n >= WIDE_MIN) {
        size_t longer = 0;  // strings that go on past the next 8 bytes
        for (size_t i = 0; i < n; ++i) longer += skey(a[i]).n > depth + 8;
        if (2 * longer > n) {
            sort_values16(a, n, depth, relocate);
            return;
        }
    }
    Buf<KeyStr> ks, tmp;
    if (relocate) ks.huge_min = tmp.huge_min = relocate->huge_min;
    if (!ks.resize(n)) throw std::bad_alloc();
    for (size_t i = 0; i < n; ++i) {
        uint32_t rem;
        ks[i].key = key_at(skey(a[i]), depth, &rem);
        ks[i].rem = rem;
        ks[i].idx = static_cast<uint32_t>(i);
    }
    if (n > 64 && !tmp.resize(n)) throw std::bad_alloc();
    if (n < LSD_MIN) {
        sort_keys(ks.p, n, 56, tmp.p);
    } else {  // LSD radix: the remainder (least significant), then the key 11 bits at a time
        std::vector<size_t> cnt(2049);
        auto pass = [&](auto digit, size_t buckets) { lsd_pass(ks, tmp, n, digit, buckets, cnt); };
        pass([](const KeyStr& k) { return static_cast<size_t>(k.rem); }, 10);
        uint64_t all_or = 0, all_and = ~uint64_t(0);
        for (const KeyStr& k : ks) {
            all_or |= k.key;
            all_and &= k.key;
        }
        const uint64_t varying = all_or ^ all_and;  // digits where every key agrees are skipped
        for (int shift = 0; shift < 64; shift += 11) {
            if (((varying >> shift) & 0x7FF) == 0) continue;
            pass([shift](const KeyStr& k) { return static_cast<size_t>((k.key >> shift) & 0x7FF); }, 2048);
        }
    }
    reorder(a, ks.p, n, relocate);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && ks[j].key == ks[i].key && ks[j].rem == ks[i].rem) ++j;
        if (j - i > 1 && ks[i].rem == 9) sort_values(a + i, j - i, depth + 8);
        i = j;
    }
}

inline int64_t common_prefix(const Str& a, const Str& b) {
    const int64_t m = std::min(a.n, b.n);
    int64_t l = 0;
    while (l < m && a.p[l] == b.p[l]) ++l;
    return l;
}

// sort_values over two threads where the first bytes split the strings into two groups of at
// least a quarter each (each sorted, and relocated into its own buffer, on a thread of its
// own: together they are the sorted order); else sort_values itself. Stable as sort_values.
// Returns the first group's size (0: not split).
template <class T>
size_t sort_values_split(T* a, size_t n, Buf<uint8_t>* relocate, Buf<uint8_t>* relocate2, bool split) {
    size_t left = 0;
    if (split && n >= 64) {
        std::vector<size_t> cnt(258, 0);  // bucket 0: the empty string; b + 1: first byte b
        for (size_t i = 0; i < n; ++i) {
            const Str& x = skey(a[i]);
            cnt[x.n ? size_t(x.p[0]) + 1 : 0]++;
        }
        size_t best = 0, at = 0;  // the bucket boundary closest to half
        for (size_t b = 0; b <= 256; ++b) {
            at += cnt[b];
            const size_t d = at > n / 2 ? at - n / 2 : n / 2 - at;
            const size_t db = left > n / 2 ? left - n / 2 : n / 2 - left;
            if (b == 0 || d < db) {
                best = b;
                left = at;
            }
        }
        if (left < n / 4 || n - left < n / 4) left = 0;
        if (left) {
            Buf<T> tmp;
            tmp.huge_min = relocate->huge_min;
            if (!tmp.resize(n)) throw std::bad_alloc();
            size_t lo = 0, hi = left;
            for (size_t i = 0; i < n; ++i) {
                const Str& x = skey(a[i]);
                const size_t b = x.n ? size_t(x.p[0]) + 1 : 0;
                tmp[b <= best ? lo++ : hi++] = a[i];
            }
            std::copy(tmp.p, tmp.p + n, a);
        }
    }
    if (!left) {
        sort_values(a, n, 0, relocate);
        return 0;
    }
    std::atomic<bool> bad{false};
    const bool ran = run_chunks(2, [&](int64_t c) {
        try {
            if (c == 0)
                sort_values(a, left, 0, relocate);
            else
                sort_values(a + left, n - left, 0, relocate2);
        } catch (const std::bad_alloc&) {
            bad = true;
        }
    });
    if (!ran || bad) throw std::bad_alloc();
    return left;
}

}  // namespace trierouter
