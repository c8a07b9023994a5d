// Huge-page allocation (see buffers.h).
#include "support/buffers.h"

#include <sys/mman.h>

namespace trierouter {

void* big_alloc(size_t bytes, size_t* mapped, size_t min, size_t pages_from) {
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

}  // namespace trierouter
