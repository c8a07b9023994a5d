// Fixed formats: integer ranges as automata; object key automata.
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
#include "regex.h"
#include "support/buffers.h"

namespace trierouter {

// int_range_dfa(zero: bool, pos_lo, pos_hi, neg_lo, neg_hi) -> (src, byte, dst, accept): the
//   automaton of formats.integer_range_fragment, built the same way (same states, same order):
//   canonical decimals, "0" if zero, digits in [pos_lo, pos_hi] and "-" then digits in
//   [neg_lo, neg_hi]; each bound a decimal string >= 1 without leading zeros, a high bound ""
//   for none, a part absent when its low bound is "".
struct RangeElem {  // one length's constraint: r digits left, low / high rest ("": any);
    int r;          // r = -1: a tail of at least t more digits, any; -2: the same, first not 0
    int t;
    std::string low, high;
    bool operator<(const RangeElem& o) const {
        if (r != o.r) return r < o.r;
        if (t != o.t) return t < o.t;
        if (low != o.low) return low < o.low;
        return high < o.high;
    }
    bool operator==(const RangeElem& o) const { return r == o.r && t == o.t && low == o.low && high == o.high; }
};
using RangeKey = std::vector<RangeElem>;

bool all_of_char(const std::string& s, size_t from, char c);

// a <= b for decimal strings without leading zeros
bool dec_le(const std::string& a, const std::string& b);

RangeKey range_start(const std::string& lo, const std::string& hi);

// the constraints left after digit d, into out (cleared; reused by the caller: no allocation
// per step once its capacity is reached)
void range_step(const RangeKey& key, char d, RangeKey& out);

uint64_t range_key_hash(const RangeKey& k);

// The automaton of formats.integer_range_fragment (see the binding's int_range_dfa): canonical
// decimals, "0" if ``zero``, digits in [pl, ph] and "-" then digits in [nl, nh] (bounds:
// decimal strings >= 1 without leading zeros, "" for none). Throws std::bad_alloc.
void int_range_dfa(bool zero, const char* pl, const char* ph, const char* nl, const char* nh, Dfa& out);

// An object's key automaton (slots/objects.py's _key_automaton, same states, same numbering,
// same edge order): edges, state count, exits (state, key).
struct KeyAutomaton {
    Buf<int32_t> src, byte, dst, exs, exk;
    int64_t count = 3;
};
// texts[j]: key j's JSON text and ": "; req[j] nonzero when key j is required. 0: built, 1: out
// of memory, 2: too many states.
int key_automaton(const std::vector<std::string_view>& texts, const char* req, KeyAutomaton& out);

}  // namespace trierouter
