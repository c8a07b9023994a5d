// Benchmark-only entry point: memset_bandwidth (benchmarks/compile_and_step.py's memory roofline).
#include "bindings/common.h"
#include "support/threads.h"

namespace trierouter {

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


}  // namespace trierouter
