// A toy vocabulary's token trie and a set compiled against it, for the tests of the compile and
// of serving.
#pragma once

#include <string>
#include <vector>

#include "compile.h"
#include "token_trie.h"

namespace toy {

// The trie of ``vocab`` (token id = index; empty tokens left out). Free with destroy_token_trie.
inline void build_trie(trierouter::TokenTrie& trie, const std::vector<std::string>& vocab) {
    trierouter::BigVec<trierouter::Ent> ents;
    for (size_t i = 0; i < vocab.size(); ++i)
        if (!vocab[i].empty())
            ents.push_back({{reinterpret_cast<const uint8_t*>(vocab[i].data()), static_cast<int64_t>(vocab[i].size())},
                            static_cast<int32_t>(i)});
    trierouter::build_token_trie(trie, ents, static_cast<int32_t>(vocab.size()));
}

// compile_set over ``values`` (no terminator, ends allowed with ``end_id``, full layout).
inline trierouter::CompileStatus compile(const std::vector<std::string>& values, const trierouter::TokenTrie& trie,
                                         int32_t end_id, long long threads, trierouter::CompileOutput& out) {
    trierouter::Buf<trierouter::Str> strs;
    trierouter::Buf<uint8_t> joined;
    if (!strs.resize(values.size())) return trierouter::CompileStatus::kNoMemory;
    for (size_t i = 0; i < values.size(); ++i)
        strs[i] = {reinterpret_cast<const uint8_t*>(values[i].data()), static_cast<int64_t>(values[i].size())};
    const std::vector<int32_t> eos{end_id};
    trierouter::CompileInput in{strs, joined, &trie, 0, eos, true, 0, threads, 1};
    trierouter::Lap lap;
    return trierouter::compile_set(in, out, lap);
}

}  // namespace toy
