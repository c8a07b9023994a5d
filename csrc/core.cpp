// trierouter._core: the compiled core of trierouter (compile, step, masks).
//
// One pass from values to the serving layout of a ChoiceSet:
//   values (str) -> UTF-8 bytes, sorted, deduplicated -> byte trie in preorder
//   -> for every node n, a walk down the trie in lockstep with a forward trie of the token bytes
//      (TokenTrie) emits every (n, token, child) with path(n) + bytes(token) == path(child):
//      the rows come out in node order, so the CSR is written as it is produced, each row sorted
//      by token id
//   -> row_ptr, tokens, children (uint16 offsets; 0xFFFF = END, 0xFFFE = far), far_pos,
//      far_child, ends, value_bytes, value_offsets: the arrays ChoiceSet saves and the numpy
//      reference builds, bit for bit.
// Serving (Core, MatcherBase) reads those arrays through the buffer protocol, so a memory-mapped
// file serves as well as a freshly compiled set. Nothing is built lazily.
//
// The C API directly (no binding library): METH_FASTCALL keeps a call near 30 ns.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <sys/mman.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#ifndef TRIEROUTER_SOURCE_HASH
#define TRIEROUTER_SOURCE_HASH "unknown"
#endif

namespace {

constexpr uint16_t TO_END = 0xFFFF;
constexpr uint16_t FAR = 0xFFFE;

// ------------------------------------------------------------------------------------------------
// Growable malloc'd array whose storage can be handed to numpy (freed by a capsule).

// Large blocks are mapped directly and marked for transparent huge pages: a compile writes tens
// of MB into fresh memory, and with 4 KB pages the page faults cost more than the work
// (measured: 87 ms against 105 ms of CPU at K = 100,000; on this VM a 4 KB fault costs ~3 us).
// TRIEROUTER_NO_HUGEPAGES=1 turns the advice off.
constexpr size_t HUGE_PAGE = size_t(2) << 20;

// The mapping of a block of ``bytes`` (0: malloc'd): 2 MB multiples, so that every page of it
// can be a huge page (one fault instead of 512; faults are expensive on virtual machines).
// Blocks from ``min`` bytes: 4 MB for a compile's arrays (smaller ones stay with malloc, which
// reuses freed memory without new faults from one compile to the next), 1 MB for the token
// trie, built once per process.
inline size_t big_mapping(size_t bytes, size_t min) {
    if (bytes < min) return 0;
    if (min >= 2 * HUGE_PAGE) return (bytes + 4095) & ~size_t(4095);  // a compile's outputs: the
    // whole 2 MB blocks inside get huge pages, the ends 4 KB pages (no RSS past the array)
    return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

// ``pages_from``: below ``min``, blocks from this size are mapped too, in 4 KB pages (a compact
// set's arrays: from malloc's heap, the freed arrays of earlier compiles stayed in the RSS).
void* big_alloc(size_t bytes, size_t* mapped, size_t min = 2 * HUGE_PAGE, size_t pages_from = SIZE_MAX) {
    if (bytes < min && bytes >= pages_from) {
        const size_t size = (bytes + 4095) & ~size_t(4095);
        void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        *mapped = size;
        return p;
    }
    const size_t size = big_mapping(bytes, min);
    if (size && min >= 2 * HUGE_PAGE) {
        void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
        static const bool huge = std::getenv("TRIEROUTER_NO_HUGEPAGES") == nullptr;
        if (huge) madvise(p, size, MADV_HUGEPAGE);
#endif
        *mapped = size;
        return p;
    }
    if (size) {
        // map one huge page more, keep the 2 MB aligned part
        uint8_t* raw = static_cast<uint8_t*>(
            mmap(nullptr, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (raw == MAP_FAILED) return nullptr;
        const uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + HUGE_PAGE - 1) & ~uintptr_t(HUGE_PAGE - 1);
        uint8_t* p = reinterpret_cast<uint8_t*>(a);
        if (p > raw) munmap(raw, static_cast<size_t>(p - raw));
        if (raw + size + HUGE_PAGE > p + size) munmap(p + size, static_cast<size_t>(raw + size + HUGE_PAGE - (p + size)));
#ifdef MADV_HUGEPAGE
        static const bool huge = std::getenv("TRIEROUTER_NO_HUGEPAGES") == nullptr;
        if (huge) madvise(p, size, MADV_HUGEPAGE);
#endif
        *mapped = size;
        return p;
    }
    *mapped = 0;
    return std::malloc(bytes ? bytes : 1);
}

void big_free(void* p, size_t mapped) {
    if (!p) return;
    if (mapped) munmap(p, mapped);
    else std::free(p);
}

template <class T>
struct Buf {
    T* p = nullptr;
    size_t n = 0, cap = 0, mapped = 0;
    size_t huge_min = 2 * HUGE_PAGE;  // blocks from this size get huge pages (big_alloc)
    size_t pages_from = SIZE_MAX;     // and from this size, below huge_min, 4 KB pages
    Buf() = default;
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    ~Buf() { big_free(p, mapped); }
    bool reserve(size_t c) {
        if (c <= cap) return true;
        size_t nc = std::max(c, cap * 2 + 16);
        size_t m;
        T* q = static_cast<T*>(big_alloc(nc * sizeof(T), &m, huge_min, pages_from));
        if (!q) return false;
        if (n) std::memcpy(static_cast<void*>(q), p, n * sizeof(T));
        big_free(p, mapped);
        p = q;
        cap = nc;
        mapped = m;
        return true;
    }
    bool resize(size_t c) {
        if (!reserve(c)) return false;
        n = c;
        return true;
    }
    bool assign(size_t c, T v) {
        if (!resize(c)) return false;
        std::fill(p, p + c, v);
        return true;
    }
    inline bool push(T v) {
        if (n == cap && !reserve(n + 1)) return false;
        p[n++] = v;
        return true;
    }
    void release() {  // frees the storage now (the pages go back before the next allocation)
        big_free(p, mapped);
        p = nullptr;
        n = cap = mapped = 0;
    }
    T& operator[](size_t i) { return p[i]; }
    const T& operator[](size_t i) const { return p[i]; }
    T* data() { return p; }
    size_t size() const { return n; }
    T* begin() { return p; }
    T* end() { return p + n; }
};

// std::vector storage through big_alloc (huge pages for large blocks, as Buf), and elements
// default-initialized: ``BigVec<int32_t>(n)`` leaves them unwritten (no pass zeroing fresh
// memory that is filled right after); pass a value to fill.
constexpr size_t BIG_VEC_MIN = size_t(1) << 20;

template <class T>
struct BigAllocator {
    using value_type = T;
    BigAllocator() = default;
    template <class U>
    BigAllocator(const BigAllocator<U>&) {}
    T* allocate(size_t n) {
        size_t m;
        if constexpr (alignof(T) > alignof(std::max_align_t)) {
            // a small block comes from malloc, aligned for max_align_t only (StateInfo needs 32:
            // found by the UndefinedBehaviorSanitizer build on a small vocabulary)
            if (!big_mapping(n * sizeof(T), BIG_VEC_MIN)) {
                const size_t bytes = (n * sizeof(T) + alignof(T) - 1) & ~(alignof(T) - 1);
                void* p = std::aligned_alloc(alignof(T), bytes ? bytes : alignof(T));
                if (!p) throw std::bad_alloc();
                return static_cast<T*>(p);  // freed by big_free (std::free) like the rest
            }
        }
        void* p = big_alloc(n * sizeof(T), &m, BIG_VEC_MIN);
        if (!p) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t n) {
        big_free(p, big_mapping(n * sizeof(T), BIG_VEC_MIN));  // decided by the size alone
    }
    template <class U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... A>
    void construct(U* p, A&&... a) {
        ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
    }
    template <class U>
    bool operator==(const BigAllocator<U>&) const { return true; }
    template <class U>
    bool operator!=(const BigAllocator<U>&) const { return false; }
};
template <class T>
using BigVec = std::vector<T, BigAllocator<T>>;

void free_capsule(PyObject* cap) {
    big_free(PyCapsule_GetPointer(cap, "trierouter.buf"),
             reinterpret_cast<size_t>(PyCapsule_GetContext(cap)));
}

// Hands the storage of ``b`` to a new numpy array (no copy): 1-D, or 2-D of ``cols`` columns.
template <class T>
PyObject* to_numpy(Buf<T>& b, int typenum, int64_t cols = 0) {
    if (!b.p && !b.reserve(1)) return PyErr_NoMemory();
    npy_intp dims[2] = {static_cast<npy_intp>(cols > 0 ? b.n / static_cast<size_t>(cols) : b.n),
                        static_cast<npy_intp>(cols)};
    PyObject* arr = PyArray_SimpleNewFromData(cols > 0 ? 2 : 1, dims, typenum, b.p);
    if (!arr) return nullptr;
    PyObject* cap = PyCapsule_New(b.p, "trierouter.buf", free_capsule);
    if (!cap || PyCapsule_SetContext(cap, reinterpret_cast<void*>(b.mapped)) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(arr);
        return nullptr;
    }
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), cap) < 0) {
        Py_DECREF(arr);
        return nullptr;
    }
    b.p = nullptr;
    b.n = b.cap = b.mapped = 0;
    return arr;
}

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
void sort_keys(KeyStr* a, size_t n, int shift, KeyStr* tmp) {
    while (n > 64 && shift >= 0) {
        size_t count[256] = {0};
        for (size_t i = 0; i < n; ++i) count[(a[i].key >> shift) & 0xFF]++;
        const uint64_t first = (a[0].key >> shift) & 0xFF;
        if (count[first] == n) {  // every key has this byte: the next one
            shift -= 8;
            continue;
        }
        size_t start[256], pos[256];
        size_t at = 0;
        for (int b = 0; b < 256; ++b) {
            start[b] = pos[b] = at;
            at += count[b];
        }
        for (size_t i = 0; i < n; ++i) tmp[pos[(a[i].key >> shift) & 0xFF]++] = a[i];
        std::memcpy(static_cast<void*>(a), tmp, n * sizeof(KeyStr));
        for (int b = 0; b < 256; ++b)
            if (count[b] > 1) sort_keys(a + start[b], count[b], shift - 8, tmp + start[b]);
        return;
    }
    std::sort(a, a + n, key_less);
}

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

struct TokenTrieObject {
    PyObject_HEAD
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
    explicit TT(const TokenTrieObject* t)
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

void TokenTrie_dealloc(TokenTrieObject* self) {
    delete self->child_ptr;
    delete self->child_node;
    delete self->child_label;
    delete self->tok_ptr;
    delete self->tok_ids;
    delete self->fail;
    delete self->dict;
    delete self->depth;
    delete self->d1row;
    delete self->goto1;
    delete self->info;
    delete self->outs;
    delete self->shape;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

double now_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// TRIEROUTER_CORE_TIMING=1: thread CPU time per phase on stderr (profiling aid)
struct Lap {
    bool on = std::getenv("TRIEROUTER_CORE_TIMING") != nullptr;
    double last = cpu();
    static double cpu() {
        struct timespec c;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
        return 1e3 * static_cast<double>(c.tv_sec) + 1e-6 * static_cast<double>(c.tv_nsec);
    }
    long faults = minflt();
    static long minflt() {  // page faults of the process so far (a huge page counts once)
        struct rusage u;
        getrusage(RUSAGE_SELF, &u);
        return u.ru_minflt;
    }
    void mark(const char* name) {
        if (!on) return;
        const double t = cpu();
        const long f = minflt();
        std::fprintf(stderr, "core: %-10s %8.2f ms cpu %6ld faults\n", name, t - last, f - faults);
        last = t;
        faults = f;
    }
};

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

inline int64_t common_prefix(const Str& a, const Str& b) {
    const int64_t m = std::min(a.n, b.n);
    int64_t l = 0;
    while (l < m && a.p[l] == b.p[l]) ++l;
    return l;
}

inline int64_t chunk_count(int64_t nv, int64_t threads, int64_t split_min) {
    if (threads <= 1 || split_min <= 0) return 1;
    return std::max<int64_t>(1, std::min<int64_t>({threads, nv / split_min, 64}));
}

// Chunk boundaries near an even split, each where the value's common prefix with the previous
// one is shortest within a window (fewer shared ancestors); ``chunks[c].b`` and ``.e`` are set.
void plan_chunks(std::vector<Chunk>& chunks, const int32_t* lcps, size_t nv) {
    const size_t n = chunks.size(), w = nv / (8 * n);
    size_t prev = 0;
    for (size_t c = 1; c < n; ++c) {
        const size_t ideal = nv * c / n;
        size_t best = ideal;
        for (size_t i = ideal - w; i <= ideal + w; ++i) {
            const bool shorter = lcps[i] < lcps[best];
            const size_t di = i > ideal ? i - ideal : ideal - i, db = best > ideal ? best - ideal : ideal - best;
            if (shorter || (lcps[i] == lcps[best] && di < db)) best = i;
        }
        chunks[c - 1].b = prev;
        chunks[c - 1].e = best;
        prev = best;
    }
    chunks[n - 1].b = prev;
    chunks[n - 1].e = nv;
}

// fn(c) for c in 0 .. n - 1: chunk 0 on the calling thread, the others on threads of their own
// (where a thread cannot start, its chunk runs here after). False if some chunk threw.
template <class F>
bool run_chunks(int64_t n, F&& fn) {
    std::atomic<bool> ok{true};
    auto body = [&](int64_t c) {
        try {
            fn(c);
        } catch (...) {
            ok = false;
        }
    };
    std::vector<std::thread> ts;
    try {
        for (int64_t c = 1; c < n; ++c) ts.emplace_back(body, c);
    } catch (...) {
    }
    body(0);
    for (auto& t : ts) t.join();
    for (int64_t c = static_cast<int64_t>(ts.size()) + 1; c < n; ++c) body(c);
    return ok;
}

// The compact layout's rule, shared by compile and compact_layout: key i's nodes from depth
// out[i] on have at most max_keys keys below them. Node (i, d) has that many iff
// i + max_keys >= n or some key in (i, i + max_keys] shares fewer than d bytes with its
// predecessor: a sliding minimum of lcp (lcp[i]: key i's common prefix with key i - 1).
void walked_depths(const int32_t* lcp, int64_t n, int64_t max_keys, int32_t* out) {
    std::vector<int64_t> dq;  // indices of increasing lcp over the window (i, i + max_keys]
    size_t head = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
        // i + 1 enters, indices past i + max_keys leave (the oldest, at the head); an entry whose
        // lcp is not below the newcomer's can never be the minimum again
        if (i + 1 < n) {
            while (dq.size() > head && lcp[dq.back()] >= lcp[i + 1]) dq.pop_back();
            dq.push_back(i + 1);
        }
        while (dq.size() > head && dq[head] > i + max_keys) ++head;
        const int64_t thr = (i + max_keys >= n) ? -1 : lcp[dq[head]];
        out[i] = static_cast<int32_t>(std::max<int64_t>(lcp[i] + 1, thr + 1));
    }
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

// The CPUs this process may run on (sched_getaffinity; 1 if unknown).
inline int64_t available_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
    return std::max(1, CPU_COUNT(&set));
}

// TokenTrie(tokens: sequence of bytes, matchable: bool buffer of len(tokens))
int TokenTrie_init(TokenTrieObject* self, PyObject* args, PyObject* kwds) {
    static const char* kwlist[] = {"tokens", "matchable", nullptr};
    PyObject* tokens;
    Py_buffer mview;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*", const_cast<char**>(kwlist), &tokens,
                                     &mview))
        return -1;
    double t0 = now_seconds();
    Lap lap;
    delete self->shape;  // built again on first use
    self->shape = nullptr;
    PyObject* seq = PySequence_Tuple(tokens);
    if (!seq) {
        PyBuffer_Release(&mview);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    self->n_ids = static_cast<int32_t>(std::min<Py_ssize_t>(n, INT32_MAX));
    if (mview.len != n) {
        PyErr_Format(PyExc_ValueError, "matchable has %zd entries for %zd tokens", mview.len, n);
        PyBuffer_Release(&mview);
        Py_DECREF(seq);
        return -1;
    }
    const uint8_t* match = static_cast<const uint8_t*>(mview.buf);
    BigVec<Ent> ents;
    ents.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!match[i]) continue;
        PyObject* o = PyTuple_GET_ITEM(seq, i);
        if (!PyBytes_Check(o)) {
            PyErr_Format(PyExc_TypeError, "tokens[%zd] is not bytes", i);
            PyBuffer_Release(&mview);
            Py_DECREF(seq);
            return -1;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        if (len == 0) continue;
        ents.push_back(
            {{reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(o)), len}, static_cast<int32_t>(i)});
    }
    PyBuffer_Release(&mview);
    lap.mark("collect");
    // the token bytes in sorted order, read by the trie build below (two buffers where the sort
    // ran in two threads)
    Buf<uint8_t> relocated, relocated2;
    relocated.huge_min = relocated2.huge_min = BIG_VEC_MIN;  // the sort's buffers too
    try {
        sort_values_split(ents.data(), ents.size(), &relocated, &relocated2,
                          available_cpus() > 1 && ents.size() >= 2 * SPLIT_MIN);
    } catch (const std::bad_alloc&) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    lap.mark("sort");
    // preorder trie: path[d] = node at depth d on the previous string's path
    size_t total_bytes = 0;
    for (const Ent& e : ents) total_bytes += static_cast<size_t>(e.s.n);
    BigVec<int32_t> parent, end_node(ents.size());
    std::vector<int32_t> path{0};
    BigVec<uint8_t> byte;
    auto* depth = new BigVec<int32_t>;
    parent.reserve(total_bytes + 1);
    byte.reserve(total_bytes + 1);
    depth->reserve(total_bytes + 1);
    parent.push_back(-1);
    byte.push_back(0);
    depth->push_back(0);
    Str prev{nullptr, 0};
    for (size_t i = 0; i < ents.size(); ++i) {
        const Str& s = ents[i].s;
        const int64_t l = common_prefix(prev, s);
        path.resize(static_cast<size_t>(l) + 1);
        for (int64_t d = l; d < s.n; ++d) {
            int32_t id = static_cast<int32_t>(parent.size());
            parent.push_back(path[static_cast<size_t>(d)]);
            byte.push_back(s.p[d]);
            depth->push_back(static_cast<int32_t>(d + 1));
            path.push_back(id);
        }
        end_node[i] = path[static_cast<size_t>(s.n)];
        prev = s;
    }
    Py_DECREF(seq);  // the token bytes are not used past this point
    const int32_t nn = static_cast<int32_t>(parent.size());
    const size_t un = static_cast<size_t>(nn);
    self->n_nodes = nn;
    auto* cptr = new BigVec<int32_t>(un + 1, 0);
    auto* cnode = new BigVec<int32_t>(un - 1);
    auto* clab = new BigVec<uint8_t>(un - 1);
    for (size_t v = 1; v < un; ++v) (*cptr)[static_cast<size_t>(parent[v]) + 1]++;
    for (size_t v = 0; v < un; ++v) (*cptr)[v + 1] += (*cptr)[v];
    {
        BigVec<int32_t> fill(cptr->begin(), cptr->end() - 1);
        for (size_t v = 1; v < un; ++v) {  // preorder: children in byte order
            int32_t at = fill[static_cast<size_t>(parent[v])]++;
            (*cnode)[static_cast<size_t>(at)] = static_cast<int32_t>(v);
            (*clab)[static_cast<size_t>(at)] = byte[v];
        }
    }
    auto* tptr = new BigVec<int32_t>(un + 1, 0);
    auto* tids = new BigVec<int32_t>(ents.size());
    for (size_t i = 0; i < ents.size(); ++i) (*tptr)[static_cast<size_t>(end_node[i]) + 1]++;
    for (size_t v = 0; v < un; ++v) (*tptr)[v + 1] += (*tptr)[v];
    {
        BigVec<int32_t> fill(tptr->begin(), tptr->end() - 1);
        for (size_t i = 0; i < ents.size(); ++i)
            (*tids)[static_cast<size_t>(fill[static_cast<size_t>(end_node[i])]++)] = ents[i].id;
    }
    for (int k = 0; k < 256; ++k) {
        self->root_child[k] = -1;
        self->single[k] = 0;
    }
    for (int32_t i = (*cptr)[0]; i < (*cptr)[1]; ++i) {
        int32_t v = (*cnode)[static_cast<size_t>(i)];
        self->root_child[(*clab)[static_cast<size_t>(i)]] = v;
        if ((*tptr)[static_cast<size_t>(v) + 1] > (*tptr)[static_cast<size_t>(v)])
            self->single[(*clab)[static_cast<size_t>(i)]] = 1;
    }
    lap.mark("trie");
    // Aho-Corasick links, computed over a breadth-first numbering of the states (depth, then
    // preorder): the children of a state are then consecutive numbers, so a state is its first
    // child's number, its label and its link (9 bytes, 3 MB at 333K states) and the shallow
    // states that most links lead to sit together. Mapped back to preorder ids at the end.
    BigVec<int32_t> order(un), bfs_of(un);
    int32_t maxd = 0;
    for (size_t v = 0; v < un; ++v) maxd = std::max(maxd, (*depth)[v]);
    {
        std::vector<int32_t> cnt(static_cast<size_t>(maxd) + 2, 0);
        for (size_t v = 0; v < un; ++v) cnt[static_cast<size_t>((*depth)[v]) + 1]++;
        for (size_t d = 0; d + 1 < cnt.size(); ++d) cnt[d + 1] += cnt[d];
        for (size_t v = 0; v < un; ++v) {
            const int32_t x = cnt[static_cast<size_t>((*depth)[v])]++;
            order[static_cast<size_t>(x)] = static_cast<int32_t>(v);
            bfs_of[v] = x;
        }
    }
    const int32_t n1 = (*cptr)[1] - (*cptr)[0];  // depth-1 states: breadth-first ids 1..n1
    BigVec<int32_t> bclo(un + 1), bfail(un, 0), bdict(un, -1), bntok(un);
    BigVec<uint8_t> bbyte(un);
    {
        int32_t at = 1;
        for (size_t x = 0; x < un; ++x) {
            const size_t v = static_cast<size_t>(order[x]);
            bclo[x] = at;
            at += (*cptr)[v + 1] - (*cptr)[v];
            bbyte[x] = byte[v];
            bntok[x] = (*tptr)[v + 1] - (*tptr)[v];
        }
        bclo[un] = at;
    }
    std::vector<int32_t> bgoto1(static_cast<size_t>(n1 + 1) * 256, 0);
    for (int32_t y = bclo[0]; y < bclo[1]; ++y) bgoto1[bbyte[static_cast<size_t>(y)]] = y;
    auto bchild = [&](int32_t u, uint8_t b) -> int32_t {
        const int32_t lo = bclo[static_cast<size_t>(u)], len = bclo[static_cast<size_t>(u) + 1] - lo;
        const uint8_t* l = bbyte.data() + lo;
        if (len <= 16) {
            for (int32_t i = 0; i < len; ++i)
                if (l[i] == b) return lo + i;
            return -1;
        }
        const void* f = std::memchr(l, b, static_cast<size_t>(len));
        return f ? lo + static_cast<int32_t>(static_cast<const uint8_t*>(f) - l) : -1;
    };
    for (int32_t u = 0; u < static_cast<int32_t>(un); ++u) {
        const int32_t lo = bclo[static_cast<size_t>(u)], hi = bclo[static_cast<size_t>(u) + 1];
        if (lo == hi) continue;
        const uint8_t* l = bbyte.data() + lo;
        for (int32_t y = lo; y < hi; ++y) {
            const size_t uy = static_cast<size_t>(y);
            int32_t f = 0;
            if (u != 0) {  // fail(y) = go(fail(u), byte(y)); depth-1 states fail to the root
                int32_t st = bfail[static_cast<size_t>(u)];
                const uint8_t b = l[y - lo];
                for (;;) {
                    if (st <= n1) {
                        f = bgoto1[(static_cast<size_t>(st) << 8) | b];
                        break;
                    }
                    const int32_t c = bchild(st, b);
                    if (c >= 0) {
                        f = c;
                        break;
                    }
                    st = bfail[static_cast<size_t>(st)];
                }
            }
            bfail[uy] = f;
            bdict[uy] = f != 0 && bntok[static_cast<size_t>(f)] > 0 ? f : bdict[static_cast<size_t>(f)];
            if (y <= n1) {  // a depth-1 state: its full transition row (its failure is the root)
                int32_t* row = bgoto1.data() + (static_cast<size_t>(y) << 8);
                std::memcpy(row, bgoto1.data(), 256 * sizeof(int32_t));
                for (int32_t c = bclo[uy]; c < bclo[uy + 1]; ++c) row[bbyte[static_cast<size_t>(c)]] = c;
            }
        }
    }
    lap.mark("links");
    // back to preorder ids
    auto* fail = new BigVec<int32_t>(un);
    auto* dict = new BigVec<int32_t>(un);
    auto* d1row = new BigVec<int32_t>(un, -1);
    auto* goto1 = new BigVec<int32_t>(bgoto1.size());
    for (size_t x = 0; x < un; ++x) {
        const size_t v = static_cast<size_t>(order[x]);
        (*fail)[v] = order[static_cast<size_t>(bfail[x])];
        (*dict)[v] = bdict[x] >= 0 ? order[static_cast<size_t>(bdict[x])] : -1;
    }
    for (size_t i = 0; i < bgoto1.size(); ++i) (*goto1)[i] = order[static_cast<size_t>(bgoto1[i])];
    for (int32_t x = 0; x <= n1; ++x) (*d1row)[static_cast<size_t>(order[static_cast<size_t>(x)])] = x;
    self->child_ptr = cptr;
    self->child_node = cnode;
    self->child_label = clab;
    self->tok_ptr = tptr;
    self->tok_ids = tids;
    self->fail = fail;
    self->dict = dict;
    self->depth = depth;
    self->d1row = d1row;
    self->goto1 = goto1;
    // flattened outputs per state: the tokens of the state, then of its dictionary chain. The
    // tokens of each state as (length, id) in breadth-first order first: the chains lead to
    // shallow states, whose entries then sit together at the front; the outputs are written in
    // preorder, in one sequential pass.
    BigVec<int32_t> bown_ptr(un + 1);
    BigVec<Out> bown(ents.size());
    {
        size_t at = 0;
        for (size_t x = 0; x < un; ++x) {
            bown_ptr[x] = static_cast<int32_t>(at);
            const size_t v = static_cast<size_t>(order[x]);
            const int32_t dv = (*depth)[v];
            for (int32_t j = (*tptr)[v]; j < (*tptr)[v + 1]; ++j) bown[at++] = {dv, (*tids)[static_cast<size_t>(j)]};
        }
        bown_ptr[un] = static_cast<int32_t>(at);
    }
    BigVec<int32_t> bolen(un, 0);  // outputs per state: own tokens + those of its dict state
    size_t total = 0;
    for (size_t x = 0; x < un; ++x) {
        bolen[x] = bntok[x] + (bdict[x] >= 0 ? bolen[static_cast<size_t>(bdict[x])] : 0);
        total += static_cast<size_t>(bolen[x]);
    }
    lap.mark("spans");
    auto* info = new BigVec<StateInfo>(un);
    auto* outs = new BigVec<Out>(total);
    self->info = info;
    self->outs = outs;
    {
        Out* o = outs->data();
        const Out* own = bown.data();
        for (size_t v = 0; v < un; ++v) {
            const int32_t olo = static_cast<int32_t>(o - outs->data());
            const size_t x = static_cast<size_t>(bfs_of[v]);
            for (int32_t c = bntok[x] > 0 ? static_cast<int32_t>(x) : bdict[x]; c >= 0; c = bdict[static_cast<size_t>(c)]) {
                const size_t uc = static_cast<size_t>(c);
                for (int32_t j = bown_ptr[uc]; j < bown_ptr[uc + 1]; ++j) *o++ = own[j];
            }
            (*info)[v] = {(*cptr)[v], (*cptr)[v + 1], (*fail)[v], (*d1row)[v], olo, static_cast<int32_t>(o - outs->data()), (*dict)[v], 0};
            self->max_span = std::max(self->max_span, (*info)[v].ohi - olo);
        }
    }
    lap.mark("outputs");
    self->build_seconds = now_seconds() - t0;
    return 0;
}

PyObject* TokenTrie_nbytes(TokenTrieObject* self, void*) {
    size_t b = 4 * (self->child_ptr->size() + self->child_node->size() + self->tok_ptr->size() +
                    self->tok_ids->size() + self->fail->size() + self->dict->size() +
                    self->depth->size() + self->d1row->size() + self->goto1->size()) +
               sizeof(StateInfo) * self->info->size() + sizeof(Out) * self->outs->size() +
               self->child_label->size() + sizeof(TokenTrieObject);
    return PyLong_FromSize_t(b);
}
PyObject* TokenTrie_n_nodes(TokenTrieObject* self, void*) { return PyLong_FromLong(self->n_nodes); }
PyObject* TokenTrie_build_seconds(TokenTrieObject* self, void*) {
    return PyFloat_FromDouble(self->build_seconds);
}
PyObject* TokenTrie_single(TokenTrieObject* self, void*) {
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(self->single), 256);
}

struct Named {
    const char* name;
    PyObject* obj;
};

// A dict of the items, taking their references; nullptr when one is missing or on an error.
template <size_t N>
PyObject* dict_of(Named (&items)[N]) {
    PyObject* d = PyDict_New();
    bool fail = d == nullptr;
    for (auto& it : items) {
        if (!fail && (!it.obj || PyDict_SetItemString(d, it.name, it.obj) < 0)) fail = true;
        Py_XDECREF(it.obj);
    }
    if (fail) {
        Py_XDECREF(d);
        return nullptr;
    }
    return d;
}

template <class V>
PyObject* vec_bytes(const V* v) {
    if (!v) return PyBytes_FromStringAndSize(nullptr, 0);
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(v->data()),
                                     static_cast<Py_ssize_t>(v->size() * sizeof((*v)[0])));
}

// tables() -> dict[str, bytes]: every array of the trie (native byte order), for tests that
// check the structure against an independent construction
PyObject* TokenTrie_tables(TokenTrieObject* self, PyObject*) {
    Named items[] = {
        {"child_ptr", vec_bytes(self->child_ptr)}, {"child_node", vec_bytes(self->child_node)},
        {"child_label", vec_bytes(self->child_label)}, {"tok_ptr", vec_bytes(self->tok_ptr)},
        {"tok_ids", vec_bytes(self->tok_ids)},       {"fail", vec_bytes(self->fail)},
        {"dict", vec_bytes(self->dict)},             {"depth", vec_bytes(self->depth)},
        {"d1row", vec_bytes(self->d1row)},           {"goto1", vec_bytes(self->goto1)},
        {"info", vec_bytes(self->info)},             {"outs", vec_bytes(self->outs)},
        {"root_child", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(self->root_child),
                                                 sizeof(self->root_child))},
        {"single", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(self->single), 256)},
    };
    return dict_of(items);
}

PyMethodDef TokenTrie_methods[] = {
    {"tables", reinterpret_cast<PyCFunction>(TokenTrie_tables), METH_NOARGS,
     "every array of the trie as bytes (native byte order), by name"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef TokenTrie_getset[] = {
    {"nbytes", reinterpret_cast<getter>(TokenTrie_nbytes), nullptr, "bytes held", nullptr},
    {"n_nodes", reinterpret_cast<getter>(TokenTrie_n_nodes), nullptr, "trie nodes", nullptr},
    {"build_seconds", reinterpret_cast<getter>(TokenTrie_build_seconds), nullptr, "build time",
     nullptr},
    {"single_byte", reinterpret_cast<getter>(TokenTrie_single), nullptr,
     "256 bytes: 1 where a matchable token is exactly that byte", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject TokenTrieType = {PyVarObject_HEAD_INIT(nullptr, 0)};

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
    explicit Spans(const TokenTrieObject* t)
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

// compile(values, trie, terminator: bytes, end_ids: tuple[int], allow_end: bool, max_keys=0,
//         threads=1, split_min=SPLIT_MIN)
//   -> (arrays: dict[str, ndarray], unreachable: list[int] | None)
// On a value that is not a str or not encodable, raises TypeError / UnicodeEncodeError (the
// Python caller turns them into the documented errors). threads > 1: the trie pass and the rows'
// pass run in up to that many chunks of at least split_min values each (the same arrays).
PyObject* py_compile(PyObject*, PyObject* args) {
    Lap lap;
#define LAP(name) lap.mark(name)
    PyObject* values;
    TokenTrieObject* tri;
    Py_buffer term;
    PyObject* end_ids;
    int allow_end;
    long long max_keys = 0;  // > 0: the compact layout (see compact_layout), where no row is pruned
    long long threads = 1, split_min = SPLIT_MIN;  // chunks of >= split_min values, one a thread
    if (!PyArg_ParseTuple(args, "OO!y*Op|LLL", &values, &TokenTrieType, &tri, &term, &end_ids,
                          &allow_end, &max_keys, &threads, &split_min))
        return nullptr;
    std::string termb(static_cast<const char*>(term.buf), static_cast<size_t>(term.len));
    PyBuffer_Release(&term);
    std::vector<int32_t> eos;
    {
        PyObject* s = PySequence_Fast(end_ids, "end_ids must be a sequence of ints");
        if (!s) return nullptr;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(s); ++i) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(s, i));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(s);
                return nullptr;
            }
            eos.push_back(static_cast<int32_t>(v));
        }
        Py_DECREF(s);
        std::sort(eos.begin(), eos.end());
        eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
    }
    // a tuple of our own: the str objects stay alive while the GIL is released below
    PyObject* seq = PySequence_Tuple(values);
    if (!seq) return nullptr;
    Py_ssize_t k = PyTuple_GET_SIZE(seq);
    PyObject** items = &PyTuple_GET_ITEM(seq, 0);
    Buf<Str> strs;
    Buf<uint8_t> joined;  // the values (+ terminator) in one buffer
    // temporaries from 1 MB are mapped apart and returned when freed: from malloc's heap they
    // would stay in the process's RSS after the compile
    strs.huge_min = joined.huge_min = BIG_VEC_MIN;
    if (!strs.resize(static_cast<size_t>(k))) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    const int64_t tl = static_cast<int64_t>(termb.size());
    std::vector<int64_t> offs;
    for (Py_ssize_t i = 0; i < k; ++i) {
        PyObject* o = items[i];
        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "values[%zd] is not a str", i);
            Py_DECREF(seq);
            return nullptr;
        }
        Py_ssize_t len;
        const char* p = PyUnicode_AsUTF8AndSize(o, &len);
        if (!p) {
            Py_DECREF(seq);
            return nullptr;
        }
        strs[static_cast<size_t>(i)] = {reinterpret_cast<const uint8_t*>(p), len};
    }
    {
        // one contiguous copy (values + terminator) in input order: the sort and the trie then
        // read one buffer instead of objects spread over the heap
        size_t total = 0;
        for (auto& s : strs) total += static_cast<size_t>(s.n + tl);
        if (!joined.resize(total + 1)) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        size_t at = 0;
        for (auto& s : strs) {
            if (s.n) std::memcpy(joined.data() + at, s.p, static_cast<size_t>(s.n));
            if (tl) std::memcpy(joined.data() + at + s.n, termb.data(), static_cast<size_t>(tl));
            s = {joined.data() + at, s.n + tl};
            at += static_cast<size_t>(s.n);
        }
    }
    // values stay alive (seq holds them) until the end of this function
    LAP("collect");
    PyThreadState* save = PyEval_SaveThread();
    Buf<uint8_t> relocated, relocated2;  // the strings in sorted order (when they were not)
    relocated.huge_min = relocated2.huge_min = BIG_VEC_MIN;
    bool sorted = true;
    for (size_t i = 1; i < strs.size() && sorted; ++i)
        if (str_less(strs[i], strs[i - 1])) sorted = false;
    if (!sorted) {
        size_t split_at = 0;
        try {
            const bool split = chunk_count(static_cast<int64_t>(strs.size()), threads, split_min) > 1;
            split_at = sort_values_split(strs.data(), strs.size(), &relocated, &relocated2, split);
        } catch (const std::bad_alloc&) {
            PyEval_RestoreThread(save);
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        // the strings are read from ``relocated`` (and ``relocated2``, when split) now
        if (relocated.p && (relocated2.p || !split_at)) joined.release();
    }
    {
        size_t w = 0;
        for (size_t i = 0; i < strs.size(); ++i)
            if (w == 0 || !str_eq(strs[i], strs[w - 1])) strs[w++] = strs[i];
        strs.n = w;
    }
    const size_t nv = strs.size();
    LAP("sort");
    const int64_t n_chunks = chunk_count(static_cast<int64_t>(nv), threads, split_min);
    Buf<int32_t> lcps;
    // each value's common prefix with the previous one, in the chunks' threads (for the compact
    // layout's rule, or to plan the chunks; one thread alone computes them in the trie pass)
    auto fill_lcps = [&]() {
        return run_chunks(n_chunks, [&](int64_t c) {
            const size_t b = static_cast<size_t>(nv * c / n_chunks), e = static_cast<size_t>(nv * (c + 1) / n_chunks);
            for (size_t i = b; i < e; ++i) lcps[i] = static_cast<int32_t>(i ? common_prefix(strs[i - 1], strs[i]) : 0);
        });
    };
    // The compact layout: each key's common prefix with the previous one first, then the depth
    // from which the nodes a key adds have at most max_keys keys below (compact_layout's rule);
    // their rows are neither counted nor written. Not where a byte has no single-byte token: the
    // pruning below needs every row (the layout is then derived from the full one).
    Buf<int32_t> walk_from;
    Buf<uint8_t> walked;
    bool compact = max_keys > 0;
    // a compact set's arrays (and its temporaries) get pages of their own from 64 KB: freed, they
    // go back at once, where malloc's heap kept them (RSS 6 -> 14 MB over 4 compiles at 100,000)
    constexpr size_t PAGES_FROM = size_t(64) << 10;
    if (compact) {
        uint8_t seen[256] = {0};
        for (auto& s : strs)
            for (int64_t q = 0; q < s.n; ++q) seen[s.p[q]] = 1;
        for (int b = 0; b < 256; ++b) compact = compact && !(seen[b] && !tri->single[b]);
    }
    if (compact) {
        lcps.pages_from = walk_from.pages_from = walked.pages_from = PAGES_FROM;
        if (!lcps.resize(nv) || !walk_from.resize(nv) || !fill_lcps()) {
            PyEval_RestoreThread(save);
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        walked_depths(lcps.p, static_cast<int64_t>(nv), max_keys, walk_from.p);
    }
    // Trie in preorder, built string by string (path[d]: node at depth d on the current string),
    // and at once the Aho-Corasick state of every node (st[d] on the path): the tokens that end
    // at node m are the outputs of its state, and a token of length L ending at m starts at the
    // ancestor path[depth(m) - L]. This first pass counts each row's pairs; the second fills them.
    //
    // Large sets are split into chunks of consecutive values, one per thread (run_chunks), in
    // both passes. A chunk's nodes are numbered from the nodes of the chunks before it (from the
    // values' common prefixes), and its walk starts on the path its first value shares with the
    // previous chunk. Those shared ancestors belong to an earlier chunk: a chunk counts the
    // pairs it adds to them apart (by depth) and writes them apart, and they are added and their
    // rows sorted once the chunks are done. The arrays are those of one walk, bit for bit.
    const TT tt(tri);
    const bool use_memo = tri->n_nodes < (int32_t{1} << 24);  // the key holds state << 8
    size_t total_bytes = 0;
    int64_t max_len = 0;
    for (auto& s : strs) {
        total_bytes += static_cast<size_t>(s.n);
        max_len = std::max(max_len, s.n);
    }
    if (total_bytes >= (size_t(1) << 31) - 4) {
        PyEval_RestoreThread(save);
        Py_DECREF(seq);
        return PyErr_Format(PyExc_OverflowError, "more than 2**31 trie nodes: node ids would overflow int32; split the set into smaller ones");
    }
    Buf<int32_t> ends, row_ptr;
    Spans state_of(tri);  // per node, its outputs span
    Buf<uint8_t> vbytes;
    Buf<int64_t> voff;
    if (compact) ends.pages_from = row_ptr.pages_from = vbytes.pages_from = voff.pages_from = PAGES_FROM;
    // row_ptr first counts the pairs of row v in row_ptr[v + 1]
    bool ok = ends.resize(nv) && vbytes.reserve(total_bytes - nv * static_cast<size_t>(tl) + 1) &&
              voff.resize(nv + 1) && state_of.resize(total_bytes + 1) && lcps.resize(nv) &&
              row_ptr.resize(total_bytes + 4) &&  // zeroed per node as nodes are made
              (!compact || walked.resize(total_bytes + 3));
    if (!ok) {
        PyEval_RestoreThread(save);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    std::vector<Chunk> chunks(static_cast<size_t>(n_chunks));
    if (n_chunks > 1) {
        // the values' common prefixes (unless the compact layout has them), then the chunks:
        // where they start (a short common prefix near an even split), their first node ids
        // and byte offsets, and the shared ancestors' ids
        if (!compact && !fill_lcps()) {
            PyEval_RestoreThread(save);
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        plan_chunks(chunks, lcps.p, nv);
        voff[0] = 0;
        int64_t node = 1;
        size_t c = 0;
        for (size_t i = 0; i < nv; ++i) {
            if (c < chunks.size() && chunks[c].b == i) chunks[c++].sid = static_cast<int32_t>(node);
            node += strs[i].n - lcps[i];
            voff[i + 1] = voff[i] + strs[i].n - tl;
        }
        for (size_t k = 1; k < chunks.size(); ++k) {
            Chunk& ck = chunks[k];
            ck.own = ck.sid;
            ck.need = lcps[ck.b];
            ck.path0.assign(static_cast<size_t>(ck.need) + 1, 0);
            // the node at depth d on value b - 1's path: made by the last value j < b with
            // lcps[j] < d, as its (d - lcps[j])-th node
            int64_t hi = ck.need, first = ck.sid;
            for (size_t j = ck.b; hi > 0 && j-- > 0;) {
                first -= strs[j].n - lcps[j];
                for (int64_t d = lcps[j] + 1; d <= hi; ++d)
                    ck.path0[static_cast<size_t>(d)] = static_cast<int32_t>(first + d - lcps[j] - 1);
                hi = std::min<int64_t>(hi, lcps[j]);
            }
            ck.side.assign(static_cast<size_t>(ck.need) + 1, 0);
        }
    } else {
        chunks[0].e = nv;
    }
    chunks[0].path0.assign(1, 0);  // the root, its own
    const bool lcps_ready = compact || n_chunks > 1;
    int32_t* cnt = row_ptr.p + 1;
    row_ptr[0] = 0;
    cnt[0] = 0;
    uint8_t* wk = compact ? walked.p : nullptr;  // per node: its row is walked (not stored)
    if (wk) wk[0] = static_cast<int64_t>(nv) <= max_keys;
    state_of.set(0, 0, 0);
    auto trie_chunk = [&](int64_t c) {
        Chunk& ck = chunks[static_cast<size_t>(c)];
        std::vector<int32_t> path(static_cast<size_t>(max_len) + 2, 0), st(static_cast<size_t>(max_len) + 2, 0);
        std::vector<GoMemo> memo(size_t(1) << GO_MEMO_BITS, GoMemo{0, 0, 0, 0, 0});  // key 0: empty
        for (int64_t d = 0; d <= ck.need; ++d) path[static_cast<size_t>(d)] = ck.path0[static_cast<size_t>(d)];
        for (int64_t d = 1; d <= ck.need; ++d)
            st[static_cast<size_t>(d)] = tt.go(st[static_cast<size_t>(d - 1)], strs[ck.b].p[d - 1]);
        const int32_t own = ck.own;
        int64_t* side = ck.side.data();
        // a pair into ancestor a (at depth da): counted in its row, or apart if it is shared
        // (then whether its row is walked is read after the chunks: an earlier chunk marks it)
        auto count = [&](int32_t a, int64_t da, int32_t x) {
            if (a >= own)
                cnt[a] += x;
            else
                side[da]++;
        };
        uint8_t* used = ck.used;
        int32_t next = ck.sid;
        Str prev = ck.b ? strs[ck.b - 1] : Str{nullptr, 0};
        size_t vat = ck.b ? static_cast<size_t>(voff[ck.b]) : 0;
        if (n_chunks == 1) voff[0] = 0;
        for (size_t i = ck.b; i < ck.e; ++i) {
            const Str& s = strs[i];
            if (i + 8 < ck.e) __builtin_prefetch(strs[i + 8].p);  // sorted order is not memory order
            int64_t l = 0;
            if (lcps_ready) {
                l = lcps[i];
            } else {
                l = common_prefix(prev, s);
                lcps[i] = static_cast<int32_t>(l);
            }
            for (int64_t d = l; d < s.n; ++d) {
                const int32_t id = next++;
                cnt[id] = 0;
                if (wk) wk[id] = d + 1 >= walk_from[i];
                const uint8_t b = s.p[d];
                used[b] = 1;
                // transition through a small direct-mapped memo: values repeat their words, so
                // most (state, byte) steps were taken before, and a hit reads no trie state
                const int32_t from = st[static_cast<size_t>(d)];
                const uint32_t key = (static_cast<uint32_t>(from) << 8 | b) + 1u;
                GoMemo own_e;
                GoMemo& e = use_memo ? memo[(key * 0x9E3779B1u) >> (32 - GO_MEMO_BITS)] : own_e;
                if (!use_memo || e.key != key) {
                    const int32_t qq = tt.go(from, b);
                    const int32_t lo = tt.si[qq].olo, hi = tt.si[qq].ohi;
                    uint64_t lens = 0;
                    if (hi - lo <= 8) {
                        for (int32_t j = lo; j < hi && lens != ~uint64_t(0); ++j) {
                            const int32_t L = tt.outs[j].len;
                            lens = L < 256 ? lens | static_cast<uint64_t>(L) << (8 * (j - lo)) : ~uint64_t(0);
                        }
                    } else {
                        lens = ~uint64_t(0);
                    }
                    e = {key, qq, lo, hi, lens};
                }
                const int32_t q = e.q, olo = e.olo, ohi = e.ohi;
                state_of.set(static_cast<size_t>(id), olo, ohi);
                path[static_cast<size_t>(d + 1)] = id;
                st[static_cast<size_t>(d + 1)] = q;
                if (wk) {  // only the stored rows are counted
                    for (int32_t j = olo; j < ohi; ++j) {
                        const int64_t da = d + 1 - tt.outs[j].len;
                        const int32_t a = path[static_cast<size_t>(da)];
                        count(a, da, a >= own && !wk[a]);
                    }
                } else if (e.lens != ~uint64_t(0)) {  // lengths from the memo: no read of the outputs table
                    for (uint64_t ls = e.lens; ls; ls >>= 8) {
                        const int64_t da = d + 1 - static_cast<int64_t>(ls & 0xFF);
                        count(path[static_cast<size_t>(da)], da, 1);
                    }
                } else {
                    for (int32_t j = olo; j < ohi; ++j) {
                        const int64_t da = d + 1 - tt.outs[j].len;
                        count(path[static_cast<size_t>(da)], da, 1);
                    }
                }
            }
            ends[i] = path[static_cast<size_t>(s.n)];
            const int64_t vl = s.n - tl;
            if (vl) std::memcpy(vbytes.p + vat, s.p, static_cast<size_t>(vl));
            vat += static_cast<size_t>(vl);
            if (n_chunks == 1) voff[i + 1] = voff[i] + vl;
            prev = s;
        }
        ck.nodes = next;
    };
    if (!run_chunks(n_chunks, trie_chunk)) {
        PyEval_RestoreThread(save);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    vbytes.n = static_cast<size_t>(voff[nv]);
    uint8_t used[256] = {0};
    for (const Chunk& ck : chunks) {
        for (int b = 0; b < 256; ++b) used[b] |= ck.used[b];
        for (size_t d = 0; d < ck.side.size(); ++d) {
            const int32_t a = ck.path0[d];
            if (!(wk && wk[a])) cnt[a] += static_cast<int32_t>(ck.side[d]);
        }
    }
    const int32_t next = chunks.back().nodes;
    LAP("trie");
    // the values' bytes are in vbytes now, and the passes below read only their lengths (from
    // voff): the pages go back before the rows are allocated (fewer fresh pages touched in all)
    relocated.release();
    relocated2.release();
    joined.release();
    strs.release();
    const int32_t n = next;
    const int32_t end_state = n, dead_state = n + 1;
    const int32_t n_eos = static_cast<int32_t>(eos.size());
    if (allow_end)
        for (size_t i = 0; i < nv; ++i) cnt[ends[i]] += (wk && wk[ends[i]]) ? 0 : n_eos;
    if (wk) wk[n] = wk[n + 1] = 0;  // END and DEAD are stored
    cnt[n] = n_eos;      // END
    cnt[n + 1] = n_eos;  // DEAD
    bool prune = false;
    for (int b = 0; b < 256; ++b)
        if (used[b] && !tri->single[b]) prune = true;
    row_ptr.n = static_cast<size_t>(n) + 3;
    int64_t total_pairs = 0;
    for (int32_t v = 0; v < n + 2; ++v) {  // exclusive scan: row_ptr[v] = start of row v
        const int32_t c = row_ptr[static_cast<size_t>(v) + 1];
        row_ptr[static_cast<size_t>(v)] = static_cast<int32_t>(total_pairs);
        total_pairs += c;
        if (total_pairs >= (int64_t(1) << 31)) {
            PyEval_RestoreThread(save);
            Py_DECREF(seq);
            return PyErr_Format(PyExc_OverflowError,
                                "more than 2**31 (state, token) pairs: split the set");
        }
    }
    // second pass: the same outputs, written into their rows (row_ptr[v] is row v's cursor,
    // and ends as the start of row v + 1: shifted back afterwards). Usually straight into the
    // serving arrays (token, child code); where some value may not be spellable, first as
    // (token, child) pairs that are pruned by reachability.
    Buf<int32_t> tokens;
    Buf<uint16_t> children;
    Buf<int32_t> far_pos, far_child;
    if (compact) tokens.pages_from = children.pages_from = far_pos.pages_from = far_child.pages_from = PAGES_FROM;
    Buf<Pair> pairs;
    std::vector<NodePair> fars;
    ok = prune ? pairs.resize(static_cast<size_t>(total_pairs))
               : tokens.resize(static_cast<size_t>(total_pairs)) &&
                     children.resize(static_cast<size_t>(total_pairs));
    if (!ok) {
        PyEval_RestoreThread(save);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    int32_t* cur = row_ptr.p;
    std::vector<int32_t> path(static_cast<size_t>(max_len) + 2, 0);
    auto second_pass = [&](auto emit) {
        int32_t id = 1;
        for (size_t i = 0; i < nv; ++i) {
            const int64_t len = voff[i + 1] - voff[i] + tl;
            for (int64_t d = lcps[i]; d < len; ++d) {
                const int32_t m = id++;
                path[static_cast<size_t>(d + 1)] = m;
                int32_t j, hi;
                state_of.get(static_cast<size_t>(m), &j, &hi);
                for (; j < hi; ++j)
                    emit(path[static_cast<size_t>(d + 1 - tt.outs[j].len)], tt.outs[j].token, m);
            }
        }
        if (allow_end)
            for (size_t i = 0; i < nv; ++i)
                for (int32_t e : eos) emit(ends[i], e, end_state);
        for (int32_t e : eos) emit(n, e, end_state);
        for (int32_t e : eos) emit(n + 1, e, end_state);
        std::memmove(row_ptr.p + 1, row_ptr.p, (static_cast<size_t>(n) + 2) * sizeof(int32_t));
        row_ptr[0] = 0;
    };
    if (!prune) {
        // the same walk, written out for the common case: rows are sorted as soon as they are
        // complete (when the walk leaves the node's subtree), while they are still in cache, and
        // the end ids of a value go into its row when the walk reaches its end
        int32_t* tk = tokens.p;
        uint16_t* ch = children.p;
        // a pair into row nd (not walked), its far child kept in ``far``
        auto put = [&](int32_t nd, int32_t t, int32_t m, std::vector<NodePair>& far) {
            const int32_t at = cur[nd]++;
            tk[at] = t;
            if (m == end_state) {
                ch[at] = TO_END;
            } else if (m - nd < FAR) {
                ch[at] = static_cast<uint16_t>(m - nd);
            } else {
                ch[at] = FAR;
                far.push_back({nd, t, m});
            }
        };
        int64_t max_id = tri->n_ids;
        for (int32_t e : eos) max_id = std::max(max_id, int64_t{e} + 1);
        const bool bits_fit = max_id <= (int64_t{1} << 24);  // else the radix sort alone
        auto sort_rows = [&](std::unique_ptr<IdBits>& big, int32_t lo, size_t len) {
            if (len > 16 && !big && bits_fit) big.reset(new IdBits(static_cast<size_t>(max_id)));
            sort_row2(tk + lo, ch + lo, len, big.get());
        };
        const Out* outs = tt.outs;
        auto emit_chunk = [&](int64_t c) {
            Chunk& ck = chunks[static_cast<size_t>(c)];
            const int32_t own = ck.own;  // rows below it: shared ancestors, written after the chunks
            auto emit = [&](int32_t nd, int32_t t, int32_t m) {
                if (wk && wk[nd]) return;
                if (nd < own)
                    ck.pend.push_back({nd, t, m});
                else
                    put(nd, t, m, ck.fars);
            };
            // the node at depth d of the path: its row starts at pstart[d] (its cursor when the
            // walk reached it: rows only receive pairs from nodes below them)
            std::vector<int32_t> path(static_cast<size_t>(max_len) + 2, 0), pstart(path.size(), 0);
            for (int64_t d = 0; d <= ck.need; ++d) path[static_cast<size_t>(d)] = ck.path0[static_cast<size_t>(d)];
            std::unique_ptr<IdBits> big;  // made for the first row of more than 16 pairs
            auto finish = [&](int64_t dd) {
                const int32_t v = path[static_cast<size_t>(dd)], lo = pstart[static_cast<size_t>(dd)];
                if (v < own) return;  // a shared ancestor: sorted once every chunk is done
                sort_rows(big, lo, static_cast<size_t>(cur[v] - lo));
            };
            int32_t id = ck.sid;
            int64_t prev_len = ck.need;
            for (size_t i = ck.b; i < ck.e; ++i) {
                const int64_t len = voff[i + 1] - voff[i] + tl;
                const int64_t l = lcps[i];
                for (int64_t dd = prev_len; dd > l; --dd) finish(dd);
                for (int64_t d = l; d < len; ++d) {
                    const int32_t m = id++;
                    path[static_cast<size_t>(d + 1)] = m;
                    pstart[static_cast<size_t>(d + 1)] = cur[m];
                    if (m + 8 < n) __builtin_prefetch(outs + state_of.lo(static_cast<size_t>(m) + 8));
                    int32_t j, hi;
                    state_of.get(static_cast<size_t>(m), &j, &hi);
                    if (j >= hi) continue;
                    // outputs come longest first: the farthest ancestor decides whether any is
                    // FAR or shared
                    const int32_t far_nd = path[static_cast<size_t>(d + 1 - outs[j].len)];
                    if (!wk && m - far_nd < FAR && far_nd >= own) {
                        for (; j < hi; ++j) {
                            const int32_t nd = path[static_cast<size_t>(d + 1 - outs[j].len)];
                            const int32_t at = cur[nd]++;
                            tk[at] = outs[j].token;
                            ch[at] = static_cast<uint16_t>(m - nd);
                        }
                    } else {
                        for (; j < hi; ++j) emit(path[static_cast<size_t>(d + 1 - outs[j].len)], outs[j].token, m);
                    }
                }
                if (allow_end)
                    for (int32_t e : eos) emit(ends[i], e, end_state);
                prev_len = len;
            }
            // the path the next chunk starts on is left to it (and sorted after the chunks)
            const int64_t keep = c + 1 < n_chunks ? chunks[static_cast<size_t>(c) + 1].need : -1;
            for (int64_t dd = prev_len; dd > keep; --dd) finish(dd);
        };
        if (!run_chunks(n_chunks, emit_chunk)) {
            PyEval_RestoreThread(save);
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        // the chunks' pairs into shared ancestors, then those rows sorted (row v ends where row
        // v + 1 starts, every row being complete now)
        std::vector<int32_t> shared;
        std::unique_ptr<IdBits> big;
        for (Chunk& ck : chunks) {
            for (const NodePair& p : ck.pend) put(p.node, p.token, p.child, fars);
            if (&ck != &chunks[0]) shared.insert(shared.end(), ck.path0.begin(), ck.path0.end());
            fars.insert(fars.end(), ck.fars.begin(), ck.fars.end());
            std::vector<NodePair>().swap(ck.pend);
            std::vector<NodePair>().swap(ck.fars);
        }
        std::sort(shared.begin(), shared.end());
        shared.erase(std::unique(shared.begin(), shared.end()), shared.end());
        for (int32_t v : shared) {
            if (wk && wk[v]) continue;
            const int32_t lo = v ? cur[v - 1] : 0;
            sort_rows(big, lo, static_cast<size_t>(cur[v] - lo));
        }
        for (int32_t e : eos) put(n, e, end_state, fars);
        for (int32_t e : eos) put(n + 1, e, end_state, fars);
        std::memmove(row_ptr.p + 1, row_ptr.p, (static_cast<size_t>(n) + 2) * sizeof(int32_t));
        row_ptr[0] = 0;
        LAP("emit");
    } else {
        Pair* out = pairs.p;
        second_pass([&](int32_t nd, int32_t t, int32_t m) { out[cur[nd]++] = {t, m}; });
        for (int32_t v = 0; v < n; ++v)
            sort_row(out + row_ptr[static_cast<size_t>(v)],
                     static_cast<size_t>(row_ptr[static_cast<size_t>(v) + 1] - row_ptr[static_cast<size_t>(v)]));
    }
    state_of.release();
    LAP("pairs");
    // -- values some token sequence cannot spell: prune, report ------------------------------------
    std::vector<int64_t> bad;
    if (prune) {
        std::vector<uint8_t> reach(static_cast<size_t>(n), 0), live(static_cast<size_t>(n), 0);
        reach[0] = 1;
        for (int32_t v = 0; v < n; ++v) {
            if (!reach[static_cast<size_t>(v)]) continue;
            for (int32_t j = row_ptr[static_cast<size_t>(v)]; j < row_ptr[static_cast<size_t>(v) + 1]; ++j)
                if (pairs[static_cast<size_t>(j)].child < n) reach[static_cast<size_t>(pairs[static_cast<size_t>(j)].child)] = 1;
        }
        for (size_t i = 0; i < nv; ++i) live[static_cast<size_t>(ends[i])] = 1;
        for (int32_t v = n - 1; v >= 0; --v) {
            if (live[static_cast<size_t>(v)]) continue;
            for (int32_t j = row_ptr[static_cast<size_t>(v)]; j < row_ptr[static_cast<size_t>(v) + 1]; ++j) {
                int32_t c = pairs[static_cast<size_t>(j)].child;
                if (c < n && live[static_cast<size_t>(c)]) {
                    live[static_cast<size_t>(v)] = 1;
                    break;
                }
            }
        }
        for (size_t i = 0; i < nv; ++i)
            if (!reach[static_cast<size_t>(ends[i])]) bad.push_back(static_cast<int64_t>(i));
        if (bad.empty()) {
            size_t w = 0;
            for (int32_t v = 0; v < n + 2; ++v) {
                int32_t lo = row_ptr[static_cast<size_t>(v)], hi = row_ptr[static_cast<size_t>(v) + 1];
                row_ptr[static_cast<size_t>(v)] = static_cast<int32_t>(w);
                for (int32_t j = lo; j < hi; ++j) {
                    Pair q = pairs[static_cast<size_t>(j)];
                    bool keep = q.child >= n ||
                                (v < n && reach[static_cast<size_t>(v)] && live[static_cast<size_t>(q.child)]);
                    if (keep) pairs[w++] = q;
                }
            }
            row_ptr[static_cast<size_t>(n) + 2] = static_cast<int32_t>(w);
            pairs.n = w;
            ok = tokens.resize(w) && children.resize(w);
            for (int32_t v = 0; v < n + 2 && ok; ++v) {
                for (int32_t j = row_ptr[static_cast<size_t>(v)]; j < row_ptr[static_cast<size_t>(v) + 1]; ++j) {
                    Pair q = pairs[static_cast<size_t>(j)];
                    tokens[static_cast<size_t>(j)] = q.token;
                    if (q.child == end_state) {
                        children[static_cast<size_t>(j)] = TO_END;
                    } else if (q.child - v < FAR) {
                        children[static_cast<size_t>(j)] = static_cast<uint16_t>(q.child - v);
                    } else {
                        children[static_cast<size_t>(j)] = FAR;
                        fars.push_back({v, q.token, q.child});
                    }
                }
            }
        }
        Buf<Pair> drop;
        std::swap(drop.p, pairs.p);
        pairs.n = pairs.cap = 0;
    }
    PyObject* result = nullptr;
    if (!bad.empty()) {
        PyEval_RestoreThread(save);
        Py_DECREF(seq);
        PyObject* lst = PyList_New(static_cast<Py_ssize_t>(bad.size()));
        if (!lst) return nullptr;
        for (size_t i = 0; i < bad.size(); ++i)
            PyList_SET_ITEM(lst, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(bad[i]));
        PyObject* arrays = PyDict_New();
        PyObject* vb = to_numpy(vbytes, NPY_UINT8);
        PyObject* vo = to_numpy(voff, NPY_INT64);
        if (!arrays || !vb || !vo) return nullptr;
        PyDict_SetItemString(arrays, "value_bytes", vb);
        PyDict_SetItemString(arrays, "value_offsets", vo);
        Py_DECREF(vb);
        Py_DECREF(vo);
        return Py_BuildValue("(NN)", arrays, lst);
    }
    // far children, in the order their pairs have in the rows
    std::sort(fars.begin(), fars.end(), [](const NodePair& a, const NodePair& b) {
        return a.node < b.node || (a.node == b.node && a.token < b.token);
    });
    for (const NodePair& f : fars) {
        const int32_t* lo = tokens.p + row_ptr[static_cast<size_t>(f.node)];
        const int32_t* hi = tokens.p + row_ptr[static_cast<size_t>(f.node) + 1];
        ok = ok && far_pos.push(static_cast<int32_t>(std::lower_bound(lo, hi, f.token) - tokens.p)) &&
             far_child.push(f.child);
    }
    (void)dead_state;
    LAP("codes");
    // the compact layout: row_ptr over the stored states alone, which states are walked, the keys
    Buf<uint64_t> dbits;
    Buf<int32_t> drank, kfirst;
    Buf<int64_t> info;
    dbits.pages_from = drank.pages_from = kfirst.pages_from = PAGES_FROM;
    if (ok && wk) {
        const int64_t n_states = int64_t{n} + 2, words = (n_states + 63) / 64;
        ok = dbits.assign(static_cast<size_t>(words), 0) && drank.resize(static_cast<size_t>(words)) &&
             kfirst.resize(nv) && info.resize(4);
        int64_t r = 0, dropped = 0;
        for (int64_t s = 0; ok && s < n_states; ++s) {
            if ((s & 63) == 0) drank[static_cast<size_t>(s >> 6)] = static_cast<int32_t>(dropped);
            if (wk[s]) {
                dbits[static_cast<size_t>(s >> 6)] |= uint64_t(1) << (s & 63);
                ++dropped;
            } else {
                row_ptr[static_cast<size_t>(r++)] = row_ptr[static_cast<size_t>(s)];
            }
        }
        if (ok) {
            row_ptr[static_cast<size_t>(r)] = row_ptr[static_cast<size_t>(n_states)];
            // into an array of its own size: the one it was counted in spans every node
            Buf<int32_t> small;
            small.pages_from = PAGES_FROM;
            ok = small.resize(static_cast<size_t>(r) + 1);
            if (ok) {
                std::memcpy(small.p, row_ptr.p, (static_cast<size_t>(r) + 1) * 4);
                std::swap(small.p, row_ptr.p);
                std::swap(small.n, row_ptr.n);
                std::swap(small.cap, row_ptr.cap);
                std::swap(small.mapped, row_ptr.mapped);
            }
            int64_t nf = 1;
            for (size_t i = 0; i < nv; ++i) {
                kfirst[i] = static_cast<int32_t>(nf);
                nf += voff[i + 1] - voff[i] + tl - lcps[i];
            }
            info[0] = n;
            info[1] = max_keys;
            info[2] = 0;
            info[3] = allow_end;
        }
        walked.release();
    }
    {
        Buf<Pair> drop;
        std::swap(drop.p, pairs.p);
        pairs.n = pairs.cap = 0;
    }
    PyEval_RestoreThread(save);
    Py_DECREF(seq);
    if (!ok) return PyErr_NoMemory();
    Named out[] = {
        {"row_ptr", to_numpy(row_ptr, NPY_INT32)},   {"tokens", to_numpy(tokens, NPY_INT32)},
        {"children", to_numpy(children, NPY_UINT16)}, {"far_pos", to_numpy(far_pos, NPY_INT32)},
        {"far_child", to_numpy(far_child, NPY_INT32)}, {"ends", to_numpy(ends, NPY_INT32)},
        {"value_bytes", to_numpy(vbytes, NPY_UINT8)}, {"value_offsets", to_numpy(voff, NPY_INT64)},
    };
    PyObject* arrays = dict_of(out);
    if (!arrays) return nullptr;
    if (info.n) {
        Named more[] = {
            {"demand_bits", to_numpy(dbits, NPY_UINT64)}, {"demand_rank", to_numpy(drank, NPY_INT32)},
            {"key_first", to_numpy(kfirst, NPY_INT32)},   {"key_lcp", to_numpy(lcps, NPY_INT32)},
            {"compact_info", to_numpy(info, NPY_INT64)},
        };
        for (auto& it : more) {
            if (!it.obj || PyDict_SetItemString(arrays, it.name, it.obj) < 0) ok = false;
        }
        for (auto& it : more) Py_XDECREF(it.obj);
        if (!ok) {
            Py_DECREF(arrays);
            return nullptr;
        }
    }
    result = Py_BuildValue("(NO)", arrays, Py_None);
    LAP("out");
    return result;
}

// A contiguous 1-D buffer of a given kind ('i' signed, 'u' unsigned) and item size.
struct View {
    Py_buffer b;
    bool held = false;
};

bool get_view(PyObject* obj, View& v, char kind, int itemsize, const char* name) {
    if (PyObject_GetBuffer(obj, &v.b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return false;
    v.held = true;
    const char* f = v.b.format ? v.b.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    bool kind_ok = false;
    if (kind == 'i') kind_ok = (*f == 'i' || *f == 'l' || *f == 'q' || *f == 'h');
    if (kind == 'u') kind_ok = (*f == 'H' || *f == 'I' || *f == 'B' || *f == 'L' || *f == 'Q');
    if (!kind_ok || v.b.itemsize != itemsize || v.b.ndim > 1) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-D array of %s%d", name,
                     kind == 'i' ? "int" : "uint", itemsize * 8);
        return false;
    }
    return true;
}

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

// The row of node s (valid, not END / DEAD), sorted by token.
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

// compact_layout(row_ptr, tokens, children, far_pos, far_child, value_bytes, value_offsets,
//                terminator, max_keys, trie_or_None, end_ids) -> dict of arrays
// The rows of the nodes with at most max_keys keys below are dropped (bit set in demand_bits);
// the rest, END and DEAD keep theirs. Where some byte of the keys has no single-byte token in the
// trie, the compile may have pruned tokens leading to nodes no token sequence completes: then
// each dropped row is first walked and compared with the stored one, and kept where they differ.
// trie=None skips that check (the tests show that it matters).
PyObject* py_compact_layout(PyObject*, PyObject* args) {
    PyObject *rp_o, *tk_o, *ch_o, *fp_o, *fc_o, *vb_o, *vo_o, *trie_o, *end_o;
    Py_buffer term;
    long long max_keys;
    if (!PyArg_ParseTuple(args, "OOOOOOOy*LOO", &rp_o, &tk_o, &ch_o, &fp_o, &fc_o, &vb_o, &vo_o,
                          &term, &max_keys, &trie_o, &end_o))
        return nullptr;
    std::string tstr(static_cast<const char*>(term.buf), static_cast<size_t>(term.len));
    PyBuffer_Release(&term);
    if (trie_o != Py_None && !PyObject_TypeCheck(trie_o, &TokenTrieType)) {
        PyErr_SetString(PyExc_TypeError, "trie must be a TokenTrie or None");
        return nullptr;
    }
    View rp, tk, ch, fp, fc, vb, vo;
    struct Release {
        std::vector<View*> v;
        ~Release() {
            for (View* x : v)
                if (x->held) PyBuffer_Release(&x->b);
        }
    } rel{{&rp, &tk, &ch, &fp, &fc, &vb, &vo}};
    if (!get_view(rp_o, rp, 'i', 4, "row_ptr") || !get_view(tk_o, tk, 'i', 4, "tokens") ||
        !get_view(ch_o, ch, 'u', 2, "children") || !get_view(fp_o, fp, 'i', 4, "far_pos") ||
        !get_view(fc_o, fc, 'i', 4, "far_child") || !get_view(vb_o, vb, 'u', 1, "value_bytes") ||
        !get_view(vo_o, vo, 'i', 8, "value_offsets"))
        return nullptr;
    std::vector<int32_t> end_ids;
    {
        PyObject* s = PySequence_Fast(end_o, "end_ids must be a sequence of ints");
        if (!s) return nullptr;
        for (Py_ssize_t q = 0; q < PySequence_Fast_GET_SIZE(s); ++q)
            end_ids.push_back(static_cast<int32_t>(PyLong_AsLong(PySequence_Fast_GET_ITEM(s, q))));
        Py_DECREF(s);
        if (PyErr_Occurred()) return nullptr;
        std::sort(end_ids.begin(), end_ids.end());
    }
    const int32_t* row_ptr = static_cast<const int32_t*>(rp.b.buf);
    const int32_t* tokens = static_cast<const int32_t*>(tk.b.buf);
    const uint16_t* children = static_cast<const uint16_t*>(ch.b.buf);
    const int32_t* far_pos = static_cast<const int32_t*>(fp.b.buf);
    const int32_t* far_child = static_cast<const int32_t*>(fc.b.buf);
    const int64_t n_states = rp.b.len / 4 - 1, n_far = fp.b.len / 4;
    const int64_t n_nodes = n_states - 2;
    KeyView k;
    k.vb = static_cast<const uint8_t*>(vb.b.buf);
    k.voff = static_cast<const int64_t*>(vo.b.buf);
    k.K = vo.b.len / 8 - 1;
    k.term = tstr;
    if (n_nodes < 1 || k.K < 1) {
        PyErr_SetString(PyExc_ValueError, "compact_layout: a set has a root and a value");
        return nullptr;
    }
    Buf<int32_t> first, lcp;
    constexpr size_t PAGES_FROM = size_t(64) << 10;  // as the compile's compact arrays
    first.pages_from = lcp.pages_from = PAGES_FROM;
    bool ok = first.resize(static_cast<size_t>(k.K)) && lcp.resize(static_cast<size_t>(k.K));
    if (!ok) return PyErr_NoMemory();
    const int64_t words = (n_states + 63) / 64;
    Buf<uint64_t> bits;
    Buf<int32_t> rank, nrp, ntk, nfp, nfc;
    Buf<uint16_t> nch;
    bits.pages_from = rank.pages_from = nrp.pages_from = ntk.pages_from = nfp.pages_from = PAGES_FROM;
    nfc.pages_from = nch.pages_from = PAGES_FROM;
    if (!bits.assign(static_cast<size_t>(words), 0) || !rank.resize(static_cast<size_t>(words)))
        return PyErr_NoMemory();
    int64_t mismatched = 0;
    TokenTrieObject* trie = trie_o == Py_None ? nullptr : reinterpret_cast<TokenTrieObject*>(trie_o);
    int64_t next_first = 1;
    Py_BEGIN_ALLOW_THREADS;
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
                    else if (c == FAR)
                        target = far_child[std::lower_bound(far_pos, far_pos + n_far,
                                                            static_cast<int32_t>(at)) - far_pos];
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
    Py_END_ALLOW_THREADS;
    if (!ok) {
        if (next_first != n_nodes)
            PyErr_SetString(PyExc_ValueError, "compact_layout: the values do not make these nodes");
        else
            PyErr_NoMemory();
        return nullptr;
    }
    Buf<int64_t> info;
    if (!info.resize(3)) return PyErr_NoMemory();
    info[0] = n_nodes;
    info[1] = max_keys;
    info[2] = mismatched;
    Named out[] = {
        {"row_ptr", to_numpy(nrp, NPY_INT32)},        {"tokens", to_numpy(ntk, NPY_INT32)},
        {"children", to_numpy(nch, NPY_UINT16)},      {"far_pos", to_numpy(nfp, NPY_INT32)},
        {"far_child", to_numpy(nfc, NPY_INT32)},      {"demand_bits", to_numpy(bits, NPY_UINT64)},
        {"demand_rank", to_numpy(rank, NPY_INT32)},   {"key_first", to_numpy(first, NPY_INT32)},
        {"key_lcp", to_numpy(lcp, NPY_INT32)},        {"compact_info", to_numpy(info, NPY_INT64)},
    };
    return dict_of(out);
}

// ------------------------------------------------------------------------------------------------
// Core: serving over the arrays of a ChoiceSet.

// A compact layout's serving side (Core(..., compact=...)): which states are walked on demand
// (demand_bits; demand_rank[w] = such states before word w), the keys and the token trie.
struct Compact {
    View v_bits, v_rank, v_first, v_lcp, v_vb, v_voff, v_tbuf, v_toff, v_match;
    const uint64_t* bits = nullptr;
    const int32_t* rank = nullptr;
    // the vocabulary's token bytes (buffer, offsets) and matchable flags: an advance compares
    // the token's bytes with the node's keys instead of walking the row
    const uint8_t* tbuf = nullptr;
    const int64_t* toff = nullptr;
    const uint8_t* matchable = nullptr;
    int64_t n_tokens = 0;
    KeyView keys;
    PyObject* trie = nullptr;
    TT tt;
    std::vector<int32_t> end_ids;  // sorted; empty when the set leaves them out (allow_end=False)
    int64_t n_nodes = 0;
    uint64_t uid = 0;  // names this layout in the walked-row caches (never reused)
    explicit Compact(TokenTrieObject* t) : trie(Py_NewRef(reinterpret_cast<PyObject*>(t))), tt(t) {}
    ~Compact() {
        for (View* v : {&v_bits, &v_rank, &v_first, &v_lcp, &v_vb, &v_voff, &v_tbuf, &v_toff, &v_match})
            if (v->held) PyBuffer_Release(&v->b);
        Py_XDECREF(trie);
    }
};

struct CoreObject {
    PyObject_HEAD
    View v_row_ptr, v_tokens, v_children, v_far_pos, v_far_child, v_ends;
    PyObject* tokens_obj;  // for mask views
    const int32_t* row_ptr;
    const int32_t* tokens;
    const uint16_t* children;
    const int32_t* far_pos;
    const int32_t* far_child;
    const int32_t* ends;
    int64_t n_far, n_ends, n_states, n_pairs, end_state, dead_state, width, words;
    Compact* cx;  // null: every row stored (row_ptr indexed by state)
};

PyTypeObject CoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void Core_dealloc(CoreObject* self) {
    for (View* v : {&self->v_row_ptr, &self->v_tokens, &self->v_children, &self->v_far_pos,
                    &self->v_far_child, &self->v_ends})
        if (v->held) PyBuffer_Release(&v->b);
    Py_XDECREF(self->tokens_obj);
    delete self->cx;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

// compact = (demand_bits, demand_rank, key_first, key_lcp, value_bytes, value_offsets,
//            terminator, trie, end_ids, n_nodes, token_buffer, token_offsets, matchable, check):
// checked against the stored rows; with check (a loaded file), every key's common prefix too
bool open_compact(CoreObject* self, PyObject* spec) {
    PyObject *bo, *ro, *fo, *lo, *vbo, *voo, *trie, *endo, *tbo, *too, *mo;
    Py_buffer term;
    long long n_nodes;
    int check;
    if (!PyArg_ParseTuple(spec, "OOOOOOy*O!OLOOOp", &bo, &ro, &fo, &lo, &vbo, &voo, &term,
                          &TokenTrieType, &trie, &endo, &n_nodes, &tbo, &too, &mo, &check))
        return false;
    std::string tstr(static_cast<const char*>(term.buf), static_cast<size_t>(term.len));
    PyBuffer_Release(&term);
    auto* x = new Compact(reinterpret_cast<TokenTrieObject*>(trie));
    delete self->cx;
    self->cx = x;
    if (!get_view(bo, x->v_bits, 'u', 8, "demand_bits") || !get_view(ro, x->v_rank, 'i', 4, "demand_rank") ||
        !get_view(fo, x->v_first, 'i', 4, "key_first") || !get_view(lo, x->v_lcp, 'i', 4, "key_lcp") ||
        !get_view(vbo, x->v_vb, 'u', 1, "value_bytes") || !get_view(voo, x->v_voff, 'i', 8, "value_offsets") ||
        !get_view(tbo, x->v_tbuf, 'u', 1, "token_buffer") || !get_view(too, x->v_toff, 'i', 8, "token_offsets") ||
        !get_view(mo, x->v_match, 'u', 1, "matchable"))
        return false;
    x->tbuf = static_cast<const uint8_t*>(x->v_tbuf.b.buf);
    x->toff = static_cast<const int64_t*>(x->v_toff.b.buf);
    x->matchable = static_cast<const uint8_t*>(x->v_match.b.buf);
    x->n_tokens = x->v_match.b.len;
    bool tok_ok = x->v_toff.b.len / 8 == x->n_tokens + 1 && x->toff[0] == 0 &&
                  x->toff[x->n_tokens] <= x->v_tbuf.b.len;
    for (int64_t t = 0; tok_ok && t < x->n_tokens; ++t) tok_ok = x->toff[t + 1] >= x->toff[t];
    if (!tok_ok) {
        PyErr_SetString(PyExc_ValueError, "compact layout: token offsets do not fit the token buffer");
        return false;
    }
    PyObject* s = PySequence_Fast(endo, "end_ids must be a sequence of ints");
    if (!s) return false;
    for (Py_ssize_t q = 0; q < PySequence_Fast_GET_SIZE(s); ++q)
        x->end_ids.push_back(static_cast<int32_t>(PyLong_AsLong(PySequence_Fast_GET_ITEM(s, q))));
    Py_DECREF(s);
    if (PyErr_Occurred()) return false;
    std::sort(x->end_ids.begin(), x->end_ids.end());
    x->bits = static_cast<const uint64_t*>(x->v_bits.b.buf);
    x->rank = static_cast<const int32_t*>(x->v_rank.b.buf);
    KeyView& k = x->keys;
    k.vb = static_cast<const uint8_t*>(x->v_vb.b.buf);
    k.voff = static_cast<const int64_t*>(x->v_voff.b.buf);
    k.first = static_cast<const int32_t*>(x->v_first.b.buf);
    k.lcp = static_cast<const int32_t*>(x->v_lcp.b.buf);
    k.K = x->v_voff.b.len / 8 - 1;
    k.term = tstr;
    const int64_t n_states = n_nodes + 2, words = (n_states + 63) / 64;
    bool ok = n_nodes >= 1 && k.K >= 1 && x->v_bits.b.len / 8 == words && x->v_rank.b.len / 4 == words &&
              x->v_first.b.len / 4 == k.K && x->v_lcp.b.len / 4 == k.K;
    int64_t dropped = 0;
    for (int64_t w = 0; ok && w < words; ++w) {
        ok = x->rank[w] == dropped;
        dropped += __builtin_popcountll(x->bits[w]);
    }
    // END and DEAD are stored; every key's bytes and nodes within the set
    ok = ok && !((x->bits[n_nodes >> 6] >> (n_nodes & 63)) & 1) &&
         !((x->bits[(n_nodes + 1) >> 6] >> ((n_nodes + 1) & 63)) & 1) &&
         self->v_row_ptr.b.len / 4 == n_states - dropped + 1 && k.voff[0] == 0 &&
         k.voff[k.K] <= x->v_vb.b.len;
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
    if (!ok || next_first != n_nodes) {
        PyErr_SetString(PyExc_ValueError, "compact layout: its arrays do not describe one set");
        return false;
    }
    x->n_nodes = n_nodes;
    static std::atomic<uint64_t> next_uid{1};
    x->uid = next_uid.fetch_add(1);
    return true;
}

// Core(row_ptr, tokens, children, far_pos, far_child, ends, width, compact=None)
int Core_init(CoreObject* self, PyObject* args, PyObject*) {
    PyObject *rp, *tk, *ch, *fp, *fc, *en, *spec = Py_None;
    long long width;
    if (!PyArg_ParseTuple(args, "OOOOOOL|O", &rp, &tk, &ch, &fp, &fc, &en, &width, &spec)) return -1;
    if (!get_view(rp, self->v_row_ptr, 'i', 4, "row_ptr") ||
        !get_view(tk, self->v_tokens, 'i', 4, "tokens") ||
        !get_view(ch, self->v_children, 'u', 2, "children") ||
        !get_view(fp, self->v_far_pos, 'i', 4, "far_pos") ||
        !get_view(fc, self->v_far_child, 'i', 4, "far_child") ||
        !get_view(en, self->v_ends, 'i', 4, "ends"))
        return -1;
    int64_t nrp = self->v_row_ptr.b.len / 4;
    if (nrp < (spec == Py_None ? 4 : 3)) {
        PyErr_SetString(PyExc_ValueError, spec == Py_None ? "row_ptr: fewer than 4 entries (a root, END and DEAD)"
                                                          : "row_ptr: fewer than 3 entries (END and DEAD)");
        return -1;
    }
    Py_INCREF(tk);
    Py_XSETREF(self->tokens_obj, tk);
    self->row_ptr = static_cast<const int32_t*>(self->v_row_ptr.b.buf);
    self->tokens = static_cast<const int32_t*>(self->v_tokens.b.buf);
    self->children = static_cast<const uint16_t*>(self->v_children.b.buf);
    self->far_pos = static_cast<const int32_t*>(self->v_far_pos.b.buf);
    self->far_child = static_cast<const int32_t*>(self->v_far_child.b.buf);
    self->ends = static_cast<const int32_t*>(self->v_ends.b.buf);
    self->n_far = self->v_far_pos.b.len / 4;
    self->n_ends = self->v_ends.b.len / 4;
    self->n_pairs = self->v_tokens.b.len / 4;
    self->n_states = nrp - 1;
    if (spec != Py_None) {
        if (!PyTuple_Check(spec) || !open_compact(self, spec)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "compact must be a tuple or None");
            return -1;
        }
        self->n_states = self->cx->n_nodes + 2;
    }
    self->end_state = self->n_states - 2;
    self->dead_state = self->n_states - 1;
    self->width = width;
    self->words = (width + 31) / 32;
    return 0;
}

// Compact layout: the index of s's stored row, or -1 when s's row is walked on demand (s valid).
inline int64_t stored_row(const CoreObject* c, int64_t s) {
    const Compact* x = c->cx;
    if (!x) return s;
    const uint64_t word = x->bits[s >> 6], bit = uint64_t(1) << (s & 63);
    if (word & bit) return -1;
    return s - x->rank[s >> 6] - __builtin_popcountll(word & (bit - 1));
}

// The walked row of s, from a thread's cache of recent rows (direct-mapped by state): a step
// walks the row its fill walked before (advance, then the next state's mask), and a batch's
// advance the rows its previous fill walked. Valid until the thread's next walk.
struct WalkedRow {
    uint64_t uid = 0;
    int64_t state = -1;
    std::vector<DemandPair> row;
};
constexpr size_t WALK_CACHE = 1024;

inline const std::vector<DemandPair>& walked_row(const CoreObject* c, int64_t s) {
    thread_local std::vector<WalkedRow> cache(WALK_CACHE);
    const Compact* x = c->cx;
    WalkedRow& e = cache[static_cast<size_t>(s) & (WALK_CACHE - 1)];
    if (e.uid != x->uid || e.state != s) {
        demand_row(x->keys, x->tt, x->end_ids, static_cast<int32_t>(c->end_state), s, e.row);
        e.uid = x->uid;
        e.state = s;
    }
    return e.row;
}

// The ids allowed at s (valid): a span of the stored tokens, or a walked row copied to ``ids``.
inline const int32_t* row_ids(const CoreObject* c, int64_t s, int64_t* n, std::vector<int32_t>& ids) {
    const int64_t r = stored_row(c, s);
    if (r >= 0) {
        *n = c->row_ptr[r + 1] - c->row_ptr[r];
        return c->tokens + c->row_ptr[r];
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
int64_t walked_advance(const CoreObject* c, int64_t s, int64_t token) {
    const Compact* x = c->cx;
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

inline int64_t core_advance(const CoreObject* c, int64_t s, int64_t token) {
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(c->n_states)) return c->dead_state;
    const int64_t r = stored_row(c, s);
    if (r < 0) return walked_advance(c, s, token);
    const int64_t lo = c->row_ptr[r];
    int64_t n = c->row_ptr[r + 1] - lo;
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
    return c->far_child[f - c->far_pos];
}

inline bool as_i64(PyObject* o, int64_t* out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return false;
    *out = overflow ? (overflow > 0 ? INT64_MAX : INT64_MIN) : v;
    return true;
}

PyObject* Core_advance(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "advance(state, token)");
        return nullptr;
    }
    int64_t s, t;
    if (!as_i64(args[0], &s) || !as_i64(args[1], &t)) return nullptr;
    return PyLong_FromLongLong(core_advance(self, s, t));
}

inline int64_t valid_state(const CoreObject* c, int64_t s) {
    return static_cast<uint64_t>(s) < static_cast<uint64_t>(c->n_states) ? s : c->dead_state;
}

PyObject* make_mask(CoreObject* self, int64_t s) {
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(self->n_states)) {
        PyErr_Format(PyExc_ValueError, "state=%lld: not a state of this set (0..%lld)",
                     static_cast<long long>(s), static_cast<long long>(self->n_states - 1));
        return nullptr;
    }
    const int64_t r = stored_row(self, s);
    if (r < 0) {  // a walked row: a new array
        std::vector<int32_t> ids;
        int64_t n;
        const int32_t* p = row_ids(self, s, &n, ids);
        npy_intp dims[1] = {static_cast<npy_intp>(n)};
        PyObject* arr = PyArray_SimpleNew(1, dims, NPY_INT32);
        if (arr && n) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(arr)), p, static_cast<size_t>(n) * 4);
        return arr;
    }
    int64_t lo = self->row_ptr[r], hi = self->row_ptr[r + 1];
    npy_intp dims[1] = {static_cast<npy_intp>(hi - lo)};
    PyObject* arr = PyArray_New(&PyArray_Type, 1, dims, NPY_INT32, nullptr,
                                const_cast<int32_t*>(self->tokens + lo), 0, NPY_ARRAY_CARRAY_RO,
                                nullptr);
    if (!arr) return nullptr;
    Py_INCREF(self->tokens_obj);
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), self->tokens_obj) < 0) {
        Py_DECREF(arr);
        return nullptr;
    }
    return arr;
}

PyObject* Core_mask(CoreObject* self, PyObject* arg) {
    int64_t s;
    if (!as_i64(arg, &s)) return nullptr;
    return make_mask(self, s);
}

PyObject* Core_is_terminal(CoreObject* self, PyObject* arg) {
    int64_t s;
    if (!as_i64(arg, &s)) return nullptr;
    if (s == self->end_state) Py_RETURN_TRUE;
    if (s < 0 || s >= self->end_state) Py_RETURN_FALSE;
    const int32_t* e = self->ends;
    const int32_t* f = std::lower_bound(e, e + self->n_ends, static_cast<int32_t>(s));
    if (f != e + self->n_ends && *f == s) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

// A writable int32 2-D (or 1-D) buffer whose rows are contiguous; torch CPU tensors through
// their zero-copy .numpy() view.
struct Mask2D {
    Py_buffer b;
    bool held = false;
    PyObject* tmp = nullptr;
    char* base = nullptr;
    int64_t rows = 0, words = 0, row_stride = 0;
    ~Mask2D() {
        if (held) PyBuffer_Release(&b);
        Py_XDECREF(tmp);
    }
    bool open(PyObject* obj, int itemsize, const char* what) {
        if (PyObject_GetBuffer(obj, &b, PyBUF_RECORDS) < 0) {
            // torch CPU tensors: their .numpy() view shares the memory (no copy)
            PyErr_Clear();
            if (!PyObject_HasAttrString(obj, "numpy")) {
                PyErr_Format(PyExc_TypeError,
                             "%s: expected a writable array (numpy, or a torch CPU tensor), got %s",
                             what, Py_TYPE(obj)->tp_name);
                return false;
            }
            tmp = PyObject_CallMethod(obj, "numpy", nullptr);
            if (!tmp) return false;
            if (PyObject_GetBuffer(tmp, &b, PyBUF_RECORDS) < 0) return false;
        }
        held = true;
        if (b.itemsize != itemsize || (b.ndim != 1 && b.ndim != 2)) {
            PyErr_Format(PyExc_TypeError, "%s: expected a 1-D or 2-D array of %d-byte items", what,
                         itemsize);
            return false;
        }
        int64_t inner = b.ndim == 2 ? b.strides[1] : b.strides[0];
        if (inner != itemsize) {
            PyErr_Format(PyExc_ValueError, "%s: rows must be contiguous", what);
            return false;
        }
        base = static_cast<char*>(b.buf);
        rows = b.ndim == 2 ? b.shape[0] : 1;
        words = b.ndim == 2 ? b.shape[1] : b.shape[0];
        row_stride = b.ndim == 2 ? b.strides[0] : 0;
        return true;
    }
    inline int32_t* row32(int64_t r) const { return reinterpret_cast<int32_t*>(base + r * row_stride); }
};

// A row is written 2 KB at a time: the stretch is zeroed, then the bits of its ids (a row's ids
// are sorted) are set while its lines are still in L1. Measured A/B on this 2-core EPYC, in one
// process, 256 Qwen2 rows (4.9 MB, ~80 ids a row): 7-10% faster than one memset of the whole
// row before its ids (likely: glibc zeroes 19 KB with `rep stosb`, and the ids' words then come
// from further out than L1); 1, 1.5, 4 and 8 KB stretches and 32-byte stores of our own were
// slower; writing each word once (zero stretches between ids, words built in registers) 2x
// slower (the stretches are short, the branches unpredictable); streaming stores 2-4x slower.
constexpr int64_t FILL_STRETCH = 512;  // words

const int32_t* walked_ids(const CoreObject* c, int64_t s, int64_t* n) {
    thread_local std::vector<int32_t> scratch;  // (only a walked row reads the thread's storage)
    return row_ids(c, s, n, scratch);
}

inline void fill_row(const CoreObject* c, int64_t s, int32_t* row, int64_t words) {
    s = valid_state(c, s);
    const int64_t r = stored_row(c, s);
    int64_t j = 0, hi;
    const int32_t* tk;
    if (r >= 0) {
        tk = c->tokens + c->row_ptr[r];
        hi = c->row_ptr[r + 1] - c->row_ptr[r];
    } else {
        tk = walked_ids(c, s, &hi);
    }
    uint32_t* w = reinterpret_cast<uint32_t*>(row);
    for (int64_t p0 = 0; p0 < words; p0 += FILL_STRETCH) {
        const int64_t p1 = std::min(words, p0 + FILL_STRETCH);
        std::memset(w + p0, 0, static_cast<size_t>(p1 - p0) * 4);
        for (const int64_t lim = p1 << 5; j < hi && tk[j] < lim; ++j) {
            const uint32_t t = static_cast<uint32_t>(tk[j]);
            w[t >> 5] |= 1u << (t & 31);
        }
    }
}

bool check_words(const CoreObject* c, const Mask2D& m) {
    if (m.words < c->words) {
        PyErr_Format(PyExc_ValueError,
                     "bitmask rows have %lld int32 words; this set needs %lld (ceil(width / 32))",
                     static_cast<long long>(m.words), static_cast<long long>(c->words));
        return false;
    }
    return true;
}

// fill(state, bitmask, index=0)
PyObject* Core_fill(CoreObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyObject* idx_obj = nargs == 3 ? args[2] : nullptr;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; ++k) {
        PyObject* name = PyTuple_GET_ITEM(kwnames, k);
        if (PyUnicode_CompareWithASCIIString(name, "index") == 0 && !idx_obj) {
            idx_obj = args[nargs + k];
        } else {
            PyErr_Format(PyExc_TypeError, "fill_next_token_bitmask() got an unexpected keyword %R", name);
            return nullptr;
        }
    }
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "fill_next_token_bitmask(state, bitmask, index=0)");
        return nullptr;
    }
    int64_t s, idx = 0;
    if (!as_i64(args[0], &s) || (idx_obj && !as_i64(idx_obj, &idx))) return nullptr;
    Mask2D m;
    if (!m.open(args[1], 4, "bitmask") || !check_words(self, m)) return nullptr;
    if (idx < 0) idx += m.rows;
    if (idx < 0 || idx >= m.rows) {
        PyErr_Format(PyExc_IndexError, "index %lld out of range for %lld bitmask rows",
                     static_cast<long long>(idx), static_cast<long long>(m.rows));
        return nullptr;
    }
    fill_row(self, s, m.row32(idx), m.words);
    Py_RETURN_NONE;
}

// A Python buffer held for the life of a view: acquired by get(), released by the destructor.
struct HeldBuffer {
    Py_buffer b;
    bool held = false;
    HeldBuffer() = default;
    HeldBuffer(const HeldBuffer&) = delete;
    HeldBuffer& operator=(const HeldBuffer&) = delete;
    ~HeldBuffer() {
        if (held) PyBuffer_Release(&b);
    }
    bool get(PyObject* o, int flags) {
        if (PyObject_GetBuffer(o, &b, flags) < 0) return false;
        held = true;
        return true;
    }
    // The struct-module item code, byte-order prefix skipped ("B" when none is given).
    char item_code() const {
        const char* f = b.format ? b.format : "B";
        if (*f == '<' || *f == '=' || *f == '@') ++f;
        return *f;
    }
};

struct I64View : HeldBuffer {
    const int64_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o, const char* what, bool writable = false) {
        if (!get(o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0))) return false;
        const char f = item_code();
        if (b.itemsize != 8 || !(f == 'q' || f == 'l') || b.ndim != 1) {
            PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-D int64 array", what);
            return false;
        }
        p = static_cast<const int64_t*>(b.buf);
        n = b.len / 8;
        return true;
    }
};

// advance_batch(states, tokens, out) -> None; all int64 1-D of one length (out may be states).
// Rows of a batch sit anywhere in the set's arrays: each step's loads are issued ahead
// (prefetch) so that the cache misses of different rows overlap.
PyObject* Core_advance_batch(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "advance_batch(states, tokens[, out])");
        return nullptr;
    }
    I64View st, tk, out;
    if (!st.open(args[0], "states") || !tk.open(args[1], "tokens")) return nullptr;
    if (st.n != tk.n) {
        PyErr_SetString(PyExc_ValueError, "states and tokens differ in length");
        return nullptr;
    }
    // without ``out``, a new array is returned: the public API's common case in one call (each
    // numpy call it saves runs with cold caches in a server, right after a 5 MB bitmask fill)
    PyObject* made = nullptr;
    if (nargs == 2) {
        npy_intp dims[1] = {static_cast<npy_intp>(st.n)};
        made = PyArray_SimpleNew(1, dims, NPY_INT64);
        if (!made) return nullptr;
    }
    if (!out.open(made ? made : args[2], "out", true)) {
        Py_XDECREF(made);
        return nullptr;
    }
    if (out.n != st.n) {
        PyErr_SetString(PyExc_ValueError, "states, tokens and out differ in length");
        Py_XDECREF(made);
        return nullptr;
    }
    int64_t* o = const_cast<int64_t*>(out.p);
    const int64_t n = st.n;
    const CoreObject* c = self;
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
            if (valid(st.p[i])) __builtin_prefetch(c->row_ptr + st.p[i]);
        for (int64_t i = b0; i < b1; ++i)
            if (valid(st.p[i])) {
                const int32_t lo = c->row_ptr[st.p[i]];
                __builtin_prefetch(c->tokens + lo);
                __builtin_prefetch(c->children + lo);
            }
        }
        for (int64_t i = b0; i < b1; ++i) o[i] = core_advance(c, st.p[i], tk.p[i]);
    }
    if (made) return made;
    Py_RETURN_NONE;
}

// fill_batch(states, bitmask, rows_or_None)
PyObject* Core_fill_batch(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "fill_batch(states, bitmask, rows)");
        return nullptr;
    }
    I64View st, rw;
    Mask2D m;
    if (!st.open(args[0], "states") || !m.open(args[1], 4, "bitmask") || !check_words(self, m))
        return nullptr;
    bool has_rows = args[2] != Py_None;
    if (has_rows && !rw.open(args[2], "rows")) return nullptr;
    if (has_rows && rw.n != st.n) {
        PyErr_SetString(PyExc_ValueError, "states and rows differ in length");
        return nullptr;
    }
    for (int64_t i = 0; i < st.n; ++i) {
        int64_t r = has_rows ? rw.p[i] : i;
        if (r < 0) r += m.rows;
        if (r < 0 || r >= m.rows) {
            PyErr_Format(PyExc_IndexError, "row %lld out of range for %lld bitmask rows",
                         static_cast<long long>(r), static_cast<long long>(m.rows));
            return nullptr;
        }
    }
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t i = 0; i < st.n; ++i) {
        if (i + 1 < st.n && !self->cx) {  // the next row's ids (every line of them) load while this row is written
            const int64_t s2 = valid_state(self, st.p[i + 1]);
            const char* a = reinterpret_cast<const char*>(self->tokens + self->row_ptr[s2]);
            const char* b = reinterpret_cast<const char*>(self->tokens + self->row_ptr[s2 + 1]);
            for (; a < b; a += 64) __builtin_prefetch(a);
        }
        if (i + 2 < st.n && !self->cx) __builtin_prefetch(self->row_ptr + valid_state(self, st.p[i + 2]));
        int64_t r = has_rows ? rw.p[i] : i;
        if (r < 0) r += m.rows;
        fill_row(self, st.p[i], m.row32(r), m.words);
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

// The arguments apply_sparse and copy_sparse share: states, a 2-D logits buffer, rows (or None:
// row i), the bits of -inf and the item size; every target row checked in range.
struct SparseArgs {
    I64View st, rw;
    long long bits = 0, isz = 0;
    Mask2D m;
    bool has_rows = false;
    bool open(PyObject* const* args, int i_states, int i_logits, int i_rows, int i_bits, const char* what) {
        if (!st.open(args[i_states], "states")) return false;
        bits = PyLong_AsLongLong(args[i_bits]);
        isz = PyLong_AsLongLong(args[i_bits + 1]);
        if (PyErr_Occurred()) return false;
        if (isz != 2 && isz != 4) {
            PyErr_SetString(PyExc_ValueError, "itemsize must be 2 or 4");
            return false;
        }
        if (!m.open(args[i_logits], static_cast<int>(isz), what)) return false;
        has_rows = args[i_rows] != Py_None;
        if (has_rows && !rw.open(args[i_rows], "rows")) return false;
        if (has_rows && rw.n != st.n) {
            PyErr_SetString(PyExc_ValueError, "states and rows differ in length");
            return false;
        }
        for (int64_t i = 0; i < st.n; ++i) {
            int64_t r = row(i);
            if (r < 0 || r >= m.rows) {
                PyErr_Format(PyExc_IndexError, "row %lld out of range for %lld %s rows",
                             static_cast<long long>(r), static_cast<long long>(m.rows), what);
                return false;
            }
        }
        return true;
    }
    int64_t row(int64_t i) const { return has_rows ? rw.p[i] : i; }
};

// apply_sparse(states, logits, rows_or_None, neg_inf_bits: int, itemsize: int)
// Row rows[i] of logits keeps the values of the tokens allowed at states[i]; every other entry
// becomes -inf (given as the bit pattern of the logits' dtype). Touches each row once.
PyObject* Core_apply_sparse(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "apply_sparse(states, logits, rows, neg_inf_bits, itemsize)");
        return nullptr;
    }
    SparseArgs a;
    if (!a.open(args, 0, 1, 2, 3, "logits")) return nullptr;
    const int64_t V = a.m.words;
    const long long bits = a.bits, isz = a.isz;
    std::vector<uint32_t> keep;
    std::vector<int32_t> scratch;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t i = 0; i < a.st.n; ++i) {
        int64_t s = valid_state(self, a.st.p[i]);
        int64_t hi;
        const int32_t* tk = row_ids(self, s, &hi, scratch);
        char* row = a.m.base + a.row(i) * a.m.row_stride;
        keep.resize(static_cast<size_t>(hi));
        if (isz == 4) {
            uint32_t* x = reinterpret_cast<uint32_t*>(row);
            for (int64_t j = 0; j < hi; ++j) {
                int32_t t = tk[j];
                keep[static_cast<size_t>(j)] = t < V ? x[t] : 0;
            }
            std::fill(x, x + V, static_cast<uint32_t>(bits));
            for (int64_t j = 0; j < hi; ++j) {
                int32_t t = tk[j];
                if (t < V) x[t] = keep[static_cast<size_t>(j)];
            }
        } else {
            uint16_t* x = reinterpret_cast<uint16_t*>(row);
            for (int64_t j = 0; j < hi; ++j) {
                int32_t t = tk[j];
                keep[static_cast<size_t>(j)] = t < V ? x[t] : 0;
            }
            std::fill(x, x + V, static_cast<uint16_t>(bits));
            for (int64_t j = 0; j < hi; ++j) {
                int32_t t = tk[j];
                if (t < V) x[t] = static_cast<uint16_t>(keep[static_cast<size_t>(j)]);
            }
        }
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

// copy_sparse(states, src_or_None, dst, rows_or_None, neg_inf_bits: int, itemsize: int)
// Only the tokens allowed at states[i] in row rows[i] of dst are written: copied from the same
// row of src, or set to -inf when src is None (undoing an earlier copy). Nothing else is touched:
// a dst kept at -inf serves as masked logits at the cost of the allowed tokens alone.
PyObject* Core_copy_sparse(CoreObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "copy_sparse(states, src, dst, rows, neg_inf_bits, itemsize)");
        return nullptr;
    }
    SparseArgs a;
    if (!a.open(args, 0, 2, 3, 4, "dst")) return nullptr;
    Mask2D src;
    const bool has_src = args[1] != Py_None;
    if (has_src) {
        if (!src.open(args[1], static_cast<int>(a.isz), "src")) return nullptr;
        if (src.words != a.m.words || src.rows != a.m.rows) {
            PyErr_SetString(PyExc_ValueError, "src and dst differ in shape");
            return nullptr;
        }
    }
    const int64_t V = a.m.words;
    const long long bits = a.bits, isz = a.isz;
    std::vector<int32_t> scratch;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t i = 0; i < a.st.n; ++i) {
        int64_t s = valid_state(self, a.st.p[i]);
        int64_t lo = 0, hi;
        const int32_t* tk = row_ids(self, s, &hi, scratch);
        const int64_t r = a.row(i);
        char* row = a.m.base + r * a.m.row_stride;
        const char* from = has_src ? src.base + r * src.row_stride : nullptr;
        if (isz == 4) {
            uint32_t* x = reinterpret_cast<uint32_t*>(row);
            const uint32_t* y = reinterpret_cast<const uint32_t*>(from);
            for (int64_t j = lo; j < hi; ++j) {
                int32_t t = tk[j];
                if (t < V) x[t] = y ? y[t] : static_cast<uint32_t>(bits);
            }
        } else {
            uint16_t* x = reinterpret_cast<uint16_t*>(row);
            const uint16_t* y = reinterpret_cast<const uint16_t*>(from);
            for (int64_t j = lo; j < hi; ++j) {
                int32_t t = tk[j];
                if (t < V) x[t] = y ? y[t] : static_cast<uint16_t>(bits);
            }
        }
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

PyObject* Core_get_end(CoreObject* self, void*) { return PyLong_FromLongLong(self->end_state); }
PyObject* Core_get_dead(CoreObject* self, void*) { return PyLong_FromLongLong(self->dead_state); }

PyMethodDef Core_methods[] = {
    {"advance", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_advance)),
     METH_FASTCALL, "advance(state, token) -> next state (DEAD if refused)"},
    {"mask", reinterpret_cast<PyCFunction>(Core_mask), METH_O,
     "mask(state) -> allowed ids (read-only int32 view)"},
    {"is_terminal", reinterpret_cast<PyCFunction>(Core_is_terminal), METH_O, "is_terminal(state)"},
    {"fill", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_fill)),
     METH_FASTCALL | METH_KEYWORDS, "fill(state, bitmask, index=0)"},
    {"advance_batch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_advance_batch)),
     METH_FASTCALL, "advance_batch(states, tokens, out)"},
    {"fill_batch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_fill_batch)),
     METH_FASTCALL, "fill_batch(states, bitmask, rows)"},
    {"apply_sparse", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_apply_sparse)),
     METH_FASTCALL, "apply_sparse(states, logits, rows, neg_inf_bits, itemsize)"},
    {"copy_sparse", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Core_copy_sparse)),
     METH_FASTCALL, "copy_sparse(states, src, dst, rows, neg_inf_bits, itemsize)"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef Core_getset[] = {
    {"END", reinterpret_cast<getter>(Core_get_end), nullptr, "end state", nullptr},
    {"DEAD", reinterpret_cast<getter>(Core_get_dead), nullptr, "dead state", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ------------------------------------------------------------------------------------------------
// MatcherBase: one request's state and history; native steps when given a Core, else it calls
// the Python ``advance`` it was given (the numpy reference path).

struct MatcherObject {
    PyObject_HEAD
    CoreObject* core;     // may be null
    PyObject* advance;    // Python callable (used when core is null)
    PyObject* mask_fn;    // Python callable (used when core is null)
    int64_t state, root, end_state, dead_state, max_rollback;
    int64_t ended_at;  // the state an end id was accepted at (value() after termination)
    std::vector<int64_t>* history;
};

PyTypeObject MatcherType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void Matcher_dealloc(MatcherObject* self) {
    Py_XDECREF(self->core);
    Py_XDECREF(self->advance);
    Py_XDECREF(self->mask_fn);
    delete self->history;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

PyObject* Matcher_new(PyTypeObject* type, PyObject*, PyObject*) {
    auto* self = reinterpret_cast<MatcherObject*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    self->history = new std::vector<int64_t>();
    self->max_rollback = -1;
    self->ended_at = -1;
    return reinterpret_cast<PyObject*>(self);
}

// _init_core(core_or_None, advance, mask, root, end, dead, max_rollback)
PyObject* Matcher_init_core(MatcherObject* self, PyObject* args) {
    PyObject *core, *adv, *mask;
    long long root, end, dead, maxr;
    if (!PyArg_ParseTuple(args, "OOOLLLL", &core, &adv, &mask, &root, &end, &dead, &maxr))
        return nullptr;
    if (core != Py_None && !PyObject_TypeCheck(core, &CoreType)) {
        PyErr_SetString(PyExc_TypeError, "core must be a Core or None");
        return nullptr;
    }
    Py_XSETREF(self->core, core == Py_None ? nullptr : reinterpret_cast<CoreObject*>(Py_NewRef(core)));
    Py_XSETREF(self->advance, Py_NewRef(adv));
    Py_XSETREF(self->mask_fn, Py_NewRef(mask));
    self->root = root;
    self->state = root;
    self->end_state = end;
    self->dead_state = dead;
    self->max_rollback = maxr;
    self->ended_at = -1;
    self->history->clear();
    Py_RETURN_NONE;
}

// the state after ``token`` from ``state`` (dead_state if refused; nothing follows end_state)
inline bool matcher_next(MatcherObject* self, int64_t state, int64_t token, int64_t* nxt) {
    if (state == self->end_state) {
        *nxt = self->dead_state;
        return true;
    }
    if (self->core) {
        *nxt = core_advance(self->core, state, token);
        return true;
    }
    if (!self->advance) {
        PyErr_SetString(PyExc_RuntimeError, "matcher not initialised");
        return false;
    }
    PyObject* r = PyObject_CallFunction(self->advance, "LL", static_cast<long long>(state),
                                        static_cast<long long>(token));
    if (!r) return false;
    bool okv = as_i64(r, nxt);
    Py_DECREF(r);
    return okv;
}

inline void matcher_push(MatcherObject* self, int64_t nxt) {
    if (nxt == self->end_state) self->ended_at = self->state;
    auto& h = *self->history;
    h.push_back(self->state);
    if (self->max_rollback >= 0 && static_cast<int64_t>(h.size()) > self->max_rollback)
        h.erase(h.begin());
    self->state = nxt;
}

inline bool matcher_step(MatcherObject* self, int64_t token, bool* accepted) {
    int64_t nxt;
    if (!matcher_next(self, self->state, token, &nxt)) return false;
    if (nxt == self->dead_state) {
        *accepted = false;
        return true;
    }
    matcher_push(self, nxt);
    *accepted = true;
    return true;
}

PyObject* Matcher_accept_token(MatcherObject* self, PyObject* arg) {
    int64_t t;
    if (!as_i64(arg, &t)) return nullptr;
    bool acc;
    if (!matcher_step(self, t, &acc)) return nullptr;
    if (acc) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

PyObject* Matcher_rollback(MatcherObject* self, PyObject* arg) {
    int64_t k;
    if (!as_i64(arg, &k)) return nullptr;
    auto& h = *self->history;
    if (k < 0 || k > static_cast<int64_t>(h.size())) {
        PyErr_Format(PyExc_ValueError, "num_tokens=%lld: can roll back 0..%zd tokens",
                     static_cast<long long>(k), h.size());
        return nullptr;
    }
    if (k) {
        self->state = h[h.size() - static_cast<size_t>(k)];
        h.resize(h.size() - static_cast<size_t>(k));
    }
    Py_RETURN_NONE;
}

PyObject* Matcher_accept_tokens(MatcherObject* self, PyObject* arg) {
    PyObject* seq = PySequence_Fast(arg, "token_ids must be a sequence of ints");
    if (!seq) return nullptr;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    // all or nothing: walk first, change the state only if every token is accepted
    std::vector<int64_t> states;
    states.reserve(static_cast<size_t>(n));
    int64_t s = self->state;
    for (Py_ssize_t i = 0; i < n; ++i) {
        int64_t t;
        if (!as_i64(PySequence_Fast_GET_ITEM(seq, i), &t) || !matcher_next(self, s, t, &s)) {
            Py_DECREF(seq);
            return nullptr;
        }
        if (s == self->dead_state) {
            Py_DECREF(seq);
            Py_RETURN_FALSE;
        }
        states.push_back(s);
    }
    Py_DECREF(seq);
    for (int64_t nxt : states) matcher_push(self, nxt);
    Py_RETURN_TRUE;
}

PyObject* Matcher_reset(MatcherObject* self, PyObject*) {
    self->state = self->root;
    self->ended_at = -1;
    self->history->clear();
    Py_RETURN_NONE;
}

PyObject* Matcher_is_terminated(MatcherObject* self, PyObject*) {
    if (self->state == self->end_state) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

PyObject* Matcher_allowed_token_ids(MatcherObject* self, PyObject*) {
    if (self->core) return make_mask(self->core, self->state);
    if (!self->mask_fn) {
        PyErr_SetString(PyExc_RuntimeError, "matcher not initialised");
        return nullptr;
    }
    return PyObject_CallFunction(self->mask_fn, "L", static_cast<long long>(self->state));
}

PyObject* Matcher_get_state(MatcherObject* self, void*) { return PyLong_FromLongLong(self->state); }
int Matcher_set_state(MatcherObject* self, PyObject* v, void*) {
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete state");
        return -1;
    }
    int64_t s;
    if (!as_i64(v, &s)) return -1;
    self->state = s;
    return 0;
}
PyObject* Matcher_get_num(MatcherObject* self, void*) {
    return PyLong_FromSize_t(self->history->size());
}
PyObject* Matcher_get_ended_at(MatcherObject* self, void*) {
    return PyLong_FromLongLong(self->ended_at);
}

PyMethodDef Matcher_methods[] = {
    {"_init_core", reinterpret_cast<PyCFunction>(Matcher_init_core), METH_VARARGS, nullptr},
    {"accept_token", reinterpret_cast<PyCFunction>(Matcher_accept_token), METH_O,
     "Advance by one token; False (state unchanged) if the token is not allowed, or the "
     "matcher is already terminated."},
    {"accept_tokens", reinterpret_cast<PyCFunction>(Matcher_accept_tokens), METH_O,
     "Accept all of token_ids, or none: False (state unchanged) if one is refused."},
    {"rollback", reinterpret_cast<PyCFunction>(Matcher_rollback), METH_O,
     "Undo the last num_tokens accepted tokens."},
    {"reset", reinterpret_cast<PyCFunction>(Matcher_reset), METH_NOARGS,
     "Back to the root, history cleared."},
    {"is_terminated", reinterpret_cast<PyCFunction>(Matcher_is_terminated), METH_NOARGS,
     "An end id has been accepted."},
    {"allowed_token_ids", reinterpret_cast<PyCFunction>(Matcher_allowed_token_ids), METH_NOARGS,
     "Sorted ids allowed next (end ids included where a value is complete)."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef Matcher_getset[] = {
    {"state", reinterpret_cast<getter>(Matcher_get_state), reinterpret_cast<setter>(Matcher_set_state),
     "The current state (a node id of the set).", nullptr},
    {"num_accepted", reinterpret_cast<getter>(Matcher_get_num), nullptr,
     "Tokens accepted and not rolled back (bounded by max_rollback_tokens).", nullptr},
    {"_ended_at", reinterpret_cast<getter>(Matcher_get_ended_at), nullptr,
     "The state an end id was accepted at (-1: none).", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ------------------------------------------------------------------------------------------------

// -- tool-argument automata: per-state token masks of a byte DFA -----------------------------------

struct I32View : HeldBuffer {
    const int32_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o, const char* what) {
        if (!get(o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return false;
        const char f = item_code();
        if (b.itemsize != 4 || !(f == 'i' || f == 'l')) {
            PyErr_Format(PyExc_TypeError, "%s: expected a contiguous int32 array", what);
            return false;
        }
        p = static_cast<const int32_t*>(b.buf);
        n = b.len / 4;
        return true;
    }
};

// An automaton's transition table: int32, or int16 / int8 (a tool automaton stores the
// narrowest type its state count allows: at 10,000 tools the tables are most of what a registry
// holds), read as int32 (a narrower table is widened into a copy of our own: a few KB per call).
struct TableView : I32View {
    std::vector<int32_t> wide;
    bool open(PyObject* o, const char* what) {
        if (!get(o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return false;
        const char f = item_code();
        if (b.itemsize == 4 && (f == 'i' || f == 'l')) {
            p = static_cast<const int32_t*>(b.buf);
            n = b.len / 4;
            return true;
        }
        if (!((b.itemsize == 2 && f == 'h') || (b.itemsize == 1 && f == 'b'))) {
            PyErr_Format(PyExc_TypeError, "%s: expected a contiguous int32, int16 or int8 array", what);
            return false;
        }
        n = b.len / b.itemsize;
        if (b.itemsize == 2)
            wide.assign(static_cast<const int16_t*>(b.buf), static_cast<const int16_t*>(b.buf) + n);
        else
            wide.assign(static_cast<const int8_t*>(b.buf), static_cast<const int8_t*>(b.buf) + n);
        p = wide.data();
        return true;
    }
};

// A C-contiguous buffer of any item type read as bytes, released when the view goes.
struct ByteView : HeldBuffer {
    const uint8_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o) {
        if (!get(o, PyBUF_C_CONTIGUOUS)) return false;
        p = static_cast<const uint8_t*>(b.buf);
        n = b.len;
        return true;
    }
};

// The (table, byte_class, states) arguments of dfa_masks / dfa_list_masks: a 2-D table whose
// targets are states or negative (no edge), 256 classes naming its columns, states from
// min_state (-1: "no state" allowed) to the last. False with a ValueError set otherwise.
bool check_dfa(const TableView& tab, const I32View& cls, const I64View& st, int64_t min_state) {
    if (cls.n != 256 || tab.b.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "table must be 2-D and byte_class hold 256 entries");
        return false;
    }
    const int64_t ns = tab.b.shape[0], nc = tab.b.shape[1];
    for (int64_t i = 0; i < 256; ++i)
        if (cls.p[i] < 0 || cls.p[i] >= nc) {
            PyErr_SetString(PyExc_ValueError, "byte_class names a column past the table");
            return false;
        }
    for (int64_t i = 0; i < st.n; ++i)
        if (st.p[i] < min_state || st.p[i] >= ns) {
            PyErr_SetString(PyExc_ValueError, "states: out of range");
            return false;
        }
    for (int64_t i = 0; i < ns * nc; ++i)
        if (tab.p[i] >= ns) {
            PyErr_SetString(PyExc_ValueError, "table: a target past the last state");
            return false;
        }
    return true;
}

// (a, b), stealing both references; nullptr (and both released) if either is nullptr
PyObject* pair_result(PyObject* a, PyObject* b) {
    if (!a || !b) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return nullptr;
    }
    return Py_BuildValue("(NN)", a, b);
}

// (a, b, c, d), stealing the four references; nullptr (and all released) if any is nullptr
PyObject* quad_result(PyObject* a, PyObject* b, PyObject* c, PyObject* d) {
    if (!a || !b || !c || !d) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_XDECREF(d);
        return nullptr;
    }
    return Py_BuildValue("(NNNN)", a, b, c, d);
}

PyObject* csr_result(Buf<int64_t>& ptr, Buf<int32_t>& ids) {
    PyObject* a = to_numpy(ptr, NPY_INT64);
    return pair_result(a, to_numpy(ids, NPY_INT32));
}

// The shape of a trie for dfa_masks' row sharing (built once per trie, under the GIL).
const TrieShape* trie_shape(TokenTrieObject* t) {
    if (t->shape) return t->shape;
    auto* sh = new TrieShape;
    const TT tt(t);
    const size_t n = static_cast<size_t>(t->n_nodes);
    sh->depth.assign(n, 0);
    sh->height.assign(n, 0);
    bool ok = n > 0;
    int32_t top = -1;
    for (size_t u = 0; u < n && ok; ++u) {
        for (int32_t j = tt.si[u].clo; j < tt.si[u].chi; ++j) {
            const int32_t c = tt.cnode[j];
            if (c <= static_cast<int32_t>(u) || static_cast<size_t>(c) >= n) {
                ok = false;  // not preorder: no sharing
                break;
            }
            if (sh->depth[u] >= 65534) {
                ok = false;  // a token too long for the shape
                break;
            }
            sh->depth[static_cast<size_t>(c)] = static_cast<uint16_t>(sh->depth[u] + 1);
        }
        for (int32_t k = tt.tptr[u]; k < tt.tptr[u + 1]; ++k) top = std::max(top, tt.tids[k]);
    }
    for (int b = 0; b < 256 && ok; ++b)
        if (t->root_child[b] >= 0 && sh->depth[static_cast<size_t>(t->root_child[b])] != 1) ok = false;
    if (ok) {
        for (size_t u = n; u-- > 0;) {
            uint16_t h = tt.tptr[u + 1] > tt.tptr[u] ? sh->depth[u] : 0;
            for (int32_t j = tt.si[u].clo; j < tt.si[u].chi; ++j)
                h = std::max(h, sh->height[static_cast<size_t>(tt.cnode[j])]);
            sh->height[u] = h;
        }
        sh->max_len = sh->height[0];
        ok = sh->max_len < 65535;
    }
    if (ok) {
        sh->tok_len.assign(static_cast<size_t>(top + 1), 0);
        for (size_t u = 0; u < n; ++u)
            for (int32_t k = tt.tptr[u]; k < tt.tptr[u + 1]; ++k)
                sh->tok_len[static_cast<size_t>(tt.tids[k])] = static_cast<uint16_t>(sh->depth[u]);
    }
    sh->ok = ok;
    t->shape = sh;
    return sh;
}

// The token trie seen through one table's byte classes: tokens whose bytes have
// the same classes, position by position, end at one node (their rows are alike at every state
// of that table). Over few classes it is far smaller than the token trie: [a-z0-9-]{1,64} has
// 3 classes, its live bytes reach ~21,000 trie nodes and 112 class nodes, so each of its 66
// rows walks the class nodes instead of up to 21,000 trie nodes. Only bytes of a class with an
// edge somewhere in the table are followed (the others are in no row).
struct ClassTrie {
    std::vector<int32_t> child;     // (node, class) -> node, -1: none
    std::vector<uint16_t> depth;    // the bytes to the node (= the length of its tokens)
    std::vector<uint16_t> height;   // the longest token in the subtree (0: none)
    std::vector<int32_t> tptr, tids;  // the tokens ending at each node (CSR)
};

// Builds the class trie of ``tt`` (root children ``root_child``) over classes ``cls`` (table
// ``tab``: ns rows of nc), for walks from the automaton states ``from`` (n_from of them): a
// class string no state of ``from`` can walk gets no node (tokens spelling it are in no row
// of theirs: [A-Z]{3}-[0-9]{2,4} keeps the tokens of at most 3 capitals, not every capitals
// token of the vocabulary). The states each class node is reached in are tracked as a bitset
// when ns <= kPruneMaxStates (else every class string over live classes gets its node). False
// (nothing usable) when it would merge too little to pay: past ``max_cells`` (node, class)
// cells, or at fewer than 4 trie nodes per class node once 65,536 trie nodes are in.
constexpr int64_t kPruneMaxStates = 1024;
bool build_class_trie(ClassTrie& ct, const TT& tt, const int32_t* root_child, const int32_t* tab,
                      int64_t ns, int64_t nc, const int32_t* cls, int64_t max_cells,
                      const int64_t* from, int64_t n_from) {
    std::vector<uint8_t> live_class(static_cast<size_t>(nc), 0);
    for (int64_t k = 0; k < ns * nc; ++k)
        if (tab[k] >= 0) live_class[static_cast<size_t>(k % nc)] = 1;
    int16_t byte_class[256];  // the byte's class, -1: no edge anywhere
    for (int b = 0; b < 256; ++b) byte_class[b] = live_class[static_cast<size_t>(cls[b])] ? static_cast<int16_t>(cls[b]) : -1;
    ct.child.assign(static_cast<size_t>(nc), -1);
    ct.depth.assign(1, 0);
    // per class node, the states its class string leads to from ``from`` (bitsets of sw words)
    const bool prune = ns <= kPruneMaxStates && nc <= 32;
    const size_t sw = prune ? static_cast<size_t>((ns + 63) / 64) : 0;
    std::vector<uint64_t> sets(sw, 0);
    // per state, its classes with an edge; per class node, those of its states (the classes
    // its children can take)
    std::vector<uint32_t> qmask(prune ? static_cast<size_t>(ns) : 0, 0), cmask;
    uint32_t all_live = 0;
    for (int64_t k = 0; k < nc; ++k)
        if (live_class[static_cast<size_t>(k)]) all_live |= uint32_t{1} << (k & 31);
    for (int64_t q = 0; q < ns && prune; ++q)
        for (int64_t k = 0; k < nc; ++k)
            if (tab[q * nc + k] >= 0) qmask[static_cast<size_t>(q)] |= uint32_t{1} << k;
    cmask.push_back(prune ? 0 : all_live);
    for (int64_t i = 0; i < n_from && prune; ++i) {
        sets[static_cast<size_t>(from[i]) >> 6] |= uint64_t{1} << (from[i] & 63);
        cmask[0] |= qmask[static_cast<size_t>(from[i])];
    }
    uint64_t class_bits[32][4] = {};  // each class's bytes (256-bit sets)
    for (int b = 0; b < 256 && prune; ++b)
        if (byte_class[b] >= 0) class_bits[byte_class[b]][b >> 6] |= uint64_t{1} << (b & 63);
    uint8_t look[256];  // the bytes a node's children can take, ascending
    std::vector<int32_t> parent(1, -1);
    std::vector<std::pair<int32_t, int32_t>> toks;  // (class node, token)
    std::vector<std::pair<int32_t, int32_t>> stack{{0, 0}};  // (trie node, class node)
    int64_t visits = 0;
    constexpr int32_t kNone = -2;  // (node, class): no state walks it
    while (!stack.empty()) {
        auto [u, cu] = stack.back();
        stack.pop_back();
        auto enter = [&](int32_t c, uint8_t b) {
            const int16_t k = byte_class[b];
            if (k < 0) return;
            const size_t cell = static_cast<size_t>(cu) * static_cast<size_t>(nc) + static_cast<size_t>(k);
            int32_t v = ct.child[cell];
            if (v == kNone) return;
            if (v < 0) {
                if (prune) {  // the states after class k: none, and the node is not made
                    const size_t base = sets.size();
                    sets.resize(base + sw, 0);
                    const uint64_t* at = sets.data() + static_cast<size_t>(cu) * sw;
                    uint64_t* to = sets.data() + base;
                    uint32_t m = 0;
                    bool any = false;
                    for (size_t w = 0; w < sw; ++w)
                        for (uint64_t x = at[w]; x; x &= x - 1) {
                            const int64_t q = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x)));
                            const int32_t q2 = tab[q * nc + k];
                            if (q2 >= 0) {
                                to[static_cast<size_t>(q2) >> 6] |= uint64_t{1} << (q2 & 63);
                                m |= qmask[static_cast<size_t>(q2)];
                                any = true;
                            }
                        }
                    if (!any) {
                        sets.resize(base);
                        ct.child[cell] = kNone;
                        return;
                    }
                    cmask.push_back(m);
                } else {
                    cmask.push_back(all_live);
                }
                v = static_cast<int32_t>(ct.depth.size());
                ct.child[cell] = v;
                ct.child.resize(ct.child.size() + static_cast<size_t>(nc), -1);
                ct.depth.push_back(static_cast<uint16_t>(ct.depth[static_cast<size_t>(cu)] + 1));
                parent.push_back(cu);
            }
            for (int32_t k2 = tt.tptr[c]; k2 < tt.tptr[c + 1]; ++k2) toks.emplace_back(v, tt.tids[k2]);
            if (tt.si[c].chi > tt.si[c].clo) stack.emplace_back(c, v);
            ++visits;
        };
        const uint32_t m = cmask[static_cast<size_t>(cu)];
        const int32_t lo = u == 0 ? 0 : tt.si[u].clo, hi = u == 0 ? 0 : tt.si[u].chi;
        int32_t nl = 0;  // the bytes of m's classes, when few against the node's children
        if (prune && (u == 0 || hi - lo > 8)) {
            uint64_t set[4] = {0, 0, 0, 0};
            for (uint32_t x = m; x; x &= x - 1)
                for (int w = 0; w < 4; ++w) set[w] |= class_bits[__builtin_ctz(x)][w];
            for (int w = 0; w < 4; ++w)
                for (uint64_t x = set[w]; x; x &= x - 1) look[nl++] = static_cast<uint8_t>(w * 64 + __builtin_ctzll(x));
        }
        if (u == 0) {
            if (prune) {
                for (int32_t j = 0; j < nl; ++j)
                    if (root_child[look[j]] >= 0) enter(root_child[look[j]], look[j]);
            } else {
                for (int b = 0; b < 256; ++b)
                    if (root_child[b] >= 0) enter(root_child[b], static_cast<uint8_t>(b));
            }
        } else if (prune && hi - lo > 8 && 4 * nl < hi - lo) {  // look the few bytes up
            int32_t at = lo;
            for (int32_t j = 0; j < nl && at < hi; ++j) {
                at = static_cast<int32_t>(std::lower_bound(tt.clab + at, tt.clab + hi, look[j]) - tt.clab);
                if (at < hi && tt.clab[at] == look[j]) enter(tt.cnode[at], look[j]);
            }
        } else {
            for (int32_t j = lo; j < hi; ++j) {
                const int16_t k = byte_class[tt.clab[j]];
                if (k >= 0 && ((m >> k) & 1)) enter(tt.cnode[j], tt.clab[j]);
            }
        }
        if (static_cast<int64_t>(ct.child.size()) > max_cells ||
            (visits >= 65536 && 4 * static_cast<int64_t>(ct.depth.size()) > visits) ||
            ct.depth.back() >= 65535)
            return false;
    }
    const size_t n = ct.depth.size();
    ct.height.assign(n, 0);
    ct.tptr.assign(n + 1, 0);
    for (const auto& [v, t] : toks) {
        ct.tptr[static_cast<size_t>(v) + 1]++;
        ct.height[static_cast<size_t>(v)] = ct.depth[static_cast<size_t>(v)];
    }
    for (size_t v = n; v-- > 1;) {  // children after their parent: heights bottom-up
        uint16_t& h = ct.height[static_cast<size_t>(parent[v])];
        h = std::max(h, ct.height[v]);
    }
    for (size_t v = 0; v < n; ++v) ct.tptr[v + 1] += ct.tptr[v];
    ct.tids.resize(toks.size());
    std::vector<int32_t> at(ct.tptr.begin(), ct.tptr.end() - 1);
    for (const auto& [v, t] : toks) ct.tids[static_cast<size_t>(at[static_cast<size_t>(v)]++)] = t;
    return true;
}

// An error found with the GIL released (no Python call is allowed there), raised once the GIL
// is held again.
struct RunError {
    enum Kind { kNone, kNoMemory, kRange, kAmbiguous } kind = kNone;
    const char* what = "";
    int64_t src = 0, byte = 0;
    bool range(const char* w) {
        kind = kRange;
        what = w;
        return false;
    }
    bool no_memory() {
        kind = kNoMemory;
        return false;
    }
    PyObject* raise() const {  // nullptr, with the Python error set
        switch (kind) {
            case kRange:
                PyErr_Format(PyExc_ValueError, "dfa_wire: %s out of range", what);
                break;
            case kAmbiguous:
                PyErr_Format(PyExc_ValueError, "ambiguous continuation on byte %d at state %lld",
                             static_cast<int>(byte), static_cast<long long>(src));
                break;
            default:
                PyErr_NoMemory();
        }
        return nullptr;
    }
};

// A list of Python ints, or a contiguous 1-D int64 array, read as int64 (dfa_wire's small
// arguments: converting lists in C saves an array per argument and call).
struct I64Seq {
    I64View view;
    std::vector<int64_t> own;
    const int64_t* p = nullptr;
    int64_t n = 0;
    bool open(PyObject* o, const char* what) {
        if (!PyList_Check(o)) {
            if (!view.open(o, what)) return false;
            p = view.p;
            n = view.n;
            return true;
        }
        const Py_ssize_t m = PyList_GET_SIZE(o);
        try {
            own.resize(static_cast<size_t>(m));
        } catch (const std::bad_alloc&) {
            PyErr_NoMemory();
            return false;
        }
        for (Py_ssize_t i = 0; i < m; ++i) {
            const long long v = PyLong_AsLongLong(PyList_GET_ITEM(o, i));
            if (v == -1 && PyErr_Occurred()) return false;
            own[static_cast<size_t>(i)] = v;
        }
        p = own.data();
        n = m;
        return true;
    }
};

// The arguments of one dfa_wire call (below), opened under the GIL (wire_open); the wiring
// itself (wire_run) makes no Python call, so it can run with the GIL released (dfa_masks with
// a wire: the masks' worker thread wires an eager registry's automata).
struct Wire {
    std::vector<I32View> fs, fb, fd;
    I64Seq offs, lstate, lfrom, extra;
    int64_t n = 0;
    RunError err;
};

// False with a Python error set when ``args`` is not a tuple of dfa_wire's arguments. The
// edges' ranges are checked by wire_run.
bool wire_open(Wire& w, PyObject* args) {
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
    return true;
}

// The wiring of an opened call into (os, ob, od) (no Python call). False with w.err set.
bool wire_run(Wire& w, Buf<int32_t>& os, Buf<int32_t>& ob, Buf<int32_t>& od) {
    const int64_t n = w.n;
    const std::vector<I32View>&fs = w.fs, &fb = w.fb, &fd = w.fd;
    const I64Seq &offs = w.offs, &lstate = w.lstate, &lfrom = w.lfrom, &extra = w.extra;
    const size_t nf = fs.size();
    auto bad = [&](const char* what) { return w.err.range(what); };
    try {
        // which fragments are runs: edges in range, keys strictly increasing, above the last run
        std::vector<uint8_t> run(nf, 0);
        int64_t total = 0, last_key = -1;
        for (size_t k = 0; k < nf; ++k) {
            const int64_t off = offs.p[k], m = fs[k].n;
            bool sorted = true;
            int64_t prev = last_key;
            for (int64_t e = 0; e < m; ++e) {
                const int64_t s = fs[k].p[e] + off, b = fb[k].p[e], d = fd[k].p[e] + off;
                if (s < 0 || s >= n || d < 0 || d >= n || b < 0 || b > 255) return bad("a fragment edge");
                const int64_t key = s * 256 + b;
                if (key <= prev) sorted = false;
                prev = key;
            }
            total += m;
            if (sorted) {
                run[k] = 1;
                if (m) last_key = prev;
            }
        }
        // the other edges, as (src, byte, dst)
        std::vector<int32_t> es, eb, ed;
        std::vector<std::vector<int32_t>> by_src(nf), first(nf);
        auto put = [&](int64_t s, int64_t b, int64_t d) {
            es.push_back(static_cast<int32_t>(s));
            eb.push_back(static_cast<int32_t>(b));
            ed.push_back(static_cast<int32_t>(d));
        };
        for (size_t k = 0; k < nf; ++k)
            if (!run[k])
                for (int64_t e = 0; e < fs[k].n; ++e) put(fs[k].p[e] + offs.p[k], fb[k].p[e], fd[k].p[e] + offs.p[k]);
        for (int64_t j = 0; j < lstate.n; ++j) {
            const int64_t s = lstate.p[j], f = lfrom.p[j] >> 32, local = lfrom.p[j] & 0xFFFFFFFF;
            if (s < 0 || s >= n || f < 0 || f >= static_cast<int64_t>(nf)) return bad("a link");
            const size_t k = static_cast<size_t>(f);
            const int64_t off = offs.p[k], m = fs[k].n;
            const int32_t* src = fs[k].p;
            if (run[k]) {  // sorted by source: the local state's edges are one range
                const int32_t* lo = std::lower_bound(src, src + m, static_cast<int32_t>(local));
                for (const int32_t* it = lo; it < src + m && *it == local; ++it) {
                    const int64_t e = it - src;
                    put(s, fb[k].p[e], fd[k].p[e] + off);
                }
                continue;
            }
            if (first[k].empty()) {  // local state -> its edges, in edge order
                int64_t top = 0;
                for (int64_t e = 0; e < m; ++e) top = std::max<int64_t>(top, src[e] + 1);
                first[k].assign(static_cast<size_t>(top) + 1, 0);
                for (int64_t e = 0; e < m; ++e) first[k][static_cast<size_t>(src[e]) + 1]++;
                for (size_t x = 1; x < first[k].size(); ++x) first[k][x] += first[k][x - 1];
                by_src[k].resize(static_cast<size_t>(m));
                std::vector<int32_t> at(first[k].begin(), first[k].end() - 1);
                for (int64_t e = 0; e < m; ++e)
                    by_src[k][static_cast<size_t>(at[static_cast<size_t>(src[e])]++)] = static_cast<int32_t>(e);
            }
            if (local < 0 || local + 1 >= static_cast<int64_t>(first[k].size())) continue;  // no edges
            for (int32_t x = first[k][static_cast<size_t>(local)]; x < first[k][static_cast<size_t>(local) + 1]; ++x) {
                const int32_t e = by_src[k][static_cast<size_t>(x)];
                put(s, fb[k].p[e], fd[k].p[e] + off);
            }
        }
        for (int64_t j = 0; j < extra.n; j += 3) {
            const int64_t s = extra.p[j], b = extra.p[j + 1], d = extra.p[j + 2];
            if (s < 0 || s >= n || d < 0 || d >= n || b < 0 || b > 255) return bad("an edge");
            put(s, b, d);
        }
        // the other edges grouped by source (counting sort)
        const size_t m = es.size();
        std::vector<int64_t> start(static_cast<size_t>(n) + 1, 0);
        std::vector<int32_t> order(m);
        const size_t cap = m + static_cast<size_t>(total);
        if (!os.reserve(cap) || !ob.reserve(cap) || !od.reserve(cap)) return w.err.no_memory();
        for (size_t e = 0; e < m; ++e) start[static_cast<size_t>(es[e]) + 1]++;
        for (size_t s = 0; s < static_cast<size_t>(n); ++s) start[s + 1] += start[s];
        {
            std::vector<int64_t> at(start.begin(), start.end() - 1);
            for (size_t e = 0; e < m; ++e) order[static_cast<size_t>(at[static_cast<size_t>(es[e])]++)] = static_cast<int32_t>(e);
        }
        auto emit = [&](int64_t s, int32_t b, int32_t d) {
            os.p[os.n++] = static_cast<int32_t>(s);
            ob.p[ob.n++] = b;
            od.p[od.n++] = d;
        };
        // the runs' edges in (src, byte) order: a cursor over the run fragments
        size_t rk = 0;
        int64_t re = 0;
        auto run_src = [&]() -> int64_t {  // source of the run cursor's edge, n when none is left
            while (rk < nf && (!run[rk] || re >= fs[rk].n)) {
                ++rk;
                re = 0;
            }
            return rk < nf ? fs[rk].p[re] + offs.p[rk] : n;
        };
        int32_t slot[256];
        std::fill(slot, slot + 256, -1);
        int64_t bad_src = -1, bad_byte = 256;
        int64_t rs = run_src();
        for (int64_t s = 0; s < n && bad_src < 0; ++s) {
            const int64_t g0 = start[static_cast<size_t>(s)], g1 = start[static_cast<size_t>(s) + 1];
            if (rs > s && g0 == g1) {  // nothing leaves s: skip to the next source with edges
                continue;
            }
            if (g0 == g1) {  // only run edges (keys strictly increasing): copied as they are
                while (rs == s) {
                    const int64_t off = offs.p[rk];
                    const int32_t* src = fs[rk].p;
                    while (re < fs[rk].n && src[re] + off == s) {
                        emit(s, fb[rk].p[re], fd[rk].p[re] + static_cast<int32_t>(off));
                        ++re;
                    }
                    rs = run_src();
                }
                continue;
            }
            uint64_t seen[4] = {0, 0, 0, 0};
            auto add = [&](int32_t b, int32_t d) {
                if (slot[b] < 0) {
                    slot[b] = d;
                    seen[b >> 6] |= uint64_t{1} << (b & 63);
                } else if (slot[b] != d && b < bad_byte) {
                    bad_src = s;
                    bad_byte = b;
                }
            };
            while (rs == s) {
                const int64_t off = offs.p[rk];
                const int32_t* src = fs[rk].p;
                while (re < fs[rk].n && src[re] + off == s) {
                    add(fb[rk].p[re], fd[rk].p[re] + static_cast<int32_t>(off));
                    ++re;
                }
                rs = run_src();
            }
            for (int64_t x = g0; x < g1; ++x) {
                const int32_t e = order[static_cast<size_t>(x)];
                add(eb[static_cast<size_t>(e)], ed[static_cast<size_t>(e)]);
            }
            for (int q = 0; q < 4; ++q)
                for (uint64_t bits = seen[q]; bits; bits &= bits - 1) {
                    const int b = q * 64 + __builtin_ctzll(bits);
                    emit(s, b, slot[b]);
                    slot[b] = -1;
                }
        }
        if (bad_src >= 0) {
            w.err.kind = RunError::kAmbiguous;
            w.err.src = bad_src;
            w.err.byte = bad_byte;
            return false;
        }
    } catch (const std::bad_alloc&) {
        return w.err.no_memory();
    }
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
    Wire w;
    if (!wire_open(w, args)) return nullptr;
    Buf<int32_t> os, ob, od;
    if (!wire_run(w, os, ob, od)) return w.err.raise();
    PyObject* a = to_numpy(os, NPY_INT32);
    PyObject* b = to_numpy(ob, NPY_INT32);
    PyObject* d = to_numpy(od, NPY_INT32);
    if (!a || !b || !d) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(d);
        return nullptr;
    }
    return Py_BuildValue("(NNN)", a, b, d);
}

// The byte classes of an automaton given as m edges (src --byte--> dst, in range, at most one
// per (src, byte); a repeated edge must be identical) and its dense table over them (n rows of
// nk columns, -1: no edge) into ``table``: bytes whose edges are the same at every state share
// a class, numbered in order of their smallest byte. No Python call; throws std::bad_alloc.
bool compress_run(const int32_t* src, const int32_t* byte, const int32_t* dst, int64_t m, int64_t n,
                  Buf<int32_t>& table, int32_t* cls, int64_t& nk) {
    // edges grouped by byte, each group in src order: a byte's group is its signature
    std::vector<int32_t> rep;
    std::vector<int64_t> start(257, 0);
    std::vector<std::pair<int32_t, int32_t>> ed(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) start[static_cast<size_t>(byte[i]) + 1]++;
    for (int b = 0; b < 256; ++b) start[static_cast<size_t>(b) + 1] += start[static_cast<size_t>(b)];
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    bool by_src = true;  // edges in src order (a stable grouping keeps each group sorted)
    for (int64_t i = 0; i < m; ++i) {
        ed[static_cast<size_t>(fill[static_cast<size_t>(byte[i])]++)] = {src[i], dst[i]};
        if (i && src[i] < src[i - 1]) by_src = false;
    }
    std::vector<uint64_t> h(256);
    for (int b = 0; b < 256; ++b) {
        auto lo = ed.begin() + start[static_cast<size_t>(b)], hi = ed.begin() + start[static_cast<size_t>(b) + 1];
        if (!by_src) std::sort(lo, hi);
        uint64_t x = 1469598103934665603ull ^ static_cast<uint64_t>(hi - lo);
        for (auto it = lo; it != hi; ++it)
            x = (x ^ (static_cast<uint64_t>(static_cast<uint32_t>(it->first)) << 32 |
                      static_cast<uint32_t>(it->second))) * 1099511628211ull;
        h[static_cast<size_t>(b)] = x;
    }
    for (int b = 0; b < 256; ++b) {
        const int64_t lb = start[static_cast<size_t>(b)], nb = start[static_cast<size_t>(b) + 1] - lb;
        int32_t k = -1;
        for (size_t r = 0; r < rep.size() && k < 0; ++r) {
            const int32_t a = rep[r];
            const int64_t la = start[static_cast<size_t>(a)], na = start[static_cast<size_t>(a) + 1] - la;
            if (h[static_cast<size_t>(a)] == h[static_cast<size_t>(b)] && na == nb &&
                std::equal(ed.begin() + la, ed.begin() + la + na, ed.begin() + lb))
                k = static_cast<int32_t>(r);
        }
        if (k < 0) {
            k = static_cast<int32_t>(rep.size());
            rep.push_back(b);
        }
        cls[b] = k;
    }
    nk = static_cast<int64_t>(rep.size());
    if (!table.resize(static_cast<size_t>(n * nk))) return false;
    int32_t* t = table.p;
    std::fill(t, t + n * nk, -1);
    for (int64_t k = 0; k < nk; ++k) {
        const int32_t b = rep[static_cast<size_t>(k)];
        for (int64_t e = start[static_cast<size_t>(b)]; e < start[static_cast<size_t>(b) + 1]; ++e)
            t[static_cast<int64_t>(ed[static_cast<size_t>(e)].first) * nk + k] = ed[static_cast<size_t>(e)].second;
    }
    return true;
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
    return pair_result(tab, tab ? to_numpy(cls, NPY_INT32) : nullptr);
}

// One dfa_masks call: its arguments opened and checked under the GIL (masks_open), its walks
// run with the GIL released (masks_run), its result made under the GIL (masks_result).
// dfa_masks runs one; dfa_masks_many a list of them in one release of the GIL. Destroyed
// under the GIL (it holds buffers and, in words mode, the rows array until handed out).
// Given a wire (dfa_wire's arguments) instead of a table and byte classes, the run first wires
// the automaton and compresses its bytes to classes (dfa_wire, then dfa_compress), and the
// result holds its table (in the narrowest signed type its states fit) and byte classes too.
struct MasksJob {
    TableView tab;
    int64_t ns = 0, nc = 0;  // the table's states and classes
    std::unique_ptr<Wire> wire;
    Buf<int32_t> wide;     // a wired automaton's table, walked
    Buf<int8_t> tab8;      // ... as the result holds it (int8, int16 or int32: ``wide``)
    Buf<int16_t> tab16;
    Buf<int32_t> own_cls;  // its byte classes
    RunError err;
    I32View cls;
    I64View st;
    ByteView altv;
    const uint8_t* alt = nullptr;
    TokenTrieObject* tri = nullptr;
    TokenTrieObject* alt_tri = nullptr;
    Py_ssize_t words = 0;
    int share_rows = 1;
    PyObject* rows_o = nullptr;
    uint32_t* rows = nullptr;
    const TrieShape* shape = nullptr;
    Buf<int64_t> ptr;
    Buf<int32_t> ids;
    Buf<int32_t> out;  // the rows in states' order, when they were computed in another order
    bool reordered = false;
    MasksJob() = default;
    MasksJob(const MasksJob&) = delete;
    MasksJob& operator=(const MasksJob&) = delete;
    ~MasksJob() { Py_XDECREF(rows_o); }
};

// False with a Python error set when the arguments are not a valid dfa_masks call.
bool masks_open(MasksJob& j, PyObject* args) {
    PyObject *tab_o = nullptr, *cls_o = nullptr, *st_o, *alt_o = nullptr, *wire_o = nullptr;
    PyObject* alt_tri_o = nullptr;
    if (PyTuple_GET_SIZE(args) > 0 && PyTuple_Check(PyTuple_GET_ITEM(args, 0))) {  // a wire
        if (!PyArg_ParseTuple(args, "O!OO!|nOOp", &PyTuple_Type, &wire_o, &st_o, &TokenTrieType, &j.tri, &j.words,
                              &alt_tri_o, &alt_o, &j.share_rows))
            return false;
        try {
            j.wire.reset(new Wire);
        } catch (const std::bad_alloc&) {
            PyErr_NoMemory();
            return false;
        }
        if (!wire_open(*j.wire, wire_o)) return false;
    } else if (!PyArg_ParseTuple(args, "OOOO!|nOOp", &tab_o, &cls_o, &st_o, &TokenTrieType, &j.tri, &j.words,
                                 &alt_tri_o, &alt_o, &j.share_rows)) {
        return false;
    }
    if (alt_tri_o == Py_None) alt_tri_o = nullptr;
    if (alt_tri_o && !PyObject_TypeCheck(alt_tri_o, &TokenTrieType)) {
        PyErr_SetString(PyExc_TypeError, "alt_trie must be a TokenTrie or None");
        return false;
    }
    j.alt_tri = reinterpret_cast<TokenTrieObject*>(alt_tri_o);
    if (!j.st.open(st_o, "states")) return false;
    if (!j.wire && (!j.tab.open(tab_o, "table") || !j.cls.open(cls_o, "byte_class"))) return false;
    if (j.alt_tri) {
        if (!alt_o || j.words != 0) {
            PyErr_SetString(PyExc_ValueError, "alt_trie needs alt (one flag per state) and words=0");
            return false;
        }
        if (!j.altv.open(alt_o)) return false;
        if (j.altv.n != j.st.n || j.altv.b.itemsize != 1) {
            PyErr_SetString(PyExc_ValueError, "alt: one byte per state");
            return false;
        }
        j.alt = j.altv.p;
    }
    if (j.wire) {  // the table is made by the run: the states checked against its size here
        for (int64_t i = 0; i < j.st.n; ++i)
            if (j.st.p[i] < -1 || j.st.p[i] >= j.wire->n) {
                PyErr_SetString(PyExc_ValueError, "states: out of range");
                return false;
            }
        j.ns = j.wire->n;
    } else {
        if (!check_dfa(j.tab, j.cls, j.st, -1)) return false;
        j.ns = j.tab.b.shape[0];
        j.nc = j.tab.b.shape[1];
    }
    if (!j.ptr.resize(static_cast<size_t>(j.st.n) + 1)) {
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
        npy_intp dims[2] = {static_cast<npy_intp>(j.st.n), static_cast<npy_intp>(j.words)};
        j.rows_o = PyArray_ZEROS(2, dims, NPY_INT32, 0);
        if (!j.rows_o) return false;
        j.rows = static_cast<uint32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(j.rows_o)));
    }
    // Row sharing (ids mode; the states walking ``tri``): the row of automaton state q is
    // the set of tokens whose bytes are all defined from q. Two states q, q' that agree on the
    // definedness of every byte string of length <= L (level L of Moore's partition
    // refinement, from one block, on definedness alone) agree on every token of length <= L:
    // row(q) = {t in row(q'): len(t) <= L} + the tokens longer than L walked from q, a walk
    // that enters only trie nodes holding a token longer than L below them. Past the longest
    // token (or once the partition is stable) the rows are equal: copied. Exact by
    // construction; the levels are built only when two such states have >= 16 live bytes.
    if (j.share_rows && j.words == 0 && j.st.n >= 2) {
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

// The walks of an opened job (no Python call: run with the GIL released). False: no memory.
bool masks_walk(MasksJob& j) {
    const TableView& tab = j.tab;
    const I32View& cls = j.cls;
    const I64View& st = j.st;
    const uint8_t* alt = j.alt;
    TokenTrieObject* tri = j.tri;
    TokenTrieObject* alt_tri = j.alt_tri;
    const Py_ssize_t words = j.words;
    const int share_rows = j.share_rows;
    uint32_t* rows = j.rows;
    const TrieShape* shape = j.shape;
    Buf<int64_t>& ptr = j.ptr;
    Buf<int32_t>& ids = j.ids;
    Buf<int32_t>& out = j.out;
    bool& reordered = j.reordered;
    const int64_t ns = j.ns, nc = j.nc;
    const TT tt_main(tri);
    const TT tt_alt(alt_tri ? alt_tri : tri);
    bool ok = true;
    try {
        // per automaton state, on first visit: its live bytes (ascending); at a trie node with
        // more children than the state has live bytes, the live bytes are looked up among the
        // children (sorted labels: binary search), else the children are scanned
        std::vector<int32_t> live_at(static_cast<size_t>(ns), -1), live_n(static_cast<size_t>(ns), 0);
        std::vector<uint8_t> live;
        // (branch fmt) each class's bytes as a 256-bit set: a state's live bytes are the union
        // of its live classes' sets, read out in ascending order
        std::vector<uint64_t> class_bits(static_cast<size_t>(nc) * 4, 0);
        for (int b = 0; b < 256; ++b)
            class_bits[static_cast<size_t>(cls.p[b]) * 4 + static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
        auto live_of = [&](int32_t q) {
            if (live_at[static_cast<size_t>(q)] < 0) {
                live_at[static_cast<size_t>(q)] = static_cast<int32_t>(live.size());
                const int32_t* qrow = tab.p + static_cast<int64_t>(q) * nc;
                uint64_t set[4] = {0, 0, 0, 0};
                for (int64_t c = 0; c < nc; ++c)
                    if (qrow[c] >= 0)
                        for (int w = 0; w < 4; ++w) set[w] |= class_bits[static_cast<size_t>(c) * 4 + static_cast<size_t>(w)];
                for (int w = 0; w < 4; ++w)
                    for (uint64_t x = set[w]; x; x &= x - 1)
                        live.push_back(static_cast<uint8_t>(w * 64 + __builtin_ctzll(x)));
                live_n[static_cast<size_t>(q)] =
                    static_cast<int32_t>(live.size()) - live_at[static_cast<size_t>(q)];
            }
        };
        auto shared = [&](int64_t i) { return st.p[i] >= 0 && !(alt && alt[i]); };
        constexpr int64_t kClassTrieMaxClasses = 16;  // past it, classes merge few trie nodes
        constexpr int32_t kMinLevel = 6;  // below: the longer tokens are nearly all of them
        // the levels: blk[L][q] = q's block at level L (L = 0..lcap)
        std::vector<std::vector<int32_t>> blk;
        std::vector<int32_t> nblk;
        bool same_all = false;  // states in one block at lcap have equal rows
        int64_t wide = 0;  // states walking ``tri`` with >= 16 live bytes
        if (shape || (share_rows && nc <= kClassTrieMaxClasses))
            for (int64_t i = 0; i < st.n; ++i)
                if (shared(i)) {
                    live_of(static_cast<int32_t>(st.p[i]));
                    wide += live_n[static_cast<size_t>(st.p[i])] >= 16;
                }
        // the class trie, when kClassTrieMinWide wide states walk over few classes (a counter or
        // a format: their walks share most trie nodes, the class trie merges them); share=False:
        // none. Building it costs about two walks of the union of the states' walks, so two or
        // three wide states gain nothing: ^[A-Z]{3}-[0-9]{2,4}$ (3 wide states) took 49 us
        // with it, 31 without; uuid (36) 68 vs 138; a 1,000-tool registry's masks the same
        ClassTrie ct;
        std::vector<int64_t> from;  // the states that walk the class trie
        constexpr int64_t kClassTrieMinWide = 4;
        if (share_rows && nc <= kClassTrieMaxClasses && wide >= kClassTrieMinWide)
            for (int64_t i = 0; i < st.n; ++i)
                if (shared(i)) from.push_back(st.p[i]);
        const bool on_ct = share_rows && nc <= kClassTrieMaxClasses && wide >= kClassTrieMinWide &&
                           build_class_trie(ct, tt_main, tri->root_child, tab.p, ns, nc, cls.p, int64_t{1} << 22,
                                            from.data(), static_cast<int64_t>(from.size()));
        if (shape) {
            // the levels' cost (entries of the key rows, all levels) is kept below a fraction
            // of what the wide states' walks cost at least
            const int64_t budget = std::min<int64_t>(wide * 8192, int64_t{1} << 22);
            if (wide >= 2 && ns * nc * kMinLevel <= budget) {
                blk.emplace_back(static_cast<size_t>(ns), 0);
                nblk.push_back(1);
                std::vector<int32_t> key(static_cast<size_t>(ns * nc)), idx(static_cast<size_t>(ns));
                std::vector<uint64_t> hash(static_cast<size_t>(ns));
                std::vector<int32_t> cnt;
                int64_t work = 0;
                bool stable = false;
                while (static_cast<int32_t>(blk.size()) - 1 < shape->max_len) {
                    const std::vector<int32_t>& prev = blk.back();
                    for (int64_t k = 0; k < ns * nc; ++k)
                        key[static_cast<size_t>(k)] = tab.p[k] < 0 ? -1 : prev[static_cast<size_t>(tab.p[k])];
                    const int32_t* kp = key.data();
                    for (int64_t q = 0; q < ns; ++q) {  // a hash of the row: most ties end there
                        idx[static_cast<size_t>(q)] = static_cast<int32_t>(q);
                        uint64_t h = 0x9E3779B97F4A7C15ull;
                        for (int64_t c = 0; c < nc; ++c)
                            h = (h ^ static_cast<uint32_t>(kp[q * nc + c])) * 0xBF58476D1CE4E5B9ull;
                        hash[static_cast<size_t>(q)] = h ^ (h >> 31);
                    }
                    auto less = [&](int32_t x, int32_t y) {
                        const uint64_t hx = hash[static_cast<size_t>(x)], hy = hash[static_cast<size_t>(y)];
                        if (hx != hy) return hx < hy;
                        return std::lexicographical_compare(kp + x * nc, kp + (x + 1) * nc, kp + y * nc,
                                                            kp + (y + 1) * nc);
                    };
                    std::sort(idx.begin(), idx.end(), less);
                    std::vector<int32_t> nb(static_cast<size_t>(ns));
                    int32_t nk = 0;
                    for (int64_t k = 0; k < ns; ++k) {
                        const int32_t x = idx[static_cast<size_t>(k)];
                        if (k > 0 && !std::equal(kp + x * nc, kp + (x + 1) * nc, kp + idx[static_cast<size_t>(k) - 1] * nc))
                            ++nk;
                        nb[static_cast<size_t>(x)] = nk;
                    }
                    work += ns * nc;
                    if (nk + 1 == nblk.back()) {  // equal to the previous level: stable from here
                        stable = true;
                        break;
                    }
                    // every walked state alone in its block: no row to share from here on
                    cnt.assign(static_cast<size_t>(nk) + 1, 0);
                    bool alone = true;
                    for (int64_t i = 0; i < st.n && alone; ++i)
                        if (shared(i)) alone = ++cnt[static_cast<size_t>(nb[static_cast<size_t>(st.p[i])])] < 2;
                    if (alone) break;
                    blk.push_back(std::move(nb));
                    nblk.push_back(nk + 1);
                    if (work + ns * nc > budget) break;  // deeper levels not affordable
                }
                same_all = stable || static_cast<int32_t>(blk.size()) - 1 >= shape->max_len;
                if (static_cast<int32_t>(blk.size()) - 1 < kMinLevel && !same_all) blk.clear();  // none
            }
        }
        const int32_t lcap = static_cast<int32_t>(blk.size()) - 1;  // -1: no sharing
        // processing order: the other states first, then the shared ones from the last to split
        // off from every other (a state alike to many first: the rest derive from it)
        std::vector<int64_t> ord;
        std::vector<std::vector<int32_t>> rep;  // per level and block: a state already walked
        if (lcap >= 0) {
            std::vector<int32_t> split(static_cast<size_t>(st.n), lcap + 1);
            std::vector<int32_t> cnt;
            for (int32_t L = lcap; L >= 0; --L) {
                cnt.assign(static_cast<size_t>(nblk[static_cast<size_t>(L)]), 0);
                const std::vector<int32_t>& bl = blk[static_cast<size_t>(L)];
                for (int64_t i = 0; i < st.n; ++i)
                    if (shared(i)) cnt[static_cast<size_t>(bl[static_cast<size_t>(st.p[i])])]++;
                for (int64_t i = 0; i < st.n; ++i)
                    if (shared(i) && cnt[static_cast<size_t>(bl[static_cast<size_t>(st.p[i])])] == 1)
                        split[static_cast<size_t>(i)] = L;
            }
            for (int64_t i = 0; i < st.n; ++i)
                if (!shared(i)) ord.push_back(i);
            const size_t first = ord.size();
            for (int64_t i = 0; i < st.n; ++i)
                if (shared(i)) ord.push_back(i);
            std::stable_sort(ord.begin() + static_cast<std::ptrdiff_t>(first), ord.end(), [&](int64_t x, int64_t y) {
                return split[static_cast<size_t>(x)] > split[static_cast<size_t>(y)];
            });
            for (int32_t L = 0; L <= lcap; ++L) rep.emplace_back(static_cast<size_t>(nblk[static_cast<size_t>(L)]), -1);
            reordered = true;
        }
        std::vector<int64_t> span0(reordered ? static_cast<size_t>(st.n) : 0),
            span1(reordered ? static_cast<size_t>(st.n) : 0);
        const uint16_t* sdepth = shape ? shape->depth.data() : nullptr;
        const uint16_t* sheight = shape ? shape->height.data() : nullptr;
        // a result of more than kSortMax tokens is sorted through a bitmap over the token ids
        // instead of std::sort: from ~64 ids up it costs less (uuid's masks: -30%, 10,000 real
        // tools' masks: -20%; it was 512). Two levels: bit w of ``summary`` marks a non-zero
        // word w of ``bits``, so the read-out visits the set words only (a uuid row's ~200 ids
        // lie in ~150 of the 2,400 words a 151K vocabulary spans: it scanned them all)
        std::vector<uint64_t> bits, summary;
        constexpr size_t kSortMax = 64;
        std::vector<std::pair<int32_t, int32_t>> stack;
        ptr[0] = 0;
        for (int64_t k_ = 0; k_ < st.n && ok; ++k_) {
            const int64_t i = reordered ? ord[static_cast<size_t>(k_)] : k_;
            const size_t row0 = ids.n;
            stack.clear();
            const bool use_alt = alt && alt[i];
            const TT& tt = use_alt ? tt_alt : tt_main;
            const int32_t* root_child = use_alt ? alt_tri->root_child : tri->root_child;
            int32_t par = -1, lev = 0;  // derive from row(par): same definedness to length lev
            if (lcap >= 0 && shared(i)) {
                const size_t q = static_cast<size_t>(st.p[i]);
                for (int32_t L = lcap; L >= kMinLevel && par < 0; --L) {
                    par = rep[static_cast<size_t>(L)][static_cast<size_t>(blk[static_cast<size_t>(L)][q])];
                    lev = L;
                }
                if (par < 0) lev = 0;
            }
            size_t mid = row0;  // [row0, mid): tokens kept from row(par), sorted
            bool walk = st.p[i] >= 0;
            if (par >= 0) {
                const size_t p0 = static_cast<size_t>(span0[static_cast<size_t>(par)]);
                const size_t pn = static_cast<size_t>(span1[static_cast<size_t>(par)]) - p0;
                // room for the rest at this row's size (no regrowth: each one faults and copies)
                ok = ids.reserve(ids.n + std::min<size_t>(pn * static_cast<size_t>(st.n - k_), size_t{1} << 26));
                ok = ok && ids.reserve(ids.n + pn);
                if (ok && lev == lcap && same_all) {
                    if (pn) std::memcpy(ids.p + ids.n, ids.p + p0, pn * sizeof(int32_t));
                    ids.n += pn;
                    walk = false;
                } else if (ok) {
                    const uint16_t* tl = shape->tok_len.data();
                    for (size_t k = p0; k < p0 + pn; ++k) {
                        const int32_t t = ids.p[k];
                        if (tl[t] <= lev) ids.p[ids.n++] = t;
                    }
                }
                mid = ids.n;
            }
            if (walk) stack.emplace_back(0, static_cast<int32_t>(st.p[i]));
            auto take = [&](int32_t c, int32_t q2) {
                if (lev > 0) {  // only the tokens longer than lev, below nodes that hold one
                    if (sheight[c] <= lev) return;
                    if (sdepth[c] > lev)
                        for (int32_t k = tt.tptr[c]; k < tt.tptr[c + 1]; ++k) ok = ok && ids.push(tt.tids[k]);
                } else {
                    for (int32_t k = tt.tptr[c]; k < tt.tptr[c + 1]; ++k) ok = ok && ids.push(tt.tids[k]);
                }
                if (tt.si[c].chi > tt.si[c].clo) stack.emplace_back(c, q2);
            };
            if (on_ct && !use_alt) {  // the same walk over the class trie (root 0)
                const int32_t* cchild = ct.child.data();
                const uint16_t *cdepth = ct.depth.data(), *cheight = ct.height.data();
                while (!stack.empty() && ok) {
                    auto [u, q] = stack.back();
                    stack.pop_back();
                    const int32_t* qrow = tab.p + static_cast<int64_t>(q) * nc;
                    const int32_t* urow = cchild + static_cast<int64_t>(u) * nc;
                    for (int64_t k = 0; k < nc; ++k) {
                        const int32_t v = urow[k], q2 = qrow[k];
                        if (v < 0 || q2 < 0 || cheight[v] <= lev) continue;  // lev 0: no token below
                        if (cdepth[v] > lev)
                            for (int32_t j = ct.tptr[static_cast<size_t>(v)]; j < ct.tptr[static_cast<size_t>(v) + 1]; ++j)
                                ok = ok && ids.push(ct.tids[static_cast<size_t>(j)]);
                        if (cheight[v] > cdepth[v]) stack.emplace_back(v, q2);
                    }
                }
            }
            while (!stack.empty() && ok) {
                auto [u, q] = stack.back();
                stack.pop_back();
                const int32_t* qrow = tab.p + static_cast<int64_t>(q) * nc;
                const int32_t lo = tt.si[u].clo, hi = tt.si[u].chi;
                const int32_t nch = hi - lo;
                int32_t l0 = 0, l1 = 0;
                if (u == 0 || nch > 8) {
                    live_of(q);
                    l0 = live_at[static_cast<size_t>(q)];
                    l1 = l0 + live_n[static_cast<size_t>(q)];
                }
                if (u == 0) {
                    for (int32_t j = l0; j < l1; ++j) {
                        const uint8_t b = live[static_cast<size_t>(j)];
                        const int32_t c = root_child[b];
                        if (c >= 0) take(c, qrow[cls.p[b]]);
                    }
                } else if (nch > 8 && 4 * (l1 - l0) < nch) {
                    const uint8_t* lab = tt.clab;
                    int32_t from = lo;
                    for (int32_t j = l0; j < l1 && from < hi; ++j) {
                        const uint8_t b = live[static_cast<size_t>(j)];
                        from = static_cast<int32_t>(std::lower_bound(lab + from, lab + hi, b) - lab);
                        if (from < hi && lab[from] == b) take(tt.cnode[from], qrow[cls.p[b]]);
                    }
                } else {
                    for (int32_t j = lo; j < hi; ++j) {
                        const int32_t q2 = qrow[cls.p[tt.clab[j]]];
                        if (q2 >= 0) take(tt.cnode[j], q2);
                    }
                }
            }
            if (!ok) break;
            const size_t got = ids.n - mid;
            if (rows) {
                uint32_t* r = rows + static_cast<size_t>(i) * static_cast<size_t>(words);
                for (size_t k = row0; k < ids.n; ++k)
                    r[static_cast<size_t>(ids.p[k]) >> 5] |= uint32_t{1} << (ids.p[k] & 31);
                ids.n = row0;
            } else if (got > kSortMax) {
                int32_t top = 0;
                for (size_t k = mid; k < ids.n; ++k) top = std::max(top, ids.p[k]);
                if (bits.size() <= static_cast<size_t>(top) / 64) {
                    bits.resize(static_cast<size_t>(top) / 64 + 1, 0);
                    summary.resize(bits.size() / 64 + 1, 0);
                }
                for (size_t k = mid; k < ids.n; ++k) {
                    const size_t w = static_cast<size_t>(ids.p[k]) >> 6;
                    bits[w] |= uint64_t{1} << (ids.p[k] & 63);
                    summary[w >> 6] |= uint64_t{1} << (w & 63);
                }
                size_t at = mid;
                for (size_t sw = 0; sw <= static_cast<size_t>(top) / 4096; ++sw) {
                    for (uint64_t s = summary[sw]; s; s &= s - 1) {
                        const size_t w = sw * 64 + static_cast<size_t>(__builtin_ctzll(s));
                        for (uint64_t x = bits[w]; x; x &= x - 1)
                            ids.p[at++] = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x)));
                        bits[w] = 0;
                    }
                    summary[sw] = 0;
                }
                ids.n = at;  // (a walk yields each token once: at == ids.n)
            } else {
                std::sort(ids.p + mid, ids.p + ids.n);
            }
            if (mid > row0 && ids.n > mid) std::inplace_merge(ids.p + row0, ids.p + mid, ids.p + ids.n);
            if (reordered) {
                span0[static_cast<size_t>(i)] = static_cast<int64_t>(row0);
                span1[static_cast<size_t>(i)] = static_cast<int64_t>(ids.n);
                if (shared(i)) {
                    const size_t q = static_cast<size_t>(st.p[i]);
                    for (int32_t L = 0; L <= lcap; ++L) {
                        int32_t& r = rep[static_cast<size_t>(L)][static_cast<size_t>(blk[static_cast<size_t>(L)][q])];
                        if (r < 0) r = static_cast<int32_t>(i);
                    }
                }
            } else {
                ptr[static_cast<size_t>(i) + 1] = static_cast<int64_t>(ids.n);
            }
        }
        if (ok && reordered) {  // the rows in states' order
            ok = out.reserve(std::max<size_t>(ids.n, 1));
            for (int64_t i = 0; i < st.n && ok; ++i) {
                const size_t p0 = static_cast<size_t>(span0[static_cast<size_t>(i)]);
                const size_t pn = static_cast<size_t>(span1[static_cast<size_t>(i)]) - p0;
                if (pn) std::memcpy(out.p + out.n, ids.p + p0, pn * sizeof(int32_t));  // (ids.p: null if none)
                out.n += pn;
                ptr[static_cast<size_t>(i) + 1] = static_cast<int64_t>(out.n);
            }
        }
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    return ok;
}

// A job's run (no Python call: run with the GIL released): with a wire, the automaton wired
// and compressed first; then the walks. False with j.err set.
bool masks_run(MasksJob& j) {
    if (j.wire) {
        Wire& w = *j.wire;
        Buf<int32_t> src, byte, dst;
        if (!wire_run(w, src, byte, dst)) {
            j.err = w.err;
            return false;
        }
        try {
            if (!j.own_cls.resize(256) || !compress_run(src.p, byte.p, dst.p, static_cast<int64_t>(src.n), w.n, j.wide,
                                                        j.own_cls.p, j.nc))
                return j.err.no_memory();
        } catch (const std::bad_alloc&) {
            return j.err.no_memory();
        }
        const size_t cells = j.wide.n;
        if (j.ns <= 128) {  // the narrowest signed type holding every state and -1
            if (!j.tab8.resize(cells)) return j.err.no_memory();
            for (size_t i = 0; i < cells; ++i) j.tab8.p[i] = static_cast<int8_t>(j.wide.p[i]);
        } else if (j.ns <= 32768) {
            if (!j.tab16.resize(cells)) return j.err.no_memory();
            for (size_t i = 0; i < cells; ++i) j.tab16.p[i] = static_cast<int16_t>(j.wide.p[i]);
        }
        j.tab.p = j.wide.p;
        j.cls.p = j.own_cls.p;
    }
    return masks_walk(j) || j.err.no_memory();
}

// The result of a job run: the packed rows (words > 0), else (ptr, ids); with a wire,
// (table, byte_class, that).
PyObject* masks_result(MasksJob& j) {
    PyObject* r;
    if (j.rows_o) {
        r = j.rows_o;
        j.rows_o = nullptr;
    } else {
        r = csr_result(j.ptr, j.reordered ? j.out : j.ids);
    }
    if (!j.wire || !r) return r;
    PyObject* tab = j.ns <= 128     ? to_numpy(j.tab8, NPY_INT8, j.nc)
                    : j.ns <= 32768 ? to_numpy(j.tab16, NPY_INT16, j.nc)
                                    : to_numpy(j.wide, NPY_INT32, j.nc);
    PyObject* cls = tab ? to_numpy(j.own_cls, NPY_INT32) : nullptr;
    if (!tab || !cls) {
        Py_XDECREF(tab);
        Py_XDECREF(cls);
        Py_DECREF(r);
        return nullptr;
    }
    return Py_BuildValue("(NNN)", tab, cls, r);
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
    MasksJob j;
    if (!masks_open(j, args)) return nullptr;
    bool ok;
    Py_BEGIN_ALLOW_THREADS;
    ok = masks_run(j);
    Py_END_ALLOW_THREADS;
    if (!ok) return j.err.raise();
    return masks_result(j);
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
        std::vector<std::unique_ptr<MasksJob>> jobs;
        bool ok = true;
        try {
            jobs.reserve(static_cast<size_t>(n));
            for (Py_ssize_t i = 0; i < n; ++i) jobs.emplace_back(new MasksJob);
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
                ok = masks_run(*jobs[i]);
                failed = i;
            }
            Py_END_ALLOW_THREADS;
            if (!ok) jobs[failed]->err.raise();
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
    for (int64_t i = 0; i < cand.n; ++i) {
        const int32_t t = cand.p[i];
        if (t < 0 || t + 1 >= off.n || off.p[t] < 0 || off.p[t] > off.p[t + 1] || off.p[t + 1] > buf.n) {
            PyErr_SetString(PyExc_ValueError, "cand / offsets: out of range");
            return nullptr;
        }
    }
    Buf<int64_t> ptr;
    Buf<int32_t> ids;
    bool ok = ptr.resize(static_cast<size_t>(st.n) + 1);
    if (!ok) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS;
    ptr[0] = 0;
    for (int64_t i = 0; i < st.n && ok; ++i) {
        const size_t row0 = ids.n;
        for (int64_t k = 0; k < cand.n; ++k) {
            const int32_t t = cand.p[k];
            int32_t q = static_cast<int32_t>(st.p[i]);
            for (int64_t j = off.p[t]; j < off.p[t + 1] && q >= 0; ++j)
                q = tab.p[static_cast<int64_t>(q) * nc + cls.p[bytes[j]]];
            if (q >= 0) ok = ok && ids.push(t);
        }
        std::sort(ids.p + row0, ids.p + ids.n);
        ptr[static_cast<size_t>(i) + 1] = static_cast<int64_t>(ids.n);
    }
    Py_END_ALLOW_THREADS;
    if (!ok) return PyErr_NoMemory();
    return csr_result(ptr, ids);
}

// -- fixed formats and shared pieces (branch fmt): CSR lists extended and packed -----------------

// Checks a CSR ``ptr`` (n + 1 ascending offsets from 0) over ``n_ids`` ids; ValueError if not.
bool check_csr(const I64View& ptr, int64_t n_ids, const char* what) {
    if (ptr.n < 1 || ptr.p[0] != 0 || ptr.p[ptr.n - 1] > n_ids) {
        PyErr_Format(PyExc_ValueError, "%s: ptr out of range", what);
        return false;
    }
    for (int64_t i = 1; i < ptr.n; ++i)
        if (ptr.p[i] < ptr.p[i - 1]) {
            PyErr_Format(PyExc_ValueError, "%s: ptr not ascending", what);
            return false;
        }
    return true;
}

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
    return quad_result(where_o, rows_o, a, to_numpy(lids, NPY_INT32));
}

// spelled_count(trie, allowed: 32 bytes (a 256-bit set, bit b of byte b >> 3), limit) -> int:
//   how many tokens of ``trie`` have all their bytes in ``allowed``, counted up to ``limit``
//   (the walk stops there). A state of an automaton over these bytes allows at most that many
//   tokens: pieces.shared_rows tells with it that no state of a piece alone has a wide mask.
PyObject* py_spelled_count(PyObject*, PyObject* args) {
    TokenTrieObject* tri;
    Py_buffer allowed;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!y*n", &TokenTrieType, &tri, &allowed, &limit)) return nullptr;
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

// int_range_dfa(zero: bool, pos_lo, pos_hi, neg_lo, neg_hi) -> (src, byte, dst, accept): the
//   automaton of formats.integer_range_fragment, built the same way (same states, same order):
//   canonical decimals, "0" if zero, digits in [pos_lo, pos_hi] and "-" then digits in
//   [neg_lo, neg_hi]; each bound a decimal string >= 1 without leading zeros, a high bound ""
//   for none, a part absent when its low bound is "".
struct RangeElem {  // one length's constraint: r digits left, low / high rest ("": any);
    int r;          // r = -1: a tail of at least t more digits, any; -2: the same, first not 0
    int t;
    std::string low, high;
    bool operator<(const RangeElem& o) const {
        if (r != o.r) return r < o.r;
        if (t != o.t) return t < o.t;
        if (low != o.low) return low < o.low;
        return high < o.high;
    }
    bool operator==(const RangeElem& o) const { return r == o.r && t == o.t && low == o.low && high == o.high; }
};
using RangeKey = std::vector<RangeElem>;

bool all_of_char(const std::string& s, size_t from, char c) {
    for (size_t i = from; i < s.size(); ++i)
        if (s[i] != c) return false;
    return true;
}

// a <= b for decimal strings without leading zeros
bool dec_le(const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a <= b;
}

RangeKey range_start(const std::string& lo, const std::string& hi) {
    RangeKey out;
    if (lo.empty() || (!hi.empty() && !dec_le(lo, hi))) return out;
    const size_t na = lo.size(), nb = hi.empty() ? na : hi.size();
    for (size_t n = na; n <= nb; ++n) {
        const std::string low_n = "1" + std::string(n - 1, '0'), high_n(n, '9');
        const std::string first = dec_le(low_n, lo) ? lo : low_n;
        const std::string last = (!hi.empty() && dec_le(hi, high_n)) ? hi : high_n;
        if (dec_le(first, last)) out.push_back({static_cast<int>(n), 0, first, last});
    }
    if (hi.empty()) out.push_back({-2, static_cast<int>(na) + 1, "", ""});
    // as the Python start: the bounds of a full-width element are kept whole (normalized on step)
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

// the constraints left after digit d, into out (cleared; reused by the caller: no allocation
// per step once its capacity is reached)
void range_step(const RangeKey& key, char d, RangeKey& out) {
    out.clear();
    for (const RangeElem& e : key) {
        if (e.r < 0) {
            if (e.r == -1 || d != '0') {
                out.emplace_back();
                RangeElem& o = out.back();
                o.r = -1;
                o.t = std::max(e.t - 1, 0);
                o.low.clear();
                o.high.clear();
            }
            continue;
        }
        if (e.r == 0) continue;
        size_t lo_from = 0, hi_from = 0;  // the rest of low / high from there ("" past the end)
        bool lo_any = e.low.empty(), hi_any = e.high.empty();
        if (!lo_any) {
            if (d < e.low[0]) continue;
            if (d == e.low[0] && !all_of_char(e.low, 1, '0')) lo_from = 1;
            else lo_any = true;
        }
        if (!hi_any) {
            if (d > e.high[0]) continue;
            if (d == e.high[0] && !all_of_char(e.high, 1, '9')) hi_from = 1;
            else hi_any = true;
        }
        out.emplace_back();
        RangeElem& o = out.back();
        o.r = e.r - 1;
        o.t = 0;
        if (lo_any) o.low.clear();
        else o.low.assign(e.low, lo_from, std::string::npos);
        if (hi_any) o.high.clear();
        else o.high.assign(e.high, hi_from, std::string::npos);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
}

uint64_t range_key_hash(const RangeKey& k) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 0x100000001b3ull; };
    for (const RangeElem& e : k) {
        mix(static_cast<uint32_t>(e.r));
        mix(static_cast<uint32_t>(e.t));
        for (char c : e.low) mix(static_cast<uint8_t>(c));
        mix(0x100);
        for (char c : e.high) mix(static_cast<uint8_t>(c));
        mix(0x101);
    }
    return h;
}

// A DFA: its edges by state, then byte, and per state whether it accepts.
struct Dfa {
    std::vector<int32_t> src, byte, dst;
    std::vector<uint8_t> accept;
};

// A DFA as numpy arrays: (table int32 (m, 256), accept bool[m]), or with ``edges`` (src
// int32[], byte int32[], dst int32[], accept bool[m]): its edges (a Fragment's edge list, without
// a numpy pass over a dense table).
PyObject* dfa_result(const Dfa& d, bool edges) {
    const npy_intp m = static_cast<npy_intp>(d.accept.size());
    npy_intp d1[1] = {m};
    PyObject* ac = PyArray_SimpleNew(1, d1, NPY_BOOL);
    if (!ac) return nullptr;
    if (m) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(ac)), d.accept.data(), d.accept.size());
    if (edges) {
        auto arr = [](const std::vector<int32_t>& v) -> PyObject* {
            npy_intp dims[1] = {static_cast<npy_intp>(v.size())};
            PyObject* a = PyArray_SimpleNew(1, dims, NPY_INT32);
            if (a && !v.empty()) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(a)), v.data(), v.size() * 4);
            return a;
        };
        PyObject *a = arr(d.src), *b = arr(d.byte);
        return quad_result(a, b, arr(d.dst), ac);
    }
    npy_intp dims[2] = {m, 256};
    PyObject* tab = PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!tab) {
        Py_DECREF(ac);
        return nullptr;
    }
    int32_t* t = static_cast<int32_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(tab)));
    std::fill_n(t, static_cast<size_t>(m) * 256, -1);
    for (size_t k = 0; k < d.src.size(); ++k) t[static_cast<size_t>(d.src[k]) * 256 + static_cast<size_t>(d.byte[k])] = d.dst[k];
    return pair_result(tab, ac);
}

PyObject* py_int_range_dfa(PyObject*, PyObject* args) {
    int zero;
    const char *pl, *ph, *nl, *nh;
    if (!PyArg_ParseTuple(args, "pssss", &zero, &pl, &ph, &nl, &nh)) return nullptr;
    for (const char* s : {pl, ph, nl, nh})
        for (const char* c = s; *c; ++c)
            if (*c < '0' || *c > '9' || (c == s && *c == '0')) {
                PyErr_SetString(PyExc_ValueError, "int_range_dfa: a bound is not a decimal >= 1");
                return nullptr;
            }
    Dfa out;
    out.accept.push_back(0);
    std::vector<int32_t>& src = out.src;
    std::vector<int32_t>& byte = out.byte;
    std::vector<int32_t>& dst = out.dst;
    std::vector<uint8_t>& acc = out.accept;
    std::unordered_multimap<uint64_t, int32_t> ids;  // a key's hash -> states (keys compared)
    ids.reserve(64);
    std::vector<RangeKey> order;
    auto state = [&](const RangeKey& k) {
        const uint64_t h = range_key_hash(k);
        for (auto [it, end] = ids.equal_range(h); it != end; ++it)
            if (order[static_cast<size_t>(it->second) - 1] == k) return it->second;
        const int32_t id = static_cast<int32_t>(order.size()) + 1;
        ids.emplace(h, id);
        bool a = false;
        for (const RangeElem& e : k) a = a || (e.r == 0) || (e.r == -1 && e.t == 0);
        acc.push_back(a);
        order.push_back(k);
        return id;
    };
    const RangeKey pos = range_start(pl, ph), neg = range_start(nl, nh);
    RangeKey nxt;
    for (char d : std::string("-0123456789")) {
        nxt.clear();
        if (d == '-') nxt = neg;
        else if (d == '0') { if (zero) nxt.push_back({0, 0, "", ""}); }
        else if (!pos.empty()) range_step(pos, d, nxt);
        if (nxt.empty()) continue;
        src.push_back(0);
        byte.push_back(d);
        dst.push_back(state(nxt));
    }
    for (size_t i = 0; i < order.size(); ++i)
        for (char d = '0'; d <= '9'; ++d) {
            range_step(order[i], d, nxt);  // order may grow in state(): order[i] read first
            if (nxt.empty()) continue;
            src.push_back(static_cast<int32_t>(i) + 1);
            byte.push_back(d);
            dst.push_back(state(nxt));
        }
    return dfa_result(out, true);
}


// -- subset construction, and the regex subset of ``pattern`` compiled to it --------------------

// An NFA with byte-set edges (bit b of bits[32 * e + b / 8] = byte b) and epsilon edges.
struct NfaEdges {
    int64_t n = 0;
    const int32_t *es = nullptr, *ed = nullptr, *xs = nullptr, *xd = nullptr;
    const uint8_t* bits = nullptr;
    int64_t ne = 0, nx = 0;
};

// Subset construction: DFA states numbered in discovery order (breadth first, bytes ascending),
// state 0 the closure of ``start``; a DFA state accepts when its set holds ``final``. False once
// more than ``max_states`` (> 0) states are found. Throws std::bad_alloc.
bool determinize(const NfaEdges& g, int64_t start, int64_t final, long long max_states, Dfa& out) {
    const int64_t n = g.n;
    const size_t W = static_cast<size_t>((n + 63) / 64);
    // adjacency: byte edges and epsilon edges per NFA state
    std::vector<int32_t> eptr(static_cast<size_t>(n) + 1, 0), xptr(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < g.ne; ++i) eptr[static_cast<size_t>(g.es[i]) + 1]++;
    for (int64_t i = 0; i < g.nx; ++i) xptr[static_cast<size_t>(g.xs[i]) + 1]++;
    for (int64_t v = 0; v < n; ++v) {
        eptr[static_cast<size_t>(v) + 1] += eptr[static_cast<size_t>(v)];
        xptr[static_cast<size_t>(v) + 1] += xptr[static_cast<size_t>(v)];
    }
    std::vector<int32_t> eidx(static_cast<size_t>(g.ne)), xto(static_cast<size_t>(g.nx));
    {
        std::vector<int32_t> f(eptr.begin(), eptr.end() - 1), h(xptr.begin(), xptr.end() - 1);
        for (int64_t i = 0; i < g.ne; ++i) eidx[static_cast<size_t>(f[static_cast<size_t>(g.es[i])]++)] = static_cast<int32_t>(i);
        for (int64_t i = 0; i < g.nx; ++i) xto[static_cast<size_t>(h[static_cast<size_t>(g.xs[i])]++)] = g.xd[i];
    }
    std::vector<int32_t> todo;
    auto close = [&](uint64_t* set) {  // epsilon closure, in place
        todo.clear();
        for (size_t w = 0; w < W; ++w)
            for (uint64_t x = set[w]; x; x &= x - 1)
                todo.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x))));
        while (!todo.empty()) {
            const int32_t v = todo.back();
            todo.pop_back();
            for (int32_t k = xptr[static_cast<size_t>(v)]; k < xptr[static_cast<size_t>(v) + 1]; ++k) {
                const int32_t t = xto[static_cast<size_t>(k)];
                uint64_t& word = set[static_cast<size_t>(t) >> 6];
                const uint64_t bit = uint64_t{1} << (t & 63);
                if (!(word & bit)) {
                    word |= bit;
                    todo.push_back(t);
                }
            }
        }
    };
    // the DFA states' sets, W words each, found by a hash of their words
    std::vector<uint64_t> sets;
    std::unordered_multimap<uint64_t, int32_t> ids;
    auto id_of = [&](const uint64_t* set) {
        uint64_t h = 0x9E3779B97F4A7C15ull;
        for (size_t w = 0; w < W; ++w) h = (h ^ set[w]) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        for (auto [it, last] = ids.equal_range(h); it != last; ++it)
            if (std::memcmp(sets.data() + static_cast<size_t>(it->second) * W, set, W * 8) == 0) return it->second;
        const int32_t id = static_cast<int32_t>(out.accept.size());
        ids.emplace(h, id);
        sets.insert(sets.end(), set, set + W);
        out.accept.push_back(static_cast<uint8_t>(set[static_cast<size_t>(final) >> 6] >> (final & 63) & 1));
        return id;
    };
    std::vector<uint64_t> cur(W, 0), next(256 * W), set(W);
    cur[static_cast<size_t>(start) >> 6] |= uint64_t{1} << (start & 63);
    close(cur.data());
    id_of(cur.data());
    for (size_t i = 0; i < out.accept.size(); ++i) {
        std::memcpy(cur.data(), sets.data() + i * W, W * 8);
        uint64_t used[4] = {0, 0, 0, 0};  // the bytes with an edge (their rows of next cleared)
        for (size_t w = 0; w < W; ++w)
            for (uint64_t x = cur[w]; x; x &= x - 1) {
                const size_t v = w * 64 + static_cast<size_t>(__builtin_ctzll(x));
                for (int32_t k = eptr[v]; k < eptr[v + 1]; ++k) {
                    const int32_t e = eidx[static_cast<size_t>(k)];
                    const int32_t t = g.ed[e];
                    const size_t tw = static_cast<size_t>(t) >> 6;
                    const uint64_t tb = uint64_t{1} << (t & 63);
                    uint64_t m[4];  // bit b: byte b (bit b % 8 of byte b / 8, little-endian words)
                    std::memcpy(m, g.bits + static_cast<size_t>(e) * 32, 32);
                    for (int q = 0; q < 4; ++q) {
                        for (uint64_t y = m[q] & ~used[q]; y; y &= y - 1)  // first use: cleared
                            std::fill_n(next.data() + (static_cast<size_t>(q) * 64 + static_cast<size_t>(__builtin_ctzll(y))) * W, W, 0);
                        used[q] |= m[q];
                        for (uint64_t y = m[q]; y; y &= y - 1)
                            next[(static_cast<size_t>(q) * 64 + static_cast<size_t>(__builtin_ctzll(y))) * W + tw] |= tb;
                    }
                }
            }
        int last = -1;  // the previous byte whose target was found: an equal set has its target
        int32_t last_id = -1;
        for (int q = 0; q < 4; ++q)
            for (uint64_t y = used[q]; y; y &= y - 1) {
                const int b = q * 64 + __builtin_ctzll(y);
                const uint64_t* nb = next.data() + static_cast<size_t>(b) * W;
                if (last < 0 || std::memcmp(nb, next.data() + static_cast<size_t>(last) * W, W * 8) != 0) {
                    std::memcpy(set.data(), nb, W * 8);
                    close(set.data());
                    last = b;
                    last_id = id_of(set.data());
                }
                out.src.push_back(static_cast<int32_t>(i));
                out.byte.push_back(b);
                out.dst.push_back(last_id);
            }
        if (max_states > 0 && static_cast<long long>(out.accept.size()) > max_states)
            return false;  // (a pattern like (a|b)*a(a|b){19} has 2**20 states)
    }
    return true;
}

// :func:`determinize` with the GIL released; false when memory ran out (``fits``: its result).
bool determinize_nogil(const NfaEdges& g, int64_t start, int64_t final, long long max_states, Dfa& out, bool& fits) {
    bool ok = true;
    Py_BEGIN_ALLOW_THREADS;
    try {
        fits = determinize(g, start, final, max_states, out);
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    Py_END_ALLOW_THREADS;
    return ok;
}

// nfa_determinize(n: int, edge_src: int32[], edge_dst: int32[], edge_bytes: uint8 (E, 32),
//                 eps_src: int32[], eps_dst: int32[], start: int, final: int, max_states=0,
//                 edges=False)
//   -> :func:`dfa_result` of :func:`determinize`, or None once more than ``max_states`` (> 0)
//   DFA states are found.
PyObject* py_nfa_determinize(PyObject*, PyObject* args) {
    long long n_ll, start_ll, final_ll, max_states = 0;  // max_states > 0: None past that many
    int edges_out = 0;
    PyObject *es_o, *ed_o, *eb_o, *xs_o, *xd_o;
    if (!PyArg_ParseTuple(args, "LOOOOOLL|Lp", &n_ll, &es_o, &ed_o, &eb_o, &xs_o, &xd_o, &start_ll, &final_ll,
                          &max_states, &edges_out))
        return nullptr;
    I32View es, ed, xs, xd;
    if (!es.open(es_o, "edge_src") || !ed.open(ed_o, "edge_dst") || !xs.open(xs_o, "eps_src") ||
        !xd.open(xd_o, "eps_dst"))
        return nullptr;
    ByteView eb;
    if (!eb.open(eb_o)) return nullptr;
    const int64_t n = n_ll;
    if (n <= 0 || n > (int64_t{1} << 24) || es.n != ed.n || xs.n != xd.n || eb.n != es.n * 32 ||
        start_ll < 0 || start_ll >= n || final_ll < 0 || final_ll >= n) {
        PyErr_SetString(PyExc_ValueError, "nfa_determinize: bad sizes");
        return nullptr;
    }
    for (int64_t i = 0; i < es.n; ++i)
        if (es.p[i] < 0 || es.p[i] >= n || ed.p[i] < 0 || ed.p[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "nfa_determinize: an edge out of range");
            return nullptr;
        }
    for (int64_t i = 0; i < xs.n; ++i)
        if (xs.p[i] < 0 || xs.p[i] >= n || xd.p[i] < 0 || xd.p[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "nfa_determinize: an epsilon edge out of range");
            return nullptr;
        }
    const NfaEdges g{n, es.p, ed.p, xs.p, xd.p, eb.p, es.n, xs.n};
    Dfa dfa;
    bool fits = true;
    if (!determinize_nogil(g, start_ll, final_ll, max_states, dfa, fits)) return PyErr_NoMemory();
    if (!fits) Py_RETURN_NONE;
    return dfa_result(dfa, edges_out != 0);
}

// The regular-expression subset of JSON Schema ``pattern`` (the reference: the parser of
// trierouter/registry/slots/regex.py and the Thompson construction of nfa.py's _Nfa.build,
// mirrored step for step, so that the NFA and hence the DFA are the same): ASCII patterns
// whose every match needs no JSON escaping.
struct RxNode {
    char kind;               // 's' set, 'q' seq, 'a' alt, 'r' rep
    uint64_t chars[4] = {};  // 's': the bytes
    std::vector<int32_t> parts;
    int lo = 0, hi = 0;  // 'r': hi < 0 is unbounded
};

struct RxUnsupported {};
struct RxTooMany {};

struct RxChars {
    uint64_t w[4] = {};
    void add(int c) { w[c >> 6] |= uint64_t{1} << (c & 63); }
    bool has(int c) const { return w[c >> 6] >> (c & 63) & 1; }
    bool empty() const { return !(w[0] | w[1] | w[2] | w[3]); }
    int count() const {
        return __builtin_popcountll(w[0]) + __builtin_popcountll(w[1]) + __builtin_popcountll(w[2]) +
               __builtin_popcountll(w[3]);
    }
    int only() const {  // the one member (count() == 1)
        for (int k = 0; k < 4; ++k)
            if (w[k]) return k * 64 + __builtin_ctzll(w[k]);
        return -1;
    }
};

inline bool rx_safe_char(int c) { return c >= 0x20 && c < 0x7F && c != 0x22 && c != 0x5C; }

struct RxParser {
    const char* s;
    int64_t n, max_depth;  // groups nested deeper: unsupported
    int64_t i = 0, end = 0, depth = 0;
    std::vector<RxNode> nodes;

    int32_t node(RxNode&& x) {
        nodes.push_back(std::move(x));
        return static_cast<int32_t>(nodes.size()) - 1;
    }
    int32_t set_node(const RxChars& c) {
        RxNode x{'s'};
        std::memcpy(x.chars, c.w, sizeof x.chars);
        return node(std::move(x));
    }
    char at(int64_t k) const {  // s[k] (Python: IndexError past the end, unsupported here)
        if (k >= n) throw RxUnsupported{};
        return s[k];
    }
    int peek() const { return i < end ? static_cast<unsigned char>(s[i]) : -1; }
    bool starts(int64_t k, const char* t) const {
        for (; *t; ++t, ++k)
            if (k >= n || s[k] != *t) return false;
        return true;
    }

    int32_t parse() {
        if (n > 0 && s[0] == '^') i = 1;
        const bool anchored = n > 0 && s[n - 1] == '$' && !(n > 1 && s[n - 2] == '\\');
        end = anchored ? n - 1 : n;
        const int32_t x = alt();
        if (i != end) throw RxUnsupported{};
        return x;
    }
    int32_t alt() {
        std::vector<int32_t> parts{seq()};
        while (peek() == '|') {
            ++i;
            parts.push_back(seq());
        }
        if (parts.size() == 1) return parts[0];
        RxNode x{'a'};
        x.parts = std::move(parts);
        return node(std::move(x));
    }
    int32_t seq() {
        std::vector<int32_t> items;
        for (int c = peek(); c >= 0 && c != '|' && c != ')'; c = peek()) items.push_back(quant(atom()));
        RxNode x{'q'};
        x.parts = std::move(items);
        return node(std::move(x));
    }
    int32_t rep(int32_t inner, int lo, int hi) {
        RxNode x{'r'};
        x.parts = {inner};
        x.lo = lo;
        x.hi = hi;
        return node(std::move(x));
    }
    int32_t quant(int32_t x) {
        const int32_t out = quant1(x);
        if (out != x) {
            const int nxt = peek();
            if (nxt == '?') ++i;  // lazy: the same language under a full match
            else if (nxt == '*' || nxt == '+' || nxt == '{') throw RxUnsupported{};
        }
        return out;
    }
    // the decimal at s[k] (ASCII digits, at least one): its value (saturated), k moved past it
    static bool digits(const char* s, int64_t lim, int64_t& k, long long& v) {
        const int64_t k0 = k;
        v = 0;
        while (k < lim && s[k] >= '0' && s[k] <= '9') {
            v = std::min<long long>(v * 10 + (s[k] - '0'), 1000000);
            ++k;
        }
        return k > k0;
    }
    int32_t quant1(int32_t x) {
        const int c = peek();
        if (c == '?') {
            ++i;
            return rep(x, 0, 1);
        }
        if (c == '*') {
            ++i;
            return rep(x, 0, -1);
        }
        if (c == '+') {
            ++i;
            return rep(x, 1, -1);
        }
        if (c == '{') {
            long long lo, hi;
            const int64_t k = quantifier(i, lo, hi);
            if (k < 0) throw RxUnsupported{};
            i = k;
            if (lo > 64 || hi > 64 || (hi >= 0 && hi < lo)) throw RxUnsupported{};
            return rep(x, static_cast<int>(lo), static_cast<int>(hi));
        }
        return x;
    }
    // \{(\d+)(,(\d*))?\} at s[k], within s[:end]: the index past it (-1: none), its bounds
    // (hi -1: unbounded)
    int64_t quantifier(int64_t k, long long& lo, long long& hi) const {
        if (!(k < end && s[k] == '{')) return -1;
        ++k;
        if (!digits(s, end, k, lo)) return -1;
        if (k < end && s[k] == ',') {
            ++k;
            if (!digits(s, end, k, hi)) hi = -1;
        } else {
            hi = lo;
        }
        if (!(k < end && s[k] == '}')) return -1;
        return k + 1;
    }
    RxChars safe(const RxChars& c) const {
        if (c.empty()) throw RxUnsupported{};
        for (int b = 0; b < 256; ++b)
            if (c.has(b) && !rx_safe_char(b)) throw RxUnsupported{};
        return c;
    }
    RxChars escape() {
        const char c = at(i);
        ++i;
        RxChars out;
        if (c == 'd' || c == 'w') {
            for (int b = '0'; b <= '9'; ++b) out.add(b);
            if (c == 'w') {
                for (int b = 'A'; b <= 'Z'; ++b) out.add(b);
                for (int b = 'a'; b <= 'z'; ++b) out.add(b);
                out.add('_');
            }
            return out;
        }
        if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) throw RxUnsupported{};
        out.add(static_cast<unsigned char>(c));
        return safe(out);
    }
    RxChars klass() {
        const bool negate = peek() == '^';
        if (negate) ++i;
        RxChars chars;
        bool first = true;
        while (true) {
            if (i >= end) throw RxUnsupported{};
            const char c = s[i];
            if (c == ']' && !first) {
                ++i;
                break;
            }
            first = false;
            ++i;
            RxChars lo_set;
            if (c == '\\') lo_set = escape();
            else lo_set.add(static_cast<unsigned char>(c));
            if (lo_set.count() != 1 && peek() == '-' && i + 1 < end && s[i + 1] != ']')
                throw RxUnsupported{};  // a class escape begins a range
            if (lo_set.count() == 1 && peek() == '-' && i + 1 < end && s[i + 1] != ']') {
                ++i;
                const char hi_c = at(i);
                ++i;
                int hi;
                if (hi_c == '\\') {
                    const RxChars hs = escape();
                    if (hs.count() != 1) throw RxUnsupported{};
                    hi = hs.only();
                } else {
                    hi = static_cast<unsigned char>(hi_c);
                }
                if (hi < lo_set.only()) throw RxUnsupported{};  // (a bad range to re)
                for (int b = lo_set.only(); b <= hi; ++b) chars.add(b);
            } else {
                for (int k = 0; k < 4; ++k) chars.w[k] |= lo_set.w[k];
            }
        }
        if (negate) {
            RxChars all;
            for (int b = 0; b < 256; ++b)
                if (rx_safe_char(b) && !chars.has(b)) all.add(b);
            chars = all;
        }
        return safe(chars);
    }
    int32_t atom() {
        const char c = at(i);
        ++i;
        if (c == '(') {
            if (starts(i, "?:")) i += 2;
            else if (starts(i, "?")) throw RxUnsupported{};
            if (++depth > max_depth) throw RxUnsupported{};  // (the recursion's bound)
            const int32_t x = alt();
            if (peek() != ')') throw RxUnsupported{};
            ++i;
            --depth;
            return x;
        }
        if (c == '[') return set_node(klass());
        if (c == '\\') return set_node(escape());
        if (c == '.' || c == '^' || c == '$' || c == '*' || c == '+' || c == '?') throw RxUnsupported{};
        long long lo, hi;
        if (c == '{' && quantifier(i - 1, lo, hi) >= 0) throw RxUnsupported{};  // nothing to repeat
        RxChars one;
        one.add(static_cast<unsigned char>(c));
        return set_node(safe(one));
    }
};

// _Nfa.build of nfa.py: states numbered as added, the edges and epsilon edges of each state in
// the order added.
struct RxNfa {
    const std::vector<RxNode>& nodes;
    int64_t cap;
    std::vector<int32_t> es, ed, xs, xd;
    std::vector<uint8_t> bits;
    int32_t n = 0;

    int32_t state() {
        if (n >= cap) throw RxTooMany{};
        return n++;
    }
    void eps(int32_t a, int32_t b) {
        xs.push_back(a);
        xd.push_back(b);
    }
    int32_t build(int32_t id, int32_t start) {
        const RxNode& x = nodes[static_cast<size_t>(id)];
        if (x.kind == 's') {
            const int32_t end = state();
            es.push_back(start);
            ed.push_back(end);
            const uint8_t* c = reinterpret_cast<const uint8_t*>(x.chars);  // little-endian words:
            bits.insert(bits.end(), c, c + 32);  // byte b / 8, bit b % 8
            return end;
        }
        if (x.kind == 'q') {
            int32_t cur = start;
            for (int32_t p : x.parts) cur = build(p, cur);
            return cur;
        }
        if (x.kind == 'a') {
            const int32_t end = state();
            for (int32_t p : x.parts) {
                const int32_t s = state();
                eps(start, s);
                eps(build(p, s), end);
            }
            return end;
        }
        const int32_t inner = x.parts[0];
        int32_t cur = start;
        for (int k = 0; k < x.lo; ++k) cur = build(inner, cur);
        if (x.hi < 0) {
            const int32_t loop = state();
            eps(cur, loop);
            eps(build(inner, loop), loop);
            return loop;
        }
        const int32_t end = state();
        eps(cur, end);
        for (int k = 0; k < x.hi - x.lo; ++k) {
            cur = build(inner, cur);
            eps(cur, end);
        }
        return end;
    }
};

// regex_dfa(pattern: bytes, quoted: bool, max_states: int, max_nfa: int, max_depth: int)
//   -> (src int32[], byte int32[], dst int32[], accept bool[m]): the DFA of ``pattern``'s full
//   matches (between two '"' bytes with ``quoted``), as nfa_fragment(seq(lit('"'),
//   pattern_node(pattern), lit('"'))) builds it: the same states, numbered alike; or an int:
//   0 outside the supported subset (or groups nested past ``max_depth``), 1 past ``max_states``
//   (> 0) DFA states, 2 past ``max_nfa`` NFA states. ASCII only (other text: ValueError).
PyObject* py_regex_dfa(PyObject*, PyObject* args) {
    const char* s;
    Py_ssize_t n;
    int quoted;
    long long max_states, max_nfa, max_depth;
    if (!PyArg_ParseTuple(args, "y#pLLL", &s, &n, &quoted, &max_states, &max_nfa, &max_depth)) return nullptr;
    for (Py_ssize_t k = 0; k < n; ++k)
        if (static_cast<unsigned char>(s[k]) >= 0x80) {
            PyErr_SetString(PyExc_ValueError, "regex_dfa: the pattern is not ASCII");
            return nullptr;
        }
    if (max_nfa <= 0 || max_nfa > (int64_t{1} << 24) || max_depth < 0 || max_depth > 1000) {
        PyErr_SetString(PyExc_ValueError, "regex_dfa: max_nfa must be in 1..2**24, max_depth in 0..1000");
        return nullptr;
    }
    RxParser p{s, static_cast<int64_t>(n), max_depth};
    Dfa dfa;
    int verdict = -1;  // -1: built
    try {
        int32_t root = p.parse();
        if (quoted) {  // seq(lit('"'), node, lit('"')): lit is a seq of one set
            RxChars q;
            q.add('"');
            RxNode a{'q'}, b{'q'}, top{'q'};
            a.parts = {p.set_node(q)};
            const int32_t ia = p.node(std::move(a));
            b.parts = {p.set_node(q)};
            const int32_t ib = p.node(std::move(b));
            top.parts = {ia, root, ib};
            root = p.node(std::move(top));
        }
        RxNfa g{p.nodes, max_nfa};
        const int32_t start = g.state();
        const int32_t final = g.build(root, start);
        // (the order of the edges is the reference's up to their order per state, on which the
        // subset construction does not depend)
        const NfaEdges nfa{g.n, g.es.data(), g.ed.data(), g.xs.data(), g.xd.data(), g.bits.data(),
                           static_cast<int64_t>(g.es.size()), static_cast<int64_t>(g.xs.size())};
        bool fits = true;
        if (!determinize_nogil(nfa, start, final, max_states, dfa, fits)) throw std::bad_alloc();
        if (!fits) verdict = 1;
    } catch (const RxUnsupported&) {
        verdict = 0;
    } catch (const RxTooMany&) {
        verdict = 2;
    } catch (const std::bad_alloc&) {
        return PyErr_NoMemory();
    }
    if (verdict >= 0) return PyLong_FromLong(verdict);
    return dfa_result(dfa, true);
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
    for (int64_t i = 0; i < ids.n; ++i) {
        const int32_t t = ids.p[i];
        if (t < 0 || t + 1 >= off.n || off.p[t] < 0 || off.p[t] > off.p[t + 1] || off.p[t + 1] > buf.n) {
            PyErr_SetString(PyExc_ValueError, "ids / offsets: out of range");
            return nullptr;
        }
    }
    Buf<int32_t> fin;
    Buf<int16_t> cnt;
    const size_t total = static_cast<size_t>(st.n) * static_cast<size_t>(ids.n);
    if (!fin.resize(total) || !cnt.resize(total)) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t k = 0; k < st.n; ++k) {
        for (int64_t i = 0; i < ids.n; ++i) {
            const int32_t t = ids.p[i];
            int32_t q = static_cast<int32_t>(st.p[k]);
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
    return pair_result(a, to_numpy(cnt, NPY_INT16));
}


// ---- eager tool registries (branch eager): an object's key automaton in one call ----------

// key_automaton(texts: list[bytes], required: bytes) -> (src, byte, dst, count, exit_states,
//   exit_keys): the key automaton of an object (slots/objects.py's _key_automaton, same states
//   in the same numbering, same edge order): texts[j] is key j's JSON text and ": ", required[j]
//   nonzero when key j is required. Exits in the reference's order: state 2 (after "}", key -1)
//   then each key's chain end (key j). The trie's children are kept in insertion order and the
//   windows' work list is a stack, as in the reference, so the numbering matches.
PyObject* py_key_automaton(PyObject*, PyObject* args) {
    PyObject *texts_o, *req_o;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &texts_o, &PyBytes_Type, &req_o)) return nullptr;
    const Py_ssize_t n = PyList_GET_SIZE(texts_o);
    if (PyBytes_GET_SIZE(req_o) != n || n >= (Py_ssize_t{1} << 20)) {
        PyErr_SetString(PyExc_ValueError, "key_automaton: one required flag per key, < 2**20 keys");
        return nullptr;
    }
    std::vector<std::string_view> texts(static_cast<size_t>(n));
    for (Py_ssize_t j = 0; j < n; ++j) {
        PyObject* o = PyList_GET_ITEM(texts_o, j);
        if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) == 0) {
            PyErr_SetString(PyExc_ValueError, "key_automaton: texts must be non-empty bytes");
            return nullptr;
        }
        texts[static_cast<size_t>(j)] = std::string_view(PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o)));
    }
    const char* req = PyBytes_AS_STRING(req_o);
    Buf<int32_t> src, byte, dst, exs, exk;
    bool ok = true;
    int64_t count = 3;
    try {
        const size_t nn = static_cast<size_t>(n);
        std::vector<size_t> unique(nn, 1), order(nn);
        for (size_t j = 0; j < nn; ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return texts[a] < texts[b]; });
        for (size_t k = 0; k + 1 < nn; ++k) {
            const std::string_view x = texts[order[k]], y = texts[order[k + 1]];
            size_t c = 0;
            while (c < x.size() && c < y.size() && x[c] == y[c]) ++c;
            unique[order[k]] = std::max(unique[order[k]], c + 1);
            unique[order[k + 1]] = std::max(unique[order[k + 1]], c + 1);
        }
        // a trie of those prefixes, children in insertion order; through[node]: keys, ascending
        std::vector<std::vector<std::pair<uint8_t, int32_t>>> children(1);
        std::vector<std::vector<int32_t>> through(1);
        std::vector<int32_t> depth(1, 0);
        for (size_t j = 0; j < nn; ++j) through[0].push_back(static_cast<int32_t>(j));
        for (size_t j = 0; j < nn; ++j) {
            int32_t node = 0;
            const size_t top = std::min(unique[j], texts[j].size());
            for (size_t i = 0; i < top; ++i) {
                const uint8_t b = static_cast<uint8_t>(texts[j][i]);
                int32_t nxt = -1;
                for (const auto& [lab, ch] : children[static_cast<size_t>(node)])
                    if (lab == b) {
                        nxt = ch;
                        break;
                    }
                if (nxt < 0) {
                    nxt = static_cast<int32_t>(children.size());
                    children[static_cast<size_t>(node)].emplace_back(b, nxt);
                    children.emplace_back();
                    through.emplace_back();
                    depth.push_back(depth[static_cast<size_t>(node)] + 1);
                }
                node = nxt;
                through[static_cast<size_t>(node)].push_back(static_cast<int32_t>(j));
            }
        }
        std::vector<int32_t> last(nn + 1, static_cast<int32_t>(n) - 1);
        std::vector<uint8_t> optional_from(nn + 1, 1);
        size_t r = nn;
        for (size_t i = nn; i-- > 0;) {
            if (req[i]) r = i;
            last[i] = static_cast<int32_t>(std::min(r, nn - 1));
            optional_from[i] = r == nn;
        }
        auto edge = [&](int64_t s, int b, int64_t d) {
            ok = ok && src.push(static_cast<int32_t>(s)) && byte.push(b) && dst.push(static_cast<int32_t>(d));
        };
        const int64_t opened = 1, end = 2;
        edge(0, '{', opened);
        auto entry = [&](size_t i) -> int64_t { return i == 0 ? 0 : 3 + static_cast<int64_t>(i) - 1; };
        count += n;
        struct Key {
            int32_t node, a, b;
            bool operator==(const Key& o) const { return node == o.node && a == o.a && b == o.b; }
        };
        struct KeyHash {
            size_t operator()(const Key& k) const {
                return std::hash<uint64_t>()((static_cast<uint64_t>(static_cast<uint32_t>(k.node)) << 40) ^
                                             (static_cast<uint64_t>(static_cast<uint32_t>(k.a)) << 20) ^
                                             static_cast<uint64_t>(static_cast<uint32_t>(k.b)));
            }
        };
        std::unordered_map<Key, int64_t, KeyHash> ids;
        std::vector<Key> todo;
        struct Alone {
            int64_t from;
            int b;
            int32_t key, depth;
        };
        std::vector<Alone> alone;
        for (size_t i = 0; i <= nn; ++i) {
            const int64_t at = i == 0 ? opened : entry(i);
            if (optional_from[i]) edge(at, '}', end);
            if (i == nn) continue;
            const int32_t ii = static_cast<int32_t>(i);
            if (i == 0) {
                ids[Key{0, 0, last[0]}] = opened;
                todo.push_back(Key{0, 0, last[0]});
                continue;
            }
            const int64_t comma = count++;
            edge(at, ',', comma);
            if (ii == last[i]) {
                alone.push_back(Alone{comma, ' ', ii, 0});
                continue;
            }
            const int64_t s = count++;
            ids[Key{0, ii, last[i]}] = s;
            todo.push_back(Key{0, ii, last[i]});
            edge(comma, ' ', s);
        }
        while (!todo.empty()) {
            const Key k = todo.back();
            todo.pop_back();
            const int64_t s = ids[k];
            for (const auto& [c, child] : children[static_cast<size_t>(k.node)]) {
                const std::vector<int32_t>& here = through[static_cast<size_t>(child)];
                const auto lo = std::lower_bound(here.begin(), here.end(), k.a);
                const auto hi = std::upper_bound(here.begin(), here.end(), k.b);
                if (lo >= hi) continue;
                const int32_t first = *lo, lastk = *(hi - 1);
                if (first == lastk) {
                    alone.push_back(Alone{s, c, first, depth[static_cast<size_t>(child)]});
                    continue;
                }
                const Key nk{child, first, lastk};
                auto it = ids.find(nk);
                int64_t t;
                if (it == ids.end()) {
                    t = count++;
                    ids.emplace(nk, t);
                    todo.push_back(nk);
                } else {
                    t = it->second;
                }
                edge(s, c, t);
            }
        }
        // each key's chain, from the shallowest depth a window reaches it alone, as one run
        std::vector<int64_t> shallow(nn, int64_t{1} << 30), base(nn, 0);
        for (const Alone& a : alone) shallow[static_cast<size_t>(a.key)] = std::min<int64_t>(shallow[static_cast<size_t>(a.key)], a.depth);
        ok = ok && exs.push(static_cast<int32_t>(end)) && exk.push(-1);
        for (size_t j = 0; j < nn && ok; ++j) {
            const int64_t d = shallow[j];
            const int64_t len = static_cast<int64_t>(texts[j].size());
            if (d > len) continue;
            base[j] = count - d;
            for (int64_t x = d; x < len; ++x) {
                const int64_t s = count + (x - d);
                edge(s, static_cast<uint8_t>(texts[j][static_cast<size_t>(x)]), s + 1);
            }
            count += len - d + 1;
            ok = ok && exs.push(static_cast<int32_t>(count - 1)) && exk.push(static_cast<int32_t>(j));
        }
        for (const Alone& a : alone) edge(a.from, a.b, base[static_cast<size_t>(a.key)] + a.depth);
        if (count > (int64_t{1} << 31) - 1) {
            PyErr_SetString(PyExc_ValueError, "key_automaton: too many states");
            return nullptr;
        }
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    if (!ok) return PyErr_NoMemory();
    PyObject* a = to_numpy(src, NPY_INT32);
    PyObject* b = to_numpy(byte, NPY_INT32);
    PyObject* c = to_numpy(dst, NPY_INT32);
    PyObject* e = to_numpy(exs, NPY_INT32);
    PyObject* f = to_numpy(exk, NPY_INT32);
    if (!a || !b || !c || !e || !f) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_XDECREF(e);
        Py_XDECREF(f);
        return nullptr;
    }
    return Py_BuildValue("(NNNLNN)", a, b, c, static_cast<long long>(count), e, f);
}

// bm25_accumulate(ptr, docs, weights, terms, coefs, out) -> None: for each query term i (in
// order), out[docs[j]] += double(weights[j]) * coefs[i] over the term's postings
// j in [ptr[terms[i]], ptr[terms[i] + 1]). The numpy reference (BM25Index.scores) gathers the
// same products in the same order and sums them with one bincount: identical float64 sums.
PyObject* py_bm25_accumulate(PyObject*, PyObject* args) {
    PyObject *o_ptr, *o_docs, *o_w, *o_terms, *o_coefs, *o_out;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_ptr, &o_docs, &o_w, &o_terms, &o_coefs, &o_out))
        return nullptr;
    I64View ptr, docs, terms;
    HeldBuffer w, coefs, out;
    if (!ptr.open(o_ptr, "ptr") || !docs.open(o_docs, "docs") || !terms.open(o_terms, "terms"))
        return nullptr;
    if (!w.get(o_w, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) ||
        !coefs.get(o_coefs, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) ||
        !out.get(o_out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE))
        return nullptr;
    if (w.item_code() != 'f' || w.b.itemsize != 4 || w.b.len / 4 != docs.n) {
        PyErr_SetString(PyExc_TypeError, "weights: expected float32, one per doc");
        return nullptr;
    }
    if (coefs.item_code() != 'd' || coefs.b.itemsize != 8 || coefs.b.len / 8 != terms.n) {
        PyErr_SetString(PyExc_TypeError, "coefs: expected float64, one per term");
        return nullptr;
    }
    if (out.item_code() != 'd' || out.b.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "out: expected a contiguous float64 array");
        return nullptr;
    }
    const int64_t n_terms = ptr.n - 1, n_out = out.b.len / 8;
    const float* wp = static_cast<const float*>(w.b.buf);
    const double* cp = static_cast<const double*>(coefs.b.buf);
    double* op = static_cast<double*>(out.b.buf);
    for (int64_t i = 0; i < terms.n; ++i) {
        const int64_t t = terms.p[i];
        if (t < 0 || t >= n_terms || ptr.p[t] < 0 || ptr.p[t] > ptr.p[t + 1] || ptr.p[t + 1] > docs.n) {
            PyErr_Format(PyExc_IndexError, "term %lld: out of range or bad postings", static_cast<long long>(t));
            return nullptr;
        }
    }
    for (int64_t i = 0; i < terms.n; ++i) {
        const int64_t t = terms.p[i];
        const double c = cp[i];
        for (int64_t j = ptr.p[t], hi = ptr.p[t + 1]; j < hi; ++j) {
            const int64_t d = docs.p[j];
            if (static_cast<uint64_t>(d) >= static_cast<uint64_t>(n_out)) {
                PyErr_Format(PyExc_IndexError, "doc %lld out of range for %lld rows",
                             static_cast<long long>(d), static_cast<long long>(n_out));
                return nullptr;
            }
            op[d] += static_cast<double>(wp[j]) * c;
        }
    }
    Py_RETURN_NONE;
}

// scatter_max(out, values, rows, owners) -> None: out[owners[j]] = max(out[owners[j]],
// values[rows[j]]) for every j (a value's best row: numpy's maximum.at, without its per-item
// dispatch).
PyObject* py_scatter_max(PyObject*, PyObject* args) {
    PyObject *o_out, *o_val, *o_rows, *o_own;
    if (!PyArg_ParseTuple(args, "OOOO", &o_out, &o_val, &o_rows, &o_own)) return nullptr;
    HeldBuffer out, val;
    I64View rows, own;
    if (!out.get(o_out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) ||
        !val.get(o_val, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) || !rows.open(o_rows, "rows") ||
        !own.open(o_own, "owners"))
        return nullptr;
    if (out.item_code() != 'd' || out.b.itemsize != 8 || val.item_code() != 'd' || val.b.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "out and values: expected contiguous float64 arrays");
        return nullptr;
    }
    if (rows.n != own.n) {
        PyErr_SetString(PyExc_ValueError, "rows and owners differ in length");
        return nullptr;
    }
    double* op = static_cast<double*>(out.b.buf);
    const double* vp = static_cast<const double*>(val.b.buf);
    const uint64_t n_out = static_cast<uint64_t>(out.b.len / 8), n_val = static_cast<uint64_t>(val.b.len / 8);
    for (int64_t j = 0; j < rows.n; ++j) {
        const uint64_t r = static_cast<uint64_t>(rows.p[j]), o = static_cast<uint64_t>(own.p[j]);
        if (r >= n_val || o >= n_out) {
            PyErr_Format(PyExc_IndexError, "scatter_max: row %lld or owner %lld out of range",
                         static_cast<long long>(rows.p[j]), static_cast<long long>(own.p[j]));
            return nullptr;
        }
        if (vp[r] > op[o]) op[o] = vp[r];
    }
    Py_RETURN_NONE;
}

// The first i >= from with s[i] > floor (n if none): a loop of its own, so that its index and
// bound stay in registers (inlined into the heap loop they were spilled to the stack: 2.5 ns
// per score instead of ~0.3).
__attribute__((noinline)) int64_t skip_to_above(const double* s, int64_t from, int64_t n, double floor) {
    int64_t i = from;
    for (; i + 4 <= n; i += 4) {
        const bool any = (s[i] > floor) | (s[i + 1] > floor) | (s[i + 2] > floor) | (s[i + 3] > floor);
        if (any) break;
    }
    for (; i < n; ++i)
        if (s[i] > floor) return i;
    return n;
}

// top_positive(scores, k) -> int64 array: the ids of the (up to) k best positive scores, best
// by (-score, id), returned in ascending id order.
PyObject* py_top_positive(PyObject*, PyObject* args) {
    PyObject* o_s;
    long long k;
    if (!PyArg_ParseTuple(args, "OL", &o_s, &k)) return nullptr;
    HeldBuffer sb;
    if (!sb.get(o_s, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) return nullptr;
    if (sb.item_code() != 'd' || sb.b.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "scores: expected a contiguous float64 array");
        return nullptr;
    }
    if (k < 0) {
        PyErr_SetString(PyExc_ValueError, "k must be >= 0");
        return nullptr;
    }
    const double* s = static_cast<const double*>(sb.b.buf);
    const int64_t n = k ? sb.b.len / 8 : 0;
    // one scan with a heap of the k best so far, worst on top: a later id never beats an equal
    // score (ties go to the lower id), so only a strictly higher score enters a full heap
    std::vector<std::pair<double, int64_t>> heap;
    heap.reserve(static_cast<size_t>(std::min<long long>(k, n)));
    auto worse = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    double floor = 0.0;  // a score must beat this to enter
    for (int64_t i = skip_to_above(s, 0, n, floor); i < n; i = skip_to_above(s, i + 1, n, floor)) {
        if (static_cast<long long>(heap.size()) < k) {
            heap.emplace_back(s[i], i);
            std::push_heap(heap.begin(), heap.end(), worse);
            if (static_cast<long long>(heap.size()) == k) floor = heap.front().first;
        } else {
            std::pop_heap(heap.begin(), heap.end(), worse);
            heap.back() = {s[i], i};
            std::push_heap(heap.begin(), heap.end(), worse);
            floor = heap.front().first;
        }
    }
    std::vector<int64_t> hit(heap.size());
    for (size_t j = 0; j < heap.size(); ++j) hit[j] = heap[j].second;
    std::sort(hit.begin(), hit.end());
    npy_intp dim = static_cast<npy_intp>(hit.size());
    PyObject* arr = PyArray_SimpleNew(1, &dim, NPY_INT64);
    if (!arr) return nullptr;
    if (dim) std::memcpy(PyArray_DATA(reinterpret_cast<PyArrayObject*>(arr)), hit.data(), hit.size() * 8);
    return arr;
}

PyObject* py_memset_bandwidth(PyObject*, PyObject* args) {
    // memset_bandwidth(buffer, repeats) -> seconds for ``repeats`` memsets of the whole buffer
    Py_buffer b;
    long long reps;
    if (!PyArg_ParseTuple(args, "w*L", &b, &reps)) return nullptr;
    double t0 = now_seconds();
    for (long long i = 0; i < reps; ++i) {
        std::memset(b.buf, static_cast<int>(i & 1), static_cast<size_t>(b.len));
        asm volatile("" ::: "memory");
    }
    double dt = now_seconds() - t0;
    PyBuffer_Release(&b);
    return PyFloat_FromDouble(dt);
}

// pack_tokens(tokens: tuple[bytes, ...]) -> (buffer: uint8 array, offsets: int64 array): every
// token's bytes concatenated and where each starts (Vocabulary.buffer / offsets)
PyObject* py_pack_tokens(PyObject*, PyObject* args) {
    PyObject* tokens;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &tokens)) return nullptr;
    const Py_ssize_t n = PyTuple_GET_SIZE(tokens);
    Buf<int64_t> off;
    if (!off.resize(static_cast<size_t>(n) + 1)) return PyErr_NoMemory();
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        if (!PyBytes_Check(o)) return PyErr_Format(PyExc_TypeError, "tokens[%zd] is not bytes", i);
        off[static_cast<size_t>(i) + 1] = off[static_cast<size_t>(i)] + PyBytes_GET_SIZE(o);
    }
    Buf<uint8_t> buf;
    if (!buf.resize(static_cast<size_t>(off[static_cast<size_t>(n)]))) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        const size_t at = static_cast<size_t>(off[static_cast<size_t>(i)]);
        const size_t len = static_cast<size_t>(PyBytes_GET_SIZE(o));
        if (len) std::memcpy(buf.p + at, PyBytes_AS_STRING(o), len);  // (buf.p is null when all are empty)
    }
    PyObject* b = to_numpy(buf, NPY_UINT8);
    if (!b) return nullptr;
    PyObject* f = to_numpy(off, NPY_INT64);
    if (!f) {
        Py_DECREF(b);
        return nullptr;
    }
    return Py_BuildValue("(NN)", b, f);
}

// join_tokens(tokens: tuple[bytes, ...], selected: bool buffer) -> bytes: the selected tokens'
// bytes joined by b"\0" (Vocabulary.content_hash)
PyObject* py_join_tokens(PyObject*, PyObject* args) {
    PyObject* tokens;
    Py_buffer sel;
    if (!PyArg_ParseTuple(args, "O!y*", &PyTuple_Type, &tokens, &sel)) return nullptr;
    const Py_ssize_t n = PyTuple_GET_SIZE(tokens);
    if (sel.len != n) {
        PyBuffer_Release(&sel);
        return PyErr_Format(PyExc_ValueError, "selected has %zd entries for %zd tokens", sel.len, n);
    }
    const uint8_t* m = static_cast<const uint8_t*>(sel.buf);
    Py_ssize_t total = 0, count = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        if (!PyBytes_Check(o)) {
            PyBuffer_Release(&sel);
            return PyErr_Format(PyExc_TypeError, "tokens[%zd] is not bytes", i);
        }
        if (m[i]) {
            total += PyBytes_GET_SIZE(o);
            ++count;
        }
    }
    PyObject* out = PyBytes_FromStringAndSize(nullptr, count ? total + count - 1 : 0);
    if (!out) {
        PyBuffer_Release(&sel);
        return nullptr;
    }
    char* w = PyBytes_AS_STRING(out);
    bool first = true;
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!m[i]) continue;
        if (!first) *w++ = '\0';
        first = false;
        PyObject* o = PyTuple_GET_ITEM(tokens, i);
        if (PyBytes_GET_SIZE(o)) std::memcpy(w, PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o)));
        w += PyBytes_GET_SIZE(o);
    }
    PyBuffer_Release(&sel);
    return out;
}

PyMethodDef module_methods[] = {
    {"compact_layout", py_compact_layout, METH_VARARGS,
     "compact_layout(row_ptr, tokens, children, far_pos, far_child, value_bytes, value_offsets, "
     "terminator, max_keys, trie_or_None, end_ids) -> arrays of the compact layout"},
    {"compile", py_compile, METH_VARARGS,
     "compile(values, trie, terminator, end_ids, allow_end, max_keys=0, threads=1, split_min=2048) -> (arrays, unreachable)"},
    {"dfa_masks", py_dfa_masks, METH_VARARGS,
     "dfa_masks(table, byte_class, states, trie, words=0, alt_trie=None, alt=None, share=True) -> (ptr, ids), "
     "or packed rows; dfa_masks(wire, states, trie, ...) -> (table, byte_class, that)"},
    {"dfa_masks_many", py_dfa_masks_many, METH_O,
     "dfa_masks_many(calls) -> [dfa_masks(*call) for call in calls], in one release of the GIL"},
    {"dfa_list_masks", py_dfa_list_masks, METH_VARARGS,
     "dfa_list_masks(table, byte_class, states, cand, buffer, offsets) -> (ptr, ids)"},
    {"dfa_compress", py_dfa_compress, METH_VARARGS,
     "dfa_compress(src, byte, dst, n) -> (table, byte_class)"},
    {"dfa_wire", py_dfa_wire, METH_VARARGS,
     "dfa_wire(srcs, bytes, dsts, offsets, n, link_state, link_from, extra) -> (src, byte, dst)"},
    {"nfa_determinize", py_nfa_determinize, METH_VARARGS,
     "nfa_determinize(n, edge_src, edge_dst, edge_bytes, eps_src, eps_dst, start, final, max_states=0) -> (table, accept) | None"},
    {"regex_dfa", py_regex_dfa, METH_VARARGS,
     "regex_dfa(pattern: bytes, quoted, max_states, max_nfa, max_depth) -> (src, byte, dst, accept) | 0 (unsupported) | 1 (> max_states) | 2 (> max_nfa)"},
    {"walk_counts", py_walk_counts, METH_VARARGS,
     "walk_counts(table, starts, count_state, ids, buffer, offsets) -> (final, counts)"},
    {"pack_tokens", py_pack_tokens, METH_VARARGS,
     "pack_tokens(tokens) -> (buffer, offsets): the tokens' bytes concatenated, and where each starts"},
    {"join_tokens", py_join_tokens, METH_VARARGS,
     "join_tokens(tokens, selected) -> bytes: the selected tokens joined by NUL bytes"},
    {"memset_bandwidth", py_memset_bandwidth, METH_VARARGS,
     "memset_bandwidth(buffer, repeats) -> seconds"},
    {"bm25_accumulate", py_bm25_accumulate, METH_VARARGS,
     "bm25_accumulate(ptr, docs, weights, terms, coefs, out): out[docs] += weights * coef per term"},
    {"scatter_max", py_scatter_max, METH_VARARGS,
     "scatter_max(out, values, rows, owners): out[owners] = max(out[owners], values[rows])"},
    {"top_positive", py_top_positive, METH_VARARGS,
     "top_positive(scores, k) -> ids of the k best positive scores (ties: lower id), ascending"},
    // eager tool registries (branch eager)
    {"key_automaton", py_key_automaton, METH_VARARGS,
     "key_automaton(texts, required) -> (src, byte, dst, count, exit_states, exit_keys)"},
    // fixed formats and shared pieces (branch fmt)
    {"csr_extend", py_csr_extend, METH_VARARGS,
     "csr_extend(ptr, ids, states, lo, hi, pool) -> (ptr, ids): pool[lo[j]:hi[j]] appended to the list of states[j]"},
    {"csr_pack", py_csr_pack, METH_VARARGS,
     "csr_pack(ptr, ids, which, words) -> packed rows of the lists of which"},
    {"csr_split", py_csr_split, METH_VARARGS,
     "csr_split(ptr, ids, at, n, wide, drop, words) -> (where, rows, ptr, ids): a piece's lists split into packed wide rows and narrow lists less the dropped ids"},
    {"spelled_count", py_spelled_count, METH_VARARGS,
     "spelled_count(trie, allowed, limit) -> tokens spelled with the allowed bytes alone, up to limit"},
    {"int_range_dfa", py_int_range_dfa, METH_VARARGS,
     "int_range_dfa(zero, pos_lo, pos_hi, neg_lo, neg_hi) -> (src, byte, dst, accept)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_core",
                          "trierouter's compiled core (see trierouter.registry.core).", -1,
                          module_methods};

}  // namespace

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    TokenTrieType.tp_name = "trierouter.registry._core.TokenTrie";
    TokenTrieType.tp_basicsize = sizeof(TokenTrieObject);
    TokenTrieType.tp_flags = Py_TPFLAGS_DEFAULT;
    TokenTrieType.tp_new = PyType_GenericNew;
    TokenTrieType.tp_init = reinterpret_cast<initproc>(TokenTrie_init);
    TokenTrieType.tp_dealloc = reinterpret_cast<destructor>(TokenTrie_dealloc);
    TokenTrieType.tp_getset = TokenTrie_getset;
    TokenTrieType.tp_methods = TokenTrie_methods;
    TokenTrieType.tp_doc = "Forward trie of a vocabulary's matchable token bytes.";
    CoreType.tp_name = "trierouter.registry._core.Core";
    CoreType.tp_basicsize = sizeof(CoreObject);
    CoreType.tp_flags = Py_TPFLAGS_DEFAULT;
    CoreType.tp_new = PyType_GenericNew;
    CoreType.tp_init = reinterpret_cast<initproc>(Core_init);
    CoreType.tp_dealloc = reinterpret_cast<destructor>(Core_dealloc);
    CoreType.tp_methods = Core_methods;
    CoreType.tp_getset = Core_getset;
    CoreType.tp_doc = "Serving over a ChoiceSet's arrays.";
    MatcherType.tp_name = "trierouter.registry._core.MatcherBase";
    MatcherType.tp_basicsize = sizeof(MatcherObject);
    MatcherType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
    MatcherType.tp_new = Matcher_new;
    MatcherType.tp_dealloc = reinterpret_cast<destructor>(Matcher_dealloc);
    MatcherType.tp_methods = Matcher_methods;
    MatcherType.tp_getset = Matcher_getset;
    MatcherType.tp_doc = "Per-request state and history over a set (native or Python steps).";
    if (PyType_Ready(&TokenTrieType) < 0 || PyType_Ready(&CoreType) < 0 ||
        PyType_Ready(&MatcherType) < 0)
        return nullptr;
    PyObject* m = PyModule_Create(&module_def);
    if (!m) return nullptr;
    Py_INCREF(&TokenTrieType);
    Py_INCREF(&CoreType);
    Py_INCREF(&MatcherType);
    if (PyModule_AddObject(m, "TokenTrie", reinterpret_cast<PyObject*>(&TokenTrieType)) < 0 ||
        PyModule_AddObject(m, "Core", reinterpret_cast<PyObject*>(&CoreType)) < 0 ||
        PyModule_AddObject(m, "MatcherBase", reinterpret_cast<PyObject*>(&MatcherType)) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", TRIEROUTER_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
