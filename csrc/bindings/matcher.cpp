// MatcherBase (Python type, subclassed by trierouter.router.matcher.Matcher): one request's state
// and history; native steps when given a Core, else it calls the Python ``advance`` it was given
// (the numpy reference path).
#include "bindings/core_object.h"
#include "bindings/fast_method.h"

namespace trierouter {

namespace {

struct MatcherObj {
    nb::object core_obj;            // the Core (None: Python steps)
    const CoreObj* core = nullptr;  // its C++ object
    nb::object advance, mask_fn;    // Python callables (used when core is null)
    int64_t state = 0, root = 0, end_state = 0, dead_state = 0, max_rollback = -1;
    int64_t ended_at = -1;  // the state an end id was accepted at (value() after termination)
    std::vector<int64_t> history;

    // _init_core(core_or_None, advance, mask, root, end, dead, max_rollback)
    void init_core(nb::handle core_h, nb::handle adv, nb::handle mask, int64_t r, int64_t end, int64_t dead,
                   int64_t maxr) {
        const CoreObj* c = nullptr;
        if (!core_h.is_none()) {
            if (!is_instance<CoreObj>(core_h)) throw nb::type_error("core must be a Core or None");
            c = &core_of(core_h);
        }
        core_obj = nb::borrow(core_h);
        core = c;
        advance = nb::borrow(adv);
        mask_fn = nb::borrow(mask);
        root = state = r;
        end_state = end;
        dead_state = dead;
        max_rollback = maxr;
        ended_at = -1;
        history.clear();
    }

    // the state after ``token`` from ``s`` (dead_state if refused; nothing follows end_state)
    int64_t next(int64_t s, int64_t token) const {
        if (s == end_state) return dead_state;
        if (core) return core_advance(&core->s, s, token);
        if (!advance.is_valid()) throw std::runtime_error("matcher not initialised");
        return nb::cast<Sat64>(advance(s, token));
    }

    void push(int64_t nxt) {
        if (nxt == end_state) ended_at = state;
        history.push_back(state);
        if (max_rollback >= 0 && static_cast<int64_t>(history.size()) > max_rollback) history.erase(history.begin());
        state = nxt;
    }

    bool accept_token(int64_t token) {
        const int64_t nxt = next(state, token);
        if (nxt == dead_state) return false;
        push(nxt);
        return true;
    }

    // all or nothing: walk first, change the state only if every token is accepted
    bool accept_tokens(nb::handle token_ids) {
        std::vector<int64_t> states;
        int64_t s = state;
        for (nb::handle t : token_ids) {
            s = next(s, nb::cast<Sat64>(t));
            if (s == dead_state) return false;
            states.push_back(s);
        }
        for (int64_t nxt : states) push(nxt);
        return true;
    }

    void rollback(int64_t k) {
        if (k < 0 || k > static_cast<int64_t>(history.size()))
            throw nb::value_error(("num_tokens=" + std::to_string(k) + ": can roll back 0.." +
                                   std::to_string(history.size()) + " tokens")
                                      .c_str());
        if (k) {
            state = history[history.size() - static_cast<size_t>(k)];
            history.resize(history.size() - static_cast<size_t>(k));
        }
    }

    void reset() {
        state = root;
        ended_at = -1;
        history.clear();
    }

    nb::object allowed_token_ids() const {
        if (core) return make_mask(*core, state);
        if (!mask_fn.is_valid()) throw std::runtime_error("matcher not initialised");
        return mask_fn(state);
    }
};

// The MatcherBase of ``self`` (the method descriptor checked its type); TypeError if its
// __init__ was not run (a subclass that does not call it).
MatcherObj& matcher_of(nb::handle self) {
    if (!nb::inst_ready(self))
        throw nb::type_error("MatcherBase.__init__ was not called (a subclass must call super().__init__())");
    return *nb::inst_ptr<MatcherObj>(self);
}

bool py_accept_token(nb::handle self, IntArg token) { return matcher_of(self).accept_token(token); }
void py_rollback(nb::handle self, IntArg num_tokens) { matcher_of(self).rollback(num_tokens); }
void py_reset(nb::handle self) { matcher_of(self).reset(); }
bool py_is_terminated(nb::handle self) {
    const MatcherObj& s = matcher_of(self);
    return s.state == s.end_state;
}
nb::object py_allowed_token_ids(nb::handle self) { return matcher_of(self).allowed_token_ids(); }

}  // namespace

void bind_matcher(nb::module_& m) {
    auto cls = nb::class_<MatcherObj>(m, "MatcherBase", "Per-request state and history over a set (native or Python steps).");
    cls.def(nb::init<>())
        .def("_init_core", &MatcherObj::init_core, "core"_a.none(), "advance"_a.none(), "mask"_a.none(), "root"_a,
             "end"_a, "dead"_a, "max_rollback"_a)
        .def("accept_tokens", &MatcherObj::accept_tokens, "token_ids"_a,
             "Accept all of token_ids, or none: False (state unchanged) if one is refused.")
        .def_prop_rw(
            "state", [](const MatcherObj& s) { return s.state; }, [](MatcherObj& s, Sat64 v) { s.state = v; },
            "The current state (a node id of the set).")
        .def_prop_ro(
            "num_accepted", [](const MatcherObj& s) { return s.history.size(); },
            "Tokens accepted and not rolled back (bounded by max_rollback_tokens).")
        .def_prop_ro(
            "_ended_at", [](const MatcherObj& s) { return s.ended_at; },
            "The state an end id was accepted at (-1: none).");
    // per step: CPython method descriptors (fast_method.h)
    fast_method<&py_accept_token>(cls, "accept_token", {{"token_id"}},
                                  "Advance by one token; False (state unchanged) if the token is not allowed, or the "
                                  "matcher is already terminated.");
    fast_method<&py_rollback>(cls, "rollback", {{"num_tokens"}}, "Undo the last num_tokens accepted tokens.");
    fast_method<&py_reset>(cls, "reset", {}, "Back to the root, history cleared.");
    fast_method<&py_is_terminated>(cls, "is_terminated", {}, "An end id has been accepted.");
    fast_method<&py_allowed_token_ids>(cls, "allowed_token_ids", {},
                                       "Sorted ids allowed next (end ids included where a value is complete).");
}

}  // namespace trierouter
