/* The floor of a walk of the caller's dicts: only the reads docs/pipeline-contract.md requires.
 *
 * Every message's head (the message, `info` with `role`, `id`, `parentID` and an assistant's
 * `summary`, `parts`, and in a user message each part's `type` and a compaction part's
 * `tail_start_id`); from `bodies_from` on, every body too (an assistant's `info.error`, each
 * part's fields by its type, `state.input` walked whole). Each value's type is checked, and
 * every string the contract checks at once is scanned for lone surrogates (a long text's
 * check waits for what the context writes, so it is only typed and measured here).
 *
 * With a list as `results`, the text of every tool result of those bodies is appended to it
 * (not a result cleared by `state.time.compacted`, whose text is the marker): `read` then
 * loads every byte of each, once (an OR of 32-byte loads), as fast as the memory gives it.
 * Each result must be searched for the cleared marker, whose presence decides whether it
 * counts in the tiers, so every engine reads all of it.
 *
 * Nothing else: nothing kept, no render, no path built for a fault (a fault is one
 * ValueError). Lookups are CPython's own, with the document's key objects (identity hits).
 * `bodies_from` is given, where an engine must find it. So a real engine's walk does all of
 * this and more: its time is this one's or above, unless it reads the same objects faster
 * (benches/floor.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

enum {
    K_INFO, K_PARTS, K_ROLE, K_ID, K_PARENT, K_SUMMARY, K_ERROR, K_NAME, K_DATA, K_MESSAGE,
    K_TYPE, K_TEXT, K_IGNORED, K_TOOL, K_STATE, K_STATUS, K_INPUT, K_OUTPUT, K_TIME,
    K_COMPACTED, K_TAIL, NKEYS
};
static PyObject *K[NKEYS];
/* where the texts of results go, or NULL */
static PyObject *texts;
/* where `read`'s reads land, so that the compiler keeps them */
static volatile size_t sink;

#define FAULT (-1)

/* 0, or FAULT for a lone surrogate */
static int surrogate_free(PyObject *s) {
    if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_KIND(s) == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *units = PyUnicode_2BYTE_DATA(s);
        for (Py_ssize_t i = 0; i < n; i++)
            if ((units[i] & 0xF800) == 0xD800) return FAULT;
    } else {
        const Py_UCS4 *units = PyUnicode_4BYTE_DATA(s);
        for (Py_ssize_t i = 0; i < n; i++)
            if ((units[i] & 0xFFFFF800) == 0xD800) return FAULT;
    }
    return 0;
}

/* an optional string checked at once (a role, an id, a name) */
static int short_string(PyObject *d, int key) {
    PyObject *v = PyDict_GetItem(d, K[key]);
    if (v == NULL || v == Py_None) return 0;
    return PyUnicode_CheckExact(v) ? surrogate_free(v) : FAULT;
}

/* an optional long text: its length, or FAULT */
static Py_ssize_t long_text(PyObject *d, int key) {
    PyObject *v = PyDict_GetItem(d, K[key]);
    if (v == NULL || v == Py_None) return 0;
    return PyUnicode_CheckExact(v) ? PyUnicode_GET_LENGTH(v) : FAULT;
}

/* with `texts`, a result's text kept there; FAULT when it cannot be */
static int keep(PyObject *d, int key) {
    PyObject *v = texts != NULL ? PyDict_GetItem(d, K[key]) : NULL;
    if (v == NULL || v == Py_None) return 0;
    return PyList_Append(texts, v) ? FAULT : 0;
}

static int optional_dict(PyObject *v) { return v == NULL || v == Py_None || PyDict_CheckExact(v); }

static int equals(PyObject *s, const char *ascii) {
    return s != NULL && PyUnicode_CheckExact(s) && PyUnicode_IS_ASCII(s) &&
           strcmp((const char *)PyUnicode_DATA(s), ascii) == 0;
}

/* `state.input`: any JSON value of str keys, nested at most 64 levels */
static int json_value(PyObject *v, int level) {
    if (PyUnicode_CheckExact(v)) return surrogate_free(v);
    if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v)) return 0;
    if (level >= 64) return FAULT;
    if (PyDict_CheckExact(v)) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(v, &pos, &key, &item))
            if (!PyUnicode_CheckExact(key) || surrogate_free(key) || json_value(item, level + 1))
                return FAULT;
        return 0;
    }
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        PyObject **items = PySequence_Fast_ITEMS(v);
        for (Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(v); i < n; i++)
            if (json_value(items[i], level + 1)) return FAULT;
        return 0;
    }
    return FAULT;
}

/* a `tool` part: 1 when it has a result, 0 when not, or FAULT */
static int tool_part(PyObject *part) {
    if (short_string(part, K_TOOL) || short_string(part, K_NAME)) return FAULT;
    PyObject *state = PyDict_GetItem(part, K[K_STATE]);
    if (state == NULL || state == Py_None) return 0;
    if (!PyDict_CheckExact(state)) return FAULT;
    PyObject *status = PyDict_GetItem(state, K[K_STATUS]);
    if (status != NULL && status != Py_None && !PyUnicode_CheckExact(status)) return FAULT;
    PyObject *input = PyDict_GetItem(state, K[K_INPUT]);
    if (input != NULL && json_value(input, 0)) return FAULT;
    if (equals(status, "completed")) {
        if (long_text(state, K_OUTPUT) == FAULT) return FAULT;
        PyObject *time = PyDict_GetItem(state, K[K_TIME]);
        if (!optional_dict(time)) return FAULT;
        PyObject *at = NULL;
        if (time != NULL && time != Py_None) at = PyDict_GetItem(time, K[K_COMPACTED]);
        if (at != NULL && at != Py_None) {
            if (PyBool_Check(at) || !(PyLong_Check(at) || PyFloat_Check(at))) return FAULT;
            return 1;  /* cleared: its text is the marker, the output is not read */
        }
        return keep(state, K_OUTPUT) ? FAULT : 1;
    }
    if (equals(status, "error")) {
        if (long_text(state, K_ERROR) == FAULT || keep(state, K_ERROR)) return FAULT;
        return 1;
    }
    return 0;
}

/* the parts of a message whose body is read: its number of tool results, or FAULT */
static long body_parts(PyObject *parts) {
    long results = 0;
    for (Py_ssize_t j = 0, n = PyList_GET_SIZE(parts); j < n; j++) {
        PyObject *part = PyList_GET_ITEM(parts, j);
        if (!PyDict_CheckExact(part)) return FAULT;
        PyObject *type = PyDict_GetItem(part, K[K_TYPE]);
        if (type == NULL || !PyUnicode_CheckExact(type) || surrogate_free(type)) return FAULT;
        if (equals(type, "text")) {
            if (long_text(part, K_TEXT) == FAULT) return FAULT;
            PyObject *ignored = PyDict_GetItem(part, K[K_IGNORED]);
            if (ignored != NULL && ignored != Py_None && !PyBool_Check(ignored)) return FAULT;
        } else if (equals(type, "tool")) {
            int result = tool_part(part);
            if (result == FAULT) return FAULT;
            results += result;
        } else if (equals(type, "tool_result")) {
            Py_ssize_t length = long_text(part, K_TEXT);
            if (length == FAULT || short_string(part, K_TOOL) || short_string(part, K_NAME))
                return FAULT;
            if (length > 0 && keep(part, K_TEXT)) return FAULT;
            results += length > 0;
        } else if (equals(type, "compaction")) {
            if (short_string(part, K_TAIL)) return FAULT;
        }
    }
    return results;
}

/* walk(messages: list, bodies_from: int, keys: tuple[str, ...], results: list | None = None)
 * -> int: the tool results of the bodies read; ValueError("fault") for any fault */
static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *messages, *keys, *results_list = Py_None;
    Py_ssize_t bodies_from;
    if (!PyArg_ParseTuple(args, "O!nO!|O", &PyList_Type, &messages, &bodies_from, &PyTuple_Type,
                          &keys, &results_list))
        return NULL;
    if (results_list != Py_None && !PyList_CheckExact(results_list)) {
        PyErr_SetString(PyExc_TypeError, "results: expected a list or None");
        return NULL;
    }
    texts = results_list == Py_None ? NULL : results_list;
    if (PyTuple_GET_SIZE(keys) != NKEYS) {
        PyErr_Format(PyExc_ValueError, "keys: expected %d key objects", NKEYS);
        return NULL;
    }
    for (int k = 0; k < NKEYS; k++) K[k] = PyTuple_GET_ITEM(keys, k);
    long results = 0;
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(messages); i < n; i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        if (!PyDict_CheckExact(message)) goto fault;
        PyObject *info = PyDict_GetItem(message, K[K_INFO]);
        if (info == NULL || !PyDict_CheckExact(info)) goto fault;
        PyObject *role = PyDict_GetItem(info, K[K_ROLE]);
        if (role != NULL && role != Py_None &&
            (!PyUnicode_CheckExact(role) || surrogate_free(role)))
            goto fault;
        if (short_string(info, K_ID) || short_string(info, K_PARENT)) goto fault;
        PyObject *parts = PyDict_GetItem(message, K[K_PARTS]);
        if (parts == NULL || !PyList_CheckExact(parts)) goto fault;
        int user = equals(role, "user"), assistant = equals(role, "assistant");
        if (assistant) (void)PyDict_GetItem(info, K[K_SUMMARY]);
        if (i >= bodies_from) {
            if (assistant) {
                PyObject *error = PyDict_GetItem(info, K[K_ERROR]);
                if (!optional_dict(error)) goto fault;
                if (error != NULL && error != Py_None) {
                    if (short_string(error, K_NAME)) goto fault;
                    PyObject *data = PyDict_GetItem(error, K[K_DATA]);
                    if (!optional_dict(data)) goto fault;
                    if (data != NULL && data != Py_None && short_string(data, K_MESSAGE))
                        goto fault;
                }
            }
            long found = body_parts(parts);
            if (found == FAULT) goto fault;
            results += found;
        } else if (user) {
            for (Py_ssize_t j = 0, np = PyList_GET_SIZE(parts); j < np; j++) {
                PyObject *part = PyList_GET_ITEM(parts, j);
                if (!PyDict_CheckExact(part)) goto fault;
                PyObject *type = PyDict_GetItem(part, K[K_TYPE]);
                if (type == NULL || !PyUnicode_CheckExact(type) || surrogate_free(type)) goto fault;
                if (equals(type, "compaction") && short_string(part, K_TAIL)) goto fault;
            }
        }
    }
    return PyLong_FromLong(results);
fault:
    PyErr_SetString(PyExc_ValueError, "fault");
    return NULL;
}

/* every byte of `data` loaded once: 32 bytes a load with AVX2, 16 without */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t fold_avx2(const char *data, size_t bytes) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        a = _mm256_or_si256(a, _mm256_loadu_si256((const __m256i *)(data + i)));
        b = _mm256_or_si256(b, _mm256_loadu_si256((const __m256i *)(data + i + 32)));
        c = _mm256_or_si256(c, _mm256_loadu_si256((const __m256i *)(data + i + 64)));
        d = _mm256_or_si256(d, _mm256_loadu_si256((const __m256i *)(data + i + 96)));
    }
    __m256i all = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, all);
    uint64_t folded = lanes[0] | lanes[1] | lanes[2] | lanes[3];
    for (; i < bytes; i++) folded |= (unsigned char)data[i];
    return folded;
}
#endif

static uint64_t fold(const char *data, size_t bytes) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) return fold_avx2(data, bytes);
#endif
    uint64_t a = 0, b = 0, word;
    size_t i = 0;
    for (; i + 16 <= bytes; i += 16) {
        memcpy(&word, data + i, 8);
        a |= word;
        memcpy(&word, data + i + 8, 8);
        b |= word;
    }
    for (; i < bytes; i++) a |= (unsigned char)data[i];
    return a | b;
}

/* read(texts: list[str]) -> int: every byte of each str loaded once; how many bytes */
static PyObject *read_texts(PyObject *self, PyObject *list) {
    if (!PyList_CheckExact(list)) {
        PyErr_SetString(PyExc_TypeError, "expected a list");
        return NULL;
    }
    size_t total = 0;
    uint64_t folded = 0;
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(list); i < n; i++) {
        PyObject *s = PyList_GET_ITEM(list, i);
        if (!PyUnicode_CheckExact(s)) {
            PyErr_SetString(PyExc_TypeError, "expected a list of str");
            return NULL;
        }
        size_t bytes = (size_t)PyUnicode_GET_LENGTH(s) * PyUnicode_KIND(s);
        folded |= fold(PyUnicode_DATA(s), bytes);
        total += bytes;
    }
    sink = folded;
    return PyLong_FromSize_t(total);
}

/* write(texts: list[str]) -> int: a new str made of each, as the result's strs must be made
   (allocated at its length and widest code point, its bytes written once); how many bytes */
static PyObject *write_texts(PyObject *self, PyObject *list) {
    if (!PyList_CheckExact(list)) {
        PyErr_SetString(PyExc_TypeError, "expected a list");
        return NULL;
    }
    size_t total = 0;
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(list); i < n; i++) {
        PyObject *s = PyList_GET_ITEM(list, i);
        if (!PyUnicode_CheckExact(s)) {
            PyErr_SetString(PyExc_TypeError, "expected a list of str");
            return NULL;
        }
        Py_ssize_t length = PyUnicode_GET_LENGTH(s);
        int kind = PyUnicode_KIND(s);
        Py_UCS4 widest = kind == 1 ? (PyUnicode_IS_ASCII(s) ? 0x7f : 0xff)
                         : kind == 2 ? 0xffff : 0x10ffff;
        PyObject *made = PyUnicode_New(length, widest);
        if (made == NULL) return NULL;
        memcpy(PyUnicode_DATA(made), PyUnicode_DATA(s), (size_t)length * kind);
        Py_DECREF(made);
        total += (size_t)length * kind;
    }
    return PyLong_FromSize_t(total);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "The contract's reads of a message list, nothing else."},
    {"read", read_texts, METH_O, "Every byte of each str of a list, read once."},
    {"write", write_texts, METH_O, "A new str of each str of a list, its bytes written once."},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floor", NULL, -1, methods};
PyMODINIT_FUNC PyInit_floor(void) { return PyModule_Create(&module); }
