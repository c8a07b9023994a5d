// Core's C++ object: the step arrays (steps.h) read through the arrays it was given, so that a
// memory-mapped file serves as well as a fresh compile.
#pragma once

#include <memory>

#include "bindings/common.h"
#include "steps.h"

#pragma GCC visibility push(hidden)

namespace trierouter {

// Core(..., compact=...): the walk's data (CompactWalk) and the arrays it reads.
struct Compact : CompactWalk {
    In1<uint64_t> bits_a;
    In1<int32_t> rank_a, first_a, lcp_a;
    In1<uint8_t> vb_a, tbuf_a, match_a;
    In1<int64_t> voff_a, toff_a;
    nb::object trie_obj;  // the TokenTrie ``tt`` reads
    Compact(const TokenTrie* t, nb::handle trie) : CompactWalk(t), trie_obj(nb::borrow(trie)) {}
};

struct CoreObj {
    In1<int32_t> row_ptr, tokens, far_pos, far_child, ends;
    In1<uint16_t> children;
    nb::object tokens_obj;        // the owner of mask views
    Serving s{};                  // the arrays, as a step reads them
    std::unique_ptr<Compact> cx;  // the compact layout (s.cx points to it); null: every row stored
    bool ready = false;           // __init__ succeeded
};

// The Core of ``self`` once initialised; RuntimeError otherwise (a Core made by ``Core.__new__``
// alone, or whose __init__ failed, has no arrays: every entry point refuses it).
inline CoreObj& core_of(nb::handle self) {
    CoreObj* c = built_or_null<CoreObj>(self);
    if (!c) throw std::runtime_error("Core is not initialised (made without a successful __init__)");
    return *c;
}

// The mask of state s as a new array (a read-only view of the stored row, or a walked row's copy);
// ValueError for a state out of range.
nb::object make_mask(const CoreObj& c, int64_t s);

}  // namespace trierouter

#pragma GCC visibility pop
