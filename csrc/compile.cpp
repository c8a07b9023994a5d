// The set compile's helpers (see compile.h).
#include "compile.h"

namespace trierouter {

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

}  // namespace trierouter
