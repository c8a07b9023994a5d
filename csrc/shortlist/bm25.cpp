// The shortlist's BM25 kernels (see bm25.h).
#include "shortlist/bm25.h"

#include <algorithm>
#include <utility>

namespace trierouter {

int64_t bm25_accumulate(const int64_t* ptr, const int64_t* docs, const float* weights, const int64_t* terms,
                        const double* coefs, int64_t n_terms, double* out, int64_t n_out) {
    for (int64_t i = 0; i < n_terms; ++i) {
        const int64_t t = terms[i];
        const double c = coefs[i];
        for (int64_t j = ptr[t], hi = ptr[t + 1]; j < hi; ++j) {
            const int64_t d = docs[j];
            if (static_cast<uint64_t>(d) >= static_cast<uint64_t>(n_out)) return d;
            out[d] += static_cast<double>(weights[j]) * c;
        }
    }
    return -1;
}

int64_t scatter_max(double* out, uint64_t n_out, const double* values, uint64_t n_values, const int64_t* rows,
                    const int64_t* owners, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        const uint64_t r = static_cast<uint64_t>(rows[j]), o = static_cast<uint64_t>(owners[j]);
        if (r >= n_values || o >= n_out) return j;
        if (values[r] > out[o]) out[o] = values[r];
    }
    return -1;
}

namespace {

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

}  // namespace

std::vector<int64_t> top_positive(const double* s, int64_t n, long long k) {
    if (k <= 0) return {};
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
    return hit;
}

}  // namespace trierouter
