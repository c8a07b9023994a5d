// MatcherBase (Python type): one request's state and history over a Core (or a Python advance).
#include "bindings/common.h"
#include "bindings/core_object.h"

namespace trierouter {

// ------------------------------------------------------------------------------------------------
// MatcherBase: one request's state and history; native steps when given a Core, else it calls
// the Python ``advance`` it was given (the numpy reference path).

struct MatcherObject {
    PyObject_HEAD
    CoreObject* core;     // may be null
    PyObject* advance;    // Python callable (used when core is null)
    PyObject* mask_fn;    // Python callable (used when core is null)
    int64_t state, root, end_state, dead_state, max_rollback;
    int64_t ended_at;  // the state an end id was accepted at (value() after termination)
    std::vector<int64_t>* history;
};

PyTypeObject MatcherType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void Matcher_dealloc(MatcherObject* self) {
    Py_XDECREF(self->core);
    Py_XDECREF(self->advance);
    Py_XDECREF(self->mask_fn);
    delete self->history;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

PyObject* Matcher_new(PyTypeObject* type, PyObject*, PyObject*) {
    auto* self = reinterpret_cast<MatcherObject*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    self->history = new std::vector<int64_t>();
    self->max_rollback = -1;
    self->ended_at = -1;
    return reinterpret_cast<PyObject*>(self);
}

// _init_core(core_or_None, advance, mask, root, end, dead, max_rollback)
PyObject* Matcher_init_core(MatcherObject* self, PyObject* args) {
    PyObject *core, *adv, *mask;
    long long root, end, dead, maxr;
    if (!PyArg_ParseTuple(args, "OOOLLLL", &core, &adv, &mask, &root, &end, &dead, &maxr))
        return nullptr;
    if (core != Py_None && !PyObject_TypeCheck(core, &CoreType)) {
        PyErr_SetString(PyExc_TypeError, "core must be a Core or None");
        return nullptr;
    }
    if (core != Py_None && !core_ready(reinterpret_cast<CoreObject*>(core))) return nullptr;
    Py_XSETREF(self->core, core == Py_None ? nullptr : reinterpret_cast<CoreObject*>(Py_NewRef(core)));
    Py_XSETREF(self->advance, Py_NewRef(adv));
    Py_XSETREF(self->mask_fn, Py_NewRef(mask));
    self->root = root;
    self->state = root;
    self->end_state = end;
    self->dead_state = dead;
    self->max_rollback = maxr;
    self->ended_at = -1;
    self->history->clear();
    Py_RETURN_NONE;
}

// the state after ``token`` from ``state`` (dead_state if refused; nothing follows end_state)
inline bool matcher_next(MatcherObject* self, int64_t state, int64_t token, int64_t* nxt) {
    if (state == self->end_state) {
        *nxt = self->dead_state;
        return true;
    }
    if (self->core) {
        *nxt = core_advance(&self->core->s, state, token);
        return true;
    }
    if (!self->advance) {
        PyErr_SetString(PyExc_RuntimeError, "matcher not initialised");
        return false;
    }
    PyObject* r = PyObject_CallFunction(self->advance, "LL", static_cast<long long>(state),
                                        static_cast<long long>(token));
    if (!r) return false;
    bool okv = as_i64(r, nxt);
    Py_DECREF(r);
    return okv;
}

inline void matcher_push(MatcherObject* self, int64_t nxt) {
    if (nxt == self->end_state) self->ended_at = self->state;
    auto& h = *self->history;
    h.push_back(self->state);
    if (self->max_rollback >= 0 && static_cast<int64_t>(h.size()) > self->max_rollback)
        h.erase(h.begin());
    self->state = nxt;
}

inline bool matcher_step(MatcherObject* self, int64_t token, bool* accepted) {
    int64_t nxt;
    if (!matcher_next(self, self->state, token, &nxt)) return false;
    if (nxt == self->dead_state) {
        *accepted = false;
        return true;
    }
    matcher_push(self, nxt);
    *accepted = true;
    return true;
}

PyObject* Matcher_accept_token(MatcherObject* self, PyObject* arg) {
    int64_t t;
    if (!as_i64(arg, &t)) return nullptr;
    bool acc;
    if (!matcher_step(self, t, &acc)) return nullptr;
    if (acc) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

PyObject* Matcher_rollback(MatcherObject* self, PyObject* arg) {
    int64_t k;
    if (!as_i64(arg, &k)) return nullptr;
    auto& h = *self->history;
    if (k < 0 || k > static_cast<int64_t>(h.size())) {
        PyErr_Format(PyExc_ValueError, "num_tokens=%lld: can roll back 0..%zd tokens",
                     static_cast<long long>(k), h.size());
        return nullptr;
    }
    if (k) {
        self->state = h[h.size() - static_cast<size_t>(k)];
        h.resize(h.size() - static_cast<size_t>(k));
    }
    Py_RETURN_NONE;
}

PyObject* Matcher_accept_tokens(MatcherObject* self, PyObject* arg) {
    PyObject* seq = PySequence_Fast(arg, "token_ids must be a sequence of ints");
    if (!seq) return nullptr;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    // all or nothing: walk first, change the state only if every token is accepted
    std::vector<int64_t> states;
    states.reserve(static_cast<size_t>(n));
    int64_t s = self->state;
    for (Py_ssize_t i = 0; i < n; ++i) {
        int64_t t;
        if (!as_i64(PySequence_Fast_GET_ITEM(seq, i), &t) || !matcher_next(self, s, t, &s)) {
            Py_DECREF(seq);
            return nullptr;
        }
        if (s == self->dead_state) {
            Py_DECREF(seq);
            Py_RETURN_FALSE;
        }
        states.push_back(s);
    }
    Py_DECREF(seq);
    for (int64_t nxt : states) matcher_push(self, nxt);
    Py_RETURN_TRUE;
}

PyObject* Matcher_reset(MatcherObject* self, PyObject*) {
    self->state = self->root;
    self->ended_at = -1;
    self->history->clear();
    Py_RETURN_NONE;
}

PyObject* Matcher_is_terminated(MatcherObject* self, PyObject*) {
    if (self->state == self->end_state) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

PyObject* Matcher_allowed_token_ids(MatcherObject* self, PyObject*) {
    if (self->core) return make_mask(self->core, self->state);
    if (!self->mask_fn) {
        PyErr_SetString(PyExc_RuntimeError, "matcher not initialised");
        return nullptr;
    }
    return PyObject_CallFunction(self->mask_fn, "L", static_cast<long long>(self->state));
}

PyObject* Matcher_get_state(MatcherObject* self, void*) { return PyLong_FromLongLong(self->state); }
int Matcher_set_state(MatcherObject* self, PyObject* v, void*) {
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete state");
        return -1;
    }
    int64_t s;
    if (!as_i64(v, &s)) return -1;
    self->state = s;
    return 0;
}
PyObject* Matcher_get_num(MatcherObject* self, void*) {
    return PyLong_FromSize_t(self->history->size());
}
PyObject* Matcher_get_ended_at(MatcherObject* self, void*) {
    return PyLong_FromLongLong(self->ended_at);
}

PyMethodDef Matcher_methods[] = {
    {"_init_core", reinterpret_cast<PyCFunction>(Matcher_init_core), METH_VARARGS, nullptr},
    {"accept_token", reinterpret_cast<PyCFunction>(Matcher_accept_token), METH_O,
     "Advance by one token; False (state unchanged) if the token is not allowed, or the "
     "matcher is already terminated."},
    {"accept_tokens", reinterpret_cast<PyCFunction>(Matcher_accept_tokens), METH_O,
     "Accept all of token_ids, or none: False (state unchanged) if one is refused."},
    {"rollback", reinterpret_cast<PyCFunction>(Matcher_rollback), METH_O,
     "Undo the last num_tokens accepted tokens."},
    {"reset", reinterpret_cast<PyCFunction>(Matcher_reset), METH_NOARGS,
     "Back to the root, history cleared."},
    {"is_terminated", reinterpret_cast<PyCFunction>(Matcher_is_terminated), METH_NOARGS,
     "An end id has been accepted."},
    {"allowed_token_ids", reinterpret_cast<PyCFunction>(Matcher_allowed_token_ids), METH_NOARGS,
     "Sorted ids allowed next (end ids included where a value is complete)."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef Matcher_getset[] = {
    {"state", reinterpret_cast<getter>(Matcher_get_state), reinterpret_cast<setter>(Matcher_set_state),
     "The current state (a node id of the set).", nullptr},
    {"num_accepted", reinterpret_cast<getter>(Matcher_get_num), nullptr,
     "Tokens accepted and not rolled back (bounded by max_rollback_tokens).", nullptr},
    {"_ended_at", reinterpret_cast<getter>(Matcher_get_ended_at), nullptr,
     "The state an end id was accepted at (-1: none).", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};


// Fills in the Matcher type (made ready by the module's init).
void setup_matcher_type() {
    MatcherType.tp_name = "trierouter.registry._core.MatcherBase";
    MatcherType.tp_basicsize = sizeof(MatcherObject);
    MatcherType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
    MatcherType.tp_new = Matcher_new;
    MatcherType.tp_dealloc = reinterpret_cast<destructor>(Matcher_dealloc);
    MatcherType.tp_methods = Matcher_methods;
    MatcherType.tp_getset = Matcher_getset;
    MatcherType.tp_doc = "Per-request state and history over a set (native or Python steps).";
}

}  // namespace trierouter
