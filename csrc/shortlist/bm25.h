// The shortlist's BM25 kernels (trierouter.shortlist's native backend): plain loops over arrays;
// nothing of the decoding core uses them.
#pragma once

#include <cstdint>
#include <vector>

namespace trierouter {

// For each query term i (in order), out[docs[j]] += double(weights[j]) * coefs[i] over the
// term's postings j in [ptr[terms[i]], ptr[terms[i] + 1]) (terms checked by the caller). The
// numpy reference (BM25Index.scores) gathers the same products in the same order: identical
// float64 sums. -1, or the first doc id out of range for ``n_out`` rows (then stops there).
int64_t bm25_accumulate(const int64_t* ptr, const int64_t* docs, const float* weights, const int64_t* terms,
                        const double* coefs, int64_t n_terms, double* out, int64_t n_out);

// out[owners[j]] = max(out[owners[j]], values[rows[j]]) for j < n. -1, or the first j whose row
// or owner is out of range (then stops there).
int64_t scatter_max(double* out, uint64_t n_out, const double* values, uint64_t n_values, const int64_t* rows,
                    const int64_t* owners, int64_t n);

// The ids of the (up to) k best positive scores of s[0 .. n), best by (-score, id), in
// ascending id order.
std::vector<int64_t> top_positive(const double* s, int64_t n, long long k);

}  // namespace trierouter
