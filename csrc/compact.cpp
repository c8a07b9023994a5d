// Compact layout walks (see compact.h).
#include "compact.h"

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

}  // namespace trierouter
