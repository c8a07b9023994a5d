// TokenTrie: build, size, shape (see token_trie.h).
#include "token_trie.h"

#include "compile.h"
#include "support/threads.h"

namespace trierouter {

void destroy_token_trie(TokenTrie& t) {
    delete t.child_ptr;
    delete t.child_node;
    delete t.child_label;
    delete t.tok_ptr;
    delete t.tok_ids;
    delete t.fail;
    delete t.dict;
    delete t.depth;
    delete t.d1row;
    delete t.goto1;
    delete t.info;
    delete t.outs;
    delete t.shape;
    t = TokenTrie{};
}

size_t token_trie_nbytes(const TokenTrie& t) {
    return 4 * (t.child_ptr->size() + t.child_node->size() + t.tok_ptr->size() +
                    t.tok_ids->size() + t.fail->size() + t.dict->size() +
                    t.depth->size() + t.d1row->size() + t.goto1->size()) +
               sizeof(StateInfo) * t.info->size() + sizeof(Out) * t.outs->size() +
               t.child_label->size();
}

void build_token_trie(TokenTrie& t, BigVec<Ent>& ents, int32_t n_ids) {
    Lap lap;
    t.n_ids = n_ids;
    // the token bytes in sorted order, read by the trie build below (two buffers where the sort
    // ran in two threads)
    Buf<uint8_t> relocated, relocated2;
    relocated.huge_min = relocated2.huge_min = BIG_VEC_MIN;  // the sort's buffers too
    sort_values_split(ents.data(), ents.size(), &relocated, &relocated2,
                      available_cpus() > 1 && ents.size() >= 2 * SPLIT_MIN);
    lap.mark("sort");
    // preorder trie: path[d] = node at depth d on the previous string's path
    size_t total_bytes = 0;
    for (const Ent& e : ents) total_bytes += static_cast<size_t>(e.s.n);
    BigVec<int32_t> parent, end_node(ents.size());
    std::vector<int32_t> path{0};
    BigVec<uint8_t> byte;
    auto* depth = new BigVec<int32_t>;
    parent.reserve(total_bytes + 1);
    byte.reserve(total_bytes + 1);
    depth->reserve(total_bytes + 1);
    parent.push_back(-1);
    byte.push_back(0);
    depth->push_back(0);
    Str prev{nullptr, 0};
    for (size_t i = 0; i < ents.size(); ++i) {
        const Str& s = ents[i].s;
        const int64_t l = common_prefix(prev, s);
        path.resize(static_cast<size_t>(l) + 1);
        for (int64_t d = l; d < s.n; ++d) {
            int32_t id = static_cast<int32_t>(parent.size());
            parent.push_back(path[static_cast<size_t>(d)]);
            byte.push_back(s.p[d]);
            depth->push_back(static_cast<int32_t>(d + 1));
            path.push_back(id);
        }
        end_node[i] = path[static_cast<size_t>(s.n)];
        prev = s;
    }
    const int32_t nn = static_cast<int32_t>(parent.size());
    const size_t un = static_cast<size_t>(nn);
    t.n_nodes = nn;
    auto* cptr = new BigVec<int32_t>(un + 1, 0);
    auto* cnode = new BigVec<int32_t>(un - 1);
    auto* clab = new BigVec<uint8_t>(un - 1);
    for (size_t v = 1; v < un; ++v) (*cptr)[static_cast<size_t>(parent[v]) + 1]++;
    for (size_t v = 0; v < un; ++v) (*cptr)[v + 1] += (*cptr)[v];
    {
        BigVec<int32_t> fill(cptr->begin(), cptr->end() - 1);
        for (size_t v = 1; v < un; ++v) {  // preorder: children in byte order
            int32_t at = fill[static_cast<size_t>(parent[v])]++;
            (*cnode)[static_cast<size_t>(at)] = static_cast<int32_t>(v);
            (*clab)[static_cast<size_t>(at)] = byte[v];
        }
    }
    auto* tptr = new BigVec<int32_t>(un + 1, 0);
    auto* tids = new BigVec<int32_t>(ents.size());
    for (size_t i = 0; i < ents.size(); ++i) (*tptr)[static_cast<size_t>(end_node[i]) + 1]++;
    for (size_t v = 0; v < un; ++v) (*tptr)[v + 1] += (*tptr)[v];
    {
        BigVec<int32_t> fill(tptr->begin(), tptr->end() - 1);
        for (size_t i = 0; i < ents.size(); ++i)
            (*tids)[static_cast<size_t>(fill[static_cast<size_t>(end_node[i])]++)] = ents[i].id;
    }
    for (int k = 0; k < 256; ++k) {
        t.root_child[k] = -1;
        t.single[k] = 0;
    }
    for (int32_t i = (*cptr)[0]; i < (*cptr)[1]; ++i) {
        int32_t v = (*cnode)[static_cast<size_t>(i)];
        t.root_child[(*clab)[static_cast<size_t>(i)]] = v;
        if ((*tptr)[static_cast<size_t>(v) + 1] > (*tptr)[static_cast<size_t>(v)])
            t.single[(*clab)[static_cast<size_t>(i)]] = 1;
    }
    lap.mark("trie");
    // Aho-Corasick links, computed over a breadth-first numbering of the states (depth, then
    // preorder): the children of a state are then consecutive numbers, so a state is its first
    // child's number, its label and its link (9 bytes, 3 MB at 333K states) and the shallow
    // states that most links lead to sit together. Mapped back to preorder ids at the end.
    BigVec<int32_t> order(un), bfs_of(un);
    int32_t maxd = 0;
    for (size_t v = 0; v < un; ++v) maxd = std::max(maxd, (*depth)[v]);
    {
        std::vector<int32_t> cnt(static_cast<size_t>(maxd) + 2, 0);
        for (size_t v = 0; v < un; ++v) cnt[static_cast<size_t>((*depth)[v]) + 1]++;
        for (size_t d = 0; d + 1 < cnt.size(); ++d) cnt[d + 1] += cnt[d];
        for (size_t v = 0; v < un; ++v) {
            const int32_t x = cnt[static_cast<size_t>((*depth)[v])]++;
            order[static_cast<size_t>(x)] = static_cast<int32_t>(v);
            bfs_of[v] = x;
        }
    }
    const int32_t n1 = (*cptr)[1] - (*cptr)[0];  // depth-1 states: breadth-first ids 1..n1
    BigVec<int32_t> bclo(un + 1), bfail(un, 0), bdict(un, -1), bntok(un);
    BigVec<uint8_t> bbyte(un);
    {
        int32_t at = 1;
        for (size_t x = 0; x < un; ++x) {
            const size_t v = static_cast<size_t>(order[x]);
            bclo[x] = at;
            at += (*cptr)[v + 1] - (*cptr)[v];
            bbyte[x] = byte[v];
            bntok[x] = (*tptr)[v + 1] - (*tptr)[v];
        }
        bclo[un] = at;
    }
    std::vector<int32_t> bgoto1(static_cast<size_t>(n1 + 1) * 256, 0);
    for (int32_t y = bclo[0]; y < bclo[1]; ++y) bgoto1[bbyte[static_cast<size_t>(y)]] = y;
    auto bchild = [&](int32_t u, uint8_t b) -> int32_t {
        const int32_t lo = bclo[static_cast<size_t>(u)], len = bclo[static_cast<size_t>(u) + 1] - lo;
        const uint8_t* l = bbyte.data() + lo;
        if (len <= 16) {
            for (int32_t i = 0; i < len; ++i)
                if (l[i] == b) return lo + i;
            return -1;
        }
        const void* f = std::memchr(l, b, static_cast<size_t>(len));
        return f ? lo + static_cast<int32_t>(static_cast<const uint8_t*>(f) - l) : -1;
    };
    for (int32_t u = 0; u < static_cast<int32_t>(un); ++u) {
        const int32_t lo = bclo[static_cast<size_t>(u)], hi = bclo[static_cast<size_t>(u) + 1];
        if (lo == hi) continue;
        const uint8_t* l = bbyte.data() + lo;
        for (int32_t y = lo; y < hi; ++y) {
            const size_t uy = static_cast<size_t>(y);
            int32_t f = 0;
            if (u != 0) {  // fail(y) = go(fail(u), byte(y)); depth-1 states fail to the root
                int32_t st = bfail[static_cast<size_t>(u)];
                const uint8_t b = l[y - lo];
                for (;;) {
                    if (st <= n1) {
                        f = bgoto1[(static_cast<size_t>(st) << 8) | b];
                        break;
                    }
                    const int32_t c = bchild(st, b);
                    if (c >= 0) {
                        f = c;
                        break;
                    }
                    st = bfail[static_cast<size_t>(st)];
                }
            }
            bfail[uy] = f;
            bdict[uy] = f != 0 && bntok[static_cast<size_t>(f)] > 0 ? f : bdict[static_cast<size_t>(f)];
            if (y <= n1) {  // a depth-1 state: its full transition row (its failure is the root)
                int32_t* row = bgoto1.data() + (static_cast<size_t>(y) << 8);
                std::memcpy(row, bgoto1.data(), 256 * sizeof(int32_t));
                for (int32_t c = bclo[uy]; c < bclo[uy + 1]; ++c) row[bbyte[static_cast<size_t>(c)]] = c;
            }
        }
    }
    lap.mark("links");
    // back to preorder ids
    auto* fail = new BigVec<int32_t>(un);
    auto* dict = new BigVec<int32_t>(un);
    auto* d1row = new BigVec<int32_t>(un, -1);
    auto* goto1 = new BigVec<int32_t>(bgoto1.size());
    for (size_t x = 0; x < un; ++x) {
        const size_t v = static_cast<size_t>(order[x]);
        (*fail)[v] = order[static_cast<size_t>(bfail[x])];
        (*dict)[v] = bdict[x] >= 0 ? order[static_cast<size_t>(bdict[x])] : -1;
    }
    for (size_t i = 0; i < bgoto1.size(); ++i) (*goto1)[i] = order[static_cast<size_t>(bgoto1[i])];
    for (int32_t x = 0; x <= n1; ++x) (*d1row)[static_cast<size_t>(order[static_cast<size_t>(x)])] = x;
    t.child_ptr = cptr;
    t.child_node = cnode;
    t.child_label = clab;
    t.tok_ptr = tptr;
    t.tok_ids = tids;
    t.fail = fail;
    t.dict = dict;
    t.depth = depth;
    t.d1row = d1row;
    t.goto1 = goto1;
    // flattened outputs per state: the tokens of the state, then of its dictionary chain. The
    // tokens of each state as (length, id) in breadth-first order first: the chains lead to
    // shallow states, whose entries then sit together at the front; the outputs are written in
    // preorder, in one sequential pass.
    BigVec<int32_t> bown_ptr(un + 1);
    BigVec<Out> bown(ents.size());
    {
        size_t at = 0;
        for (size_t x = 0; x < un; ++x) {
            bown_ptr[x] = static_cast<int32_t>(at);
            const size_t v = static_cast<size_t>(order[x]);
            const int32_t dv = (*depth)[v];
            for (int32_t j = (*tptr)[v]; j < (*tptr)[v + 1]; ++j) bown[at++] = {dv, (*tids)[static_cast<size_t>(j)]};
        }
        bown_ptr[un] = static_cast<int32_t>(at);
    }
    BigVec<int32_t> bolen(un, 0);  // outputs per state: own tokens + those of its dict state
    size_t total = 0;
    for (size_t x = 0; x < un; ++x) {
        bolen[x] = bntok[x] + (bdict[x] >= 0 ? bolen[static_cast<size_t>(bdict[x])] : 0);
        total += static_cast<size_t>(bolen[x]);
    }
    lap.mark("spans");
    auto* info = new BigVec<StateInfo>(un);
    auto* outs = new BigVec<Out>(total);
    t.info = info;
    t.outs = outs;
    {
        Out* o = outs->data();
        const Out* own = bown.data();
        for (size_t v = 0; v < un; ++v) {
            const int32_t olo = static_cast<int32_t>(o - outs->data());
            const size_t x = static_cast<size_t>(bfs_of[v]);
            for (int32_t c = bntok[x] > 0 ? static_cast<int32_t>(x) : bdict[x]; c >= 0; c = bdict[static_cast<size_t>(c)]) {
                const size_t uc = static_cast<size_t>(c);
                for (int32_t j = bown_ptr[uc]; j < bown_ptr[uc + 1]; ++j) *o++ = own[j];
            }
            (*info)[v] = {(*cptr)[v], (*cptr)[v + 1], (*fail)[v], (*d1row)[v], olo, static_cast<int32_t>(o - outs->data()), (*dict)[v], 0};
            t.max_span = std::max(t.max_span, (*info)[v].ohi - olo);
        }
    }
    lap.mark("outputs");
}

// The shape of a trie for dfa_masks' row sharing (built once per trie, under the GIL).
const TrieShape* trie_shape(TokenTrie* t) {
    if (t->shape) return t->shape;
    auto* sh = new TrieShape;
    const TT tt(t);
    const size_t n = static_cast<size_t>(t->n_nodes);
    sh->depth.assign(n, 0);
    sh->height.assign(n, 0);
    bool ok = n > 0;
    int32_t top = -1;
    for (size_t u = 0; u < n && ok; ++u) {
        for (int32_t j = tt.si[u].clo; j < tt.si[u].chi; ++j) {
            const int32_t c = tt.cnode[j];
            if (c <= static_cast<int32_t>(u) || static_cast<size_t>(c) >= n) {
                ok = false;  // not preorder: no sharing
                break;
            }
            if (sh->depth[u] >= 65534) {
                ok = false;  // a token too long for the shape
                break;
            }
            sh->depth[static_cast<size_t>(c)] = static_cast<uint16_t>(sh->depth[u] + 1);
        }
        for (int32_t k = tt.tptr[u]; k < tt.tptr[u + 1]; ++k) top = std::max(top, tt.tids[k]);
    }
    for (int b = 0; b < 256 && ok; ++b)
        if (t->root_child[b] >= 0 && sh->depth[static_cast<size_t>(t->root_child[b])] != 1) ok = false;
    if (ok) {
        for (size_t u = n; u-- > 0;) {
            uint16_t h = tt.tptr[u + 1] > tt.tptr[u] ? sh->depth[u] : 0;
            for (int32_t j = tt.si[u].clo; j < tt.si[u].chi; ++j)
                h = std::max(h, sh->height[static_cast<size_t>(tt.cnode[j])]);
            sh->height[u] = h;
        }
        sh->max_len = sh->height[0];
        ok = sh->max_len < 65535;
    }
    if (ok) {
        sh->tok_len.assign(static_cast<size_t>(top + 1), 0);
        for (size_t u = 0; u < n; ++u)
            for (int32_t k = tt.tptr[u]; k < tt.tptr[u + 1]; ++k)
                sh->tok_len[static_cast<size_t>(tt.tids[k])] = static_cast<uint16_t>(sh->depth[u]);
    }
    sh->ok = ok;
    t->shape = sh;
    return sh;
}

}  // namespace trierouter
