// Benchmark-only entry point: memset_bandwidth (benchmarks/compile_and_step.py's memory roofline).
#include "bindings/common.h"
#include "support/threads.h"

namespace trierouter {

void bind_bench(nb::module_& m) {
    // memset_bandwidth(buffer, repeats) -> seconds for ``repeats`` memsets of the whole buffer
    m.def(
        "memset_bandwidth",
        [](const nb::ndarray<nb::c_contig, nb::device::cpu>& buffer, int64_t repeats) {
            void* p = buffer.data();
            const size_t n = buffer.nbytes();
            const double t0 = now_seconds();
            for (int64_t i = 0; i < repeats; ++i) {
                std::memset(p, static_cast<int>(i & 1), n);
                asm volatile("" ::: "memory");
            }
            return now_seconds() - t0;
        },
        "buffer"_a.noconvert(), "repeats"_a, "memset_bandwidth(buffer, repeats) -> seconds");
}

}  // namespace trierouter
