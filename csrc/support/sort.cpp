// The comparison/MSD sort of 8-byte keys (see sort.h).
#include "support/sort.h"

namespace trierouter {

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

}  // namespace trierouter
