// Threads, clocks and CPU counts: chunks of work on threads of their own, per-phase timing.
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
#include <sched.h>
#include <sys/resource.h>
#include <ctime>

namespace trierouter {

inline double now_seconds() {
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

// The CPUs this process may run on (sched_getaffinity; 1 if unknown).
inline int64_t available_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
    return std::max(1, CPU_COUNT(&set));
}

}  // namespace trierouter
