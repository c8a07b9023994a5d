// Regex subset of JSON Schema pattern: parser, Thompson NFA, subset construction.
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

namespace trierouter {

// A DFA: its edges by state, then byte, and per state whether it accepts.
struct Dfa {
    std::vector<int32_t> src, byte, dst;
    std::vector<uint8_t> accept;
};
// -- subset construction, and the regex subset of ``pattern`` compiled to it --------------------

// An NFA with byte-set edges (bit b of bits[32 * e + b / 8] = byte b) and epsilon edges.
struct NfaEdges {
    int64_t n = 0;
    const int32_t *es = nullptr, *ed = nullptr, *xs = nullptr, *xd = nullptr;
    const uint8_t* bits = nullptr;
    int64_t ne = 0, nx = 0;
};

// Subset construction: DFA states numbered in discovery order (breadth first, bytes ascending),
// state 0 the closure of ``start``; a DFA state accepts when its set holds ``final``. False once
// more than ``max_states`` (> 0) states are found. Throws std::bad_alloc.
bool determinize(const NfaEdges& g, int64_t start, int64_t final, long long max_states, Dfa& out);
// The DFA of ``pattern``'s full matches (s[0 .. n), ASCII; between two '"' bytes with ``quoted``),
// as the Python reference (slots/regex.py's parser, nfa.py's Thompson construction) builds it:
// the same states, numbered alike. -1: built into ``dfa``; 0 outside the supported subset (or
// groups nested past ``max_depth``), 1 past ``max_states`` (> 0) DFA states, 2 past
// ``max_nfa`` NFA states. Throws std::bad_alloc.
int regex_dfa(const char* s, int64_t n, bool quoted, long long max_states, long long max_nfa, long long max_depth, Dfa& dfa);

}  // namespace trierouter
