// Runs every TEST of the C++ core's unit tests (see check.h).
#include "check.h"

int main() {
    for (const check::Case& c : check::cases()) {
        const int before = check::failures();
        c.fn();
        std::printf("%-40s %s\n", c.name, check::failures() == before ? "ok" : "FAILED");
    }
    std::printf("%zu tests, %d failed checks\n", check::cases().size(), check::failures());
    return check::failures() ? 1 : 0;
}
