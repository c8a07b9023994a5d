// A tiny test framework for the C++ core's unit tests (no interpreter, nothing downloaded):
// TEST(name) { ... CHECK(cond); CHECK_EQ(a, b); } registers a test; main() runs them all and
// exits nonzero when a check failed.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace check {

struct Case {
    const char* name;
    std::function<void()> fn;
};
inline std::vector<Case>& cases() {
    static std::vector<Case> all;
    return all;
}
inline int& failures() {
    static int n = 0;
    return n;
}
struct Register {
    Register(const char* name, std::function<void()> fn) { cases().push_back({name, std::move(fn)}); }
};
inline void fail(const char* file, int line, const std::string& what) {
    ++failures();
    std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what.c_str());
}

}  // namespace check

#define CHECK_CAT2(a, b) a##b
#define CHECK_CAT(a, b) CHECK_CAT2(a, b)
#define TEST(name)                                                                      \
    static void CHECK_CAT(test_, name)();                                               \
    static check::Register CHECK_CAT(check_register_, name)(#name, CHECK_CAT(test_, name)); \
    static void CHECK_CAT(test_, name)()
#define CHECK(cond) \
    ((cond) ? (void)0 : check::fail(__FILE__, __LINE__, #cond))
#define CHECK_EQ(a, b)                                                                          \
    (((a) == (b)) ? (void)0                                                                     \
                  : check::fail(__FILE__, __LINE__,                                             \
                                std::string(#a " == " #b " (") + std::to_string(a) + " vs " + \
                                    std::to_string(b) + ")"))
