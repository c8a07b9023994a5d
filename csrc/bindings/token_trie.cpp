// TokenTrie (Python type): construction from a sequence of bytes, sizes, tables; the vocabulary's
// packing helpers (pack_tokens, join_tokens).
#include "bindings/common.h"
#include "support/sort.h"
#include "support/threads.h"
#include "token_trie.h"

namespace trierouter {

namespace {

// The bytes of a tuple's items, TypeError naming the first one that is not bytes.
std::vector<nb::bytes> all_bytes(const nb::tuple& tokens) {
    std::vector<nb::bytes> out;
    out.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        nb::handle o = tokens[i];
        if (!nb::isinstance<nb::bytes>(o)) throw nb::type_error(("tokens[" + std::to_string(i) + "] is not bytes").c_str());
        out.push_back(nb::borrow<nb::bytes>(o));
    }
    return out;
}

// TokenTrie(tokens: sequence of bytes, matchable: one byte per token). Builds once: a Core or a
// compile may read the arrays with the GIL released.
void token_trie_init(nb::handle self, nb::handle tokens, const Bytes& matchable) {
    TokenTrieObj& t = constructed<TokenTrieObj>(self);
    if (t.ready) throw std::runtime_error("TokenTrie is already built: make a new one");
    destroy_token_trie(t.trie);  // what a failed __init__ left
    t.trie = TokenTrie{};
    const double t0 = now_seconds();
    Lap lap;
    nb::tuple seq = nb::tuple(nb::borrow(tokens));  // held: the token bytes stay alive
    const size_t n = seq.size();
    if (matchable.nbytes() != n)
        throw nb::value_error(("matchable has " + std::to_string(matchable.nbytes()) + " entries for " +
                               std::to_string(n) + " tokens")
                                  .c_str());
    t.trie.n_ids = static_cast<int32_t>(std::min<size_t>(n, INT32_MAX));
    const uint8_t* match = static_cast<const uint8_t*>(matchable.data());
    BigVec<Ent> ents;
    ents.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (!match[i]) continue;
        nb::handle o = seq[i];
        if (!nb::isinstance<nb::bytes>(o)) throw nb::type_error(("tokens[" + std::to_string(i) + "] is not bytes").c_str());
        nb::bytes b = nb::borrow<nb::bytes>(o);
        if (b.size() == 0) continue;
        ents.push_back({{reinterpret_cast<const uint8_t*>(b.c_str()), static_cast<int64_t>(b.size())}, static_cast<int32_t>(i)});
    }
    lap.mark("collect");
    try {
        build_token_trie(t.trie, ents, t.trie.n_ids);
    } catch (...) {
        destroy_token_trie(t.trie);
        t.trie = TokenTrie{};
        throw;
    }
    t.trie.build_seconds = now_seconds() - t0;
    t.ready = true;
}

template <class V>
nb::bytes vec_bytes(const V* v) {
    if (!v) return nb::bytes("", 0);
    return nb::bytes(reinterpret_cast<const char*>(v->data()), v->size() * sizeof((*v)[0]));
}

// tables() -> dict[str, bytes]: every array of the trie (native byte order), for tests that
// check the structure against an independent construction
// The trie of ``self``, or an empty one before a successful __init__ (its sizes read as zero).
const TokenTrie& trie_or_empty(nb::handle self) {
    static const TokenTrie empty{};
    const TokenTrieObj* t = built_or_null<TokenTrieObj>(self);
    return t ? t->trie : empty;
}

nb::dict token_trie_tables(nb::handle self) {
    const TokenTrie& r = trie_or_empty(self);
    nb::dict d;
    d["child_ptr"] = vec_bytes(r.child_ptr);
    d["child_node"] = vec_bytes(r.child_node);
    d["child_label"] = vec_bytes(r.child_label);
    d["tok_ptr"] = vec_bytes(r.tok_ptr);
    d["tok_ids"] = vec_bytes(r.tok_ids);
    d["fail"] = vec_bytes(r.fail);
    d["dict"] = vec_bytes(r.dict);
    d["depth"] = vec_bytes(r.depth);
    d["d1row"] = vec_bytes(r.d1row);
    d["goto1"] = vec_bytes(r.goto1);
    d["info"] = vec_bytes(r.info);
    d["outs"] = vec_bytes(r.outs);
    d["root_child"] = nb::bytes(reinterpret_cast<const char*>(r.root_child), sizeof(r.root_child));
    d["single"] = nb::bytes(reinterpret_cast<const char*>(r.single), 256);
    return d;
}

// pack_tokens(tokens) -> (buffer: uint8 array, offsets: int64 array): every token's bytes
// concatenated and where each starts (Vocabulary.buffer / offsets)
nb::tuple pack_tokens(const nb::tuple& tokens) {
    const std::vector<nb::bytes> items = all_bytes(tokens);
    const size_t n = items.size();
    Buf<int64_t> off;
    if (!off.resize(n + 1)) throw std::bad_alloc();
    off[0] = 0;
    for (size_t i = 0; i < n; ++i) off[i + 1] = off[i] + static_cast<int64_t>(items[i].size());
    Buf<uint8_t> buf;
    if (!buf.resize(static_cast<size_t>(off[n]))) throw std::bad_alloc();
    for (size_t i = 0; i < n; ++i)
        if (items[i].size()) std::memcpy(buf.p + off[i], items[i].c_str(), items[i].size());
    nb::object b = to_numpy(buf);
    return nb::make_tuple(b, to_numpy(off));
}

// join_tokens(tokens, selected: one byte per token) -> bytes: the selected tokens' bytes joined
// by b"\0" (Vocabulary.content_hash)
nb::bytes join_tokens(const nb::tuple& tokens, const Bytes& selected) {
    const size_t n = tokens.size();
    if (selected.nbytes() != n)
        throw nb::value_error(("selected has " + std::to_string(selected.nbytes()) + " entries for " +
                               std::to_string(n) + " tokens")
                                  .c_str());
    const std::vector<nb::bytes> items = all_bytes(tokens);
    const uint8_t* m = static_cast<const uint8_t*>(selected.data());
    std::string out;
    bool first = true;
    for (size_t i = 0; i < n; ++i) {
        if (!m[i]) continue;
        if (!first) out.push_back('\0');
        first = false;
        out.append(items[i].c_str(), items[i].size());
    }
    return nb::bytes(out.data(), out.size());
}

}  // namespace

void bind_token_trie(nb::module_& m) {
    nb::class_<TokenTrieObj>(m, "TokenTrie", "Forward trie of a vocabulary's matchable token bytes.")
        .def("__init__", &token_trie_init, "tokens"_a, "matchable"_a.noconvert())
        .def_prop_ro(
            "nbytes",
            [](nb::handle self) {
                const TokenTrieObj* t = built_or_null<TokenTrieObj>(self);
                return (t ? token_trie_nbytes(t->trie) : 0) + sizeof(TokenTrieObj);
            },
            "bytes held")
        .def_prop_ro(
            "n_nodes", [](nb::handle self) { return trie_or_empty(self).n_nodes; }, "trie nodes")
        .def_prop_ro(
            "build_seconds", [](nb::handle self) { return trie_or_empty(self).build_seconds; },
            "build time")
        .def_prop_ro(
            "single_byte",
            [](nb::handle self) {
                return nb::bytes(reinterpret_cast<const char*>(trie_or_empty(self).single), 256);
            },
            "256 bytes: 1 where a matchable token is exactly that byte")
        .def("tables", &token_trie_tables, "every array of the trie as bytes (native byte order), by name");
    m.def("pack_tokens", &pack_tokens, "tokens"_a,
          "pack_tokens(tokens) -> (buffer, offsets): the tokens' bytes concatenated, and where each starts");
    m.def("join_tokens", &join_tokens, "tokens"_a, "selected"_a.noconvert(),
          "join_tokens(tokens, selected) -> bytes: the selected tokens joined by NUL bytes");
}

}  // namespace trierouter
