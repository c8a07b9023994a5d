// Growable buffers and the huge-page allocator behind every large array of the core.
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
#include <sys/mman.h>

namespace trierouter {

// A contiguous run of ``n`` items at ``p`` (not owned): what the algorithms take.
template <class T>
struct Span {
    const T* p = nullptr;
    int64_t n = 0;
};
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
void* big_alloc(size_t bytes, size_t* mapped, size_t min = 2 * HUGE_PAGE, size_t pages_from = SIZE_MAX);
void big_free(void* p, size_t mapped);

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

}  // namespace trierouter
