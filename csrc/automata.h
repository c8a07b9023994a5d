// Tool automata: class tries, wiring fragments, byte-class compression, per-state token masks.
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
#include "support/buffers.h"
#include "token_trie.h"

namespace trierouter {

// The token trie seen through one table's byte classes: tokens whose bytes have
// the same classes, position by position, end at one node (their rows are alike at every state
// of that table). Over few classes it is far smaller than the token trie: [a-z0-9-]{1,64} has
// 3 classes, its live bytes reach ~21,000 trie nodes and 112 class nodes, so each of its 66
// rows walks the class nodes instead of up to 21,000 trie nodes. Only bytes of a class with an
// edge somewhere in the table are followed (the others are in no row).
struct ClassTrie {
    std::vector<int32_t> child;     // (node, class) -> node, -1: none
    std::vector<uint16_t> depth;    // the bytes to the node (= the length of its tokens)
    std::vector<uint16_t> height;   // the longest token in the subtree (0: none)
    std::vector<int32_t> tptr, tids;  // the tokens ending at each node (CSR)
};

// Builds the class trie of ``tt`` (root children ``root_child``) over classes ``cls`` (table
// ``tab``: ns rows of nc), for walks from the automaton states ``from`` (n_from of them): a
// class string no state of ``from`` can walk gets no node (tokens spelling it are in no row
// of theirs: [A-Z]{3}-[0-9]{2,4} keeps the tokens of at most 3 capitals, not every capitals
// token of the vocabulary). The states each class node is reached in are tracked as a bitset
// when ns <= kPruneMaxStates (else every class string over live classes gets its node). False
// (nothing usable) when it would merge too little to pay: past ``max_cells`` (node, class)
// cells, or at fewer than 4 trie nodes per class node once 65,536 trie nodes are in.
constexpr int64_t kPruneMaxStates = 1024;
bool build_class_trie(ClassTrie& ct, const TT& tt, const int32_t* root_child, const int32_t* tab,
                      int64_t ns, int64_t nc, const int32_t* cls, int64_t max_cells,
                      const int64_t* from, int64_t n_from);

// is held again.
struct RunError {
    enum Kind { kNone, kNoMemory, kRange, kAmbiguous } kind = kNone;
    const char* what = "";
    int64_t src = 0, byte = 0;
    bool range(const char* w) {
        kind = kRange;
        what = w;
        return false;
    }
    bool no_memory() {
        kind = kNoMemory;
        return false;
    }
};

// The arguments of one dfa_wire call (below), as spans (the binding's wire_open opens them); the
// wiring (wire_run) makes no Python call, so it can run with the GIL released (dfa_masks with
// a wire: the masks' worker thread wires an eager registry's automata).
struct Wire {
    std::vector<Span<int32_t>> fs, fb, fd;
    Span<int64_t> offs, lstate, lfrom, extra;
    int64_t n = 0;
    RunError err;
};

// The wiring of an opened call into (os, ob, od) (no Python call). False with w.err set.
bool wire_run(Wire& w, Buf<int32_t>& os, Buf<int32_t>& ob, Buf<int32_t>& od);

// The byte classes of an automaton given as m edges (src --byte--> dst, in range, at most one
// per (src, byte); a repeated edge must be identical) and its dense table over them (n rows of
// nk columns, -1: no edge) into ``table``: bytes whose edges are the same at every state share
// a class, numbered in order of their smallest byte. No Python call; throws std::bad_alloc.
bool compress_run(const int32_t* src, const int32_t* byte, const int32_t* dst, int64_t m, int64_t n,
                  Buf<int32_t>& table, int32_t* cls, int64_t& nk);

// One dfa_masks call: its arguments opened and checked by the binding (as spans of buffers it
// holds), its walks run here with no Python call (masks_run: the binding releases the GIL),
// its result handed to Python by the binding. ``rows``: the packed rows (words > 0), memory
// the binding owns.
// Given a wire (dfa_wire's arguments) instead of a table and byte classes, the run first wires
// the automaton and compresses its bytes to classes (dfa_wire, then dfa_compress), and the
// result holds its table (in the narrowest signed type its states fit) and byte classes too.
struct MasksJob {
    Span<int32_t> tab;  // the table (ns x nc), read as int32
    int64_t ns = 0, nc = 0;  // the table's states and classes
    std::unique_ptr<Wire> wire;
    Buf<int32_t> wide;     // a wired automaton's table, walked
    Buf<int8_t> tab8;      // ... as the result holds it (int8, int16 or int32: ``wide``)
    Buf<int16_t> tab16;
    Buf<int32_t> own_cls;  // its byte classes
    RunError err;
    Span<int32_t> cls;
    Span<int64_t> st;
    const uint8_t* alt = nullptr;
    TokenTrie* tri = nullptr;
    TokenTrie* alt_tri = nullptr;
    int64_t words = 0;
    int share_rows = 1;
    uint32_t* rows = nullptr;
    const TrieShape* shape = nullptr;
    Buf<int64_t> ptr;
    Buf<int32_t> ids;
    Buf<int32_t> out;  // the rows in states' order, when they were computed in another order
    bool reordered = false;
    MasksJob() = default;
    MasksJob(const MasksJob&) = delete;
    MasksJob& operator=(const MasksJob&) = delete;
};

// Per state of ``states`` (n), the ids of ``cands`` (m) whose bytes buf[off[t]:off[t + 1]] all
// have edges from it in ``tab`` (n_classes columns, bytes mapped by ``cls``; -1: no edge), sorted:
// state i's ids are ids[ptr[i]:ptr[i + 1]] (ptr has n + 1 entries). Every state, class and span
// checked by the caller. False: no memory.
bool list_masks(const int32_t* tab, int64_t n_classes, const int32_t* cls, const int64_t* states,
                int64_t n, const int32_t* cands, int64_t m, const uint8_t* buf, const int64_t* off,
                Buf<int64_t>& ptr, Buf<int32_t>& ids);

// The walks of an opened job (no Python call: run with the GIL released). False: no memory.
bool masks_walk(MasksJob& j);


// A job's run (no Python call: run with the GIL released): with a wire, the automaton wired
// and compressed first; then the walks. False with j.err set.
bool masks_run(MasksJob& j);

}  // namespace trierouter
