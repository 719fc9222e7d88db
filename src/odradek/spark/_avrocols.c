/* Compiled column-wise decoding of registry-framed Avro values (odradek.spark._avrocols).
 *
 * decode(program, header, offsets, data, validity, offset, length, take, base) reads the values
 * of an Arrow binary column (int32 offsets, data, validity bitmap or None, the array's offset and
 * length) whose first five bytes equal ``header`` (Confluent's 0 byte and schema id) with the
 * writer schema compiled into ``program`` (see odradek.spark._avrofast), and writes one column
 * buffer set per program node.  Values with another header are skipped (the first such header is
 * returned, to be decoded by another call); null values are skipped.  ``take`` (int32, offset +
 * length entries, writable, -1 where no call has decoded the row yet) gets, at each decoded row,
 * ``base`` plus the row's rank among the rows this call decodes.
 *
 * Returns (count, other_header or None, [(entries, validity, values, data) per node]) or None when a value
 * is malformed in any way (not framed, truncated, bytes left over, a varint of more than ten
 * bytes, an int out of range, a length past the end, a bad union or enum index, invalid UTF-8):
 * the caller then decodes the batch on the careful path, which names the record.  Every read is
 * bounds-checked against the value's own end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_NULL = 0, K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_FIXED, K_ENUM, K_RECORD, K_ARRAY,
       K_MAP };

typedef struct {
    int32_t kind, nullidx, end, param;
} Node;

typedef struct {
    uint8_t *p;
    size_t cap; /* bytes; zero-filled up to cap */
} Buf;

typedef struct {
    Py_ssize_t count; /* entries so far: a record's children have its count, an array's items their own */
    Buf validity;     /* one bit per entry */
    Buf values;       /* fixed-width values, a bitmap (boolean), or count + 1 int32 offsets */
    Buf data;         /* bytes, string, fixed */
    size_t dlen;
} Out;

typedef struct {
    const uint8_t *p, *end;
} Cur;

static int width(int kind) {
    switch (kind) {
    case K_INT: case K_ENUM: case K_FLOAT: return 4;
    case K_LONG: case K_DOUBLE: return 8;
    default: return 0;
    }
}

static int has_offsets(int kind) {
    return kind == K_BYTES || kind == K_STRING || kind == K_FIXED || kind == K_ARRAY || kind == K_MAP;
}

/* at least ``need`` bytes, the new ones zero */
static int reserve(Buf *b, size_t need) {
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > ((size_t)1 << 40)) return -1;
        cap *= 2;
    }
    uint8_t *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) return -1;
    memset(p + b->cap, 0, cap - b->cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

static int read_long(Cur *c, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->p >= c->end) return -1;
        uint8_t b = *c->p++;
        if (shift == 63 && (b & 0x7e)) return -1; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

/* strict UTF-8, as Python's decoder: no overlong forms, no surrogates, nothing past U+10FFFF */
static int valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        if (b >= 0xc2 && b <= 0xdf) {
            if (i + 1 >= n || (s[i + 1] & 0xc0) != 0x80) return 0;
            i += 2;
        } else if (b >= 0xe0 && b <= 0xef) {
            if (i + 2 >= n || (s[i + 1] & 0xc0) != 0x80 || (s[i + 2] & 0xc0) != 0x80) return 0;
            if (b == 0xe0 && s[i + 1] < 0xa0) return 0;
            if (b == 0xed && s[i + 1] >= 0xa0) return 0;
            i += 3;
        } else if (b >= 0xf0 && b <= 0xf4) {
            if (i + 3 >= n || (s[i + 1] & 0xc0) != 0x80 || (s[i + 2] & 0xc0) != 0x80 || (s[i + 3] & 0xc0) != 0x80)
                return 0;
            if (b == 0xf0 && s[i + 1] < 0x90) return 0;
            if (b == 0xf4 && s[i + 1] >= 0x90) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static void set_bit(uint8_t *bits, Py_ssize_t k) { bits[k >> 3] |= (uint8_t)(1u << (k & 7)); }

static int put_offset(Out *o, Py_ssize_t k, Py_ssize_t value) {
    if (value > INT32_MAX || reserve(&o->values, (size_t)(k + 2) * 4) < 0) return -1;
    int32_t v = (int32_t)value;
    memcpy(o->values.p + 4 * (k + 1), &v, 4);
    return 0;
}

/* the buffers of one more entry of node o, all zero (null; validity bit unset) */
static int open_entry(const Node *nd, Out *o, Py_ssize_t k) {
    if (reserve(&o->validity, (size_t)(k >> 3) + 1) < 0) return -1;
    if (nd->kind == K_BOOL) return reserve(&o->values, (size_t)(k >> 3) + 1);
    if (width(nd->kind)) return reserve(&o->values, (size_t)(k + 1) * width(nd->kind));
    return 0;
}

/* a null entry of node i (its record's fields null too; an array or map of no entries) */
static int append_null(const Node *nodes, Out *outs, int i) {
    const Node *nd = &nodes[i];
    Out *o = &outs[i];
    Py_ssize_t k = o->count;
    if (open_entry(nd, o, k) < 0) return -1;
    if (nd->kind == K_BYTES || nd->kind == K_STRING || nd->kind == K_FIXED) {
        if (put_offset(o, k, (Py_ssize_t)o->dlen) < 0) return -1;
    } else if (nd->kind == K_ARRAY || nd->kind == K_MAP) {
        if (put_offset(o, k, outs[i + 1].count) < 0) return -1;
    } else if (nd->kind == K_RECORD) {
        for (int j = i + 1; j < nd->end; j = nodes[j].end)
            if (append_null(nodes, outs, j) < 0) return -1;
    }
    o->count = k + 1;
    return 0;
}

static int dec(const Node *nodes, Out *outs, int i, Cur *c);

/* the items of an array (child i + 1) or the entries of a map (key i + 1, value i + 2) */
static int dec_items(const Node *nodes, Out *outs, int i, Cur *c) {
    int64_t n, size;
    for (;;) {
        if (read_long(c, &n) < 0) return -1;
        if (n == 0) return 0;
        if (n < 0) {
            if (n == INT64_MIN || read_long(c, &size) < 0 || size < 0) return -1;
            n = -n;
        }
        /* every item takes a byte at least (the compiler refuses items of none): no count past the bytes */
        if (n > c->end - c->p) return -1;
        for (int64_t m = 0; m < n; m++) {
            if (dec(nodes, outs, i + 1, c) < 0) return -1;
            if (nodes[i].kind == K_MAP && dec(nodes, outs, i + 2, c) < 0) return -1;
        }
    }
}

/* the value of node i as its next entry; the index of the node after its subtree, or -1 */
static int dec(const Node *nodes, Out *outs, int i, Cur *c) {
    const Node *nd = &nodes[i];
    Out *o = &outs[i];
    Py_ssize_t k = o->count;
    int64_t v;
    if (nd->nullidx >= 0) {
        if (read_long(c, &v) < 0 || v < 0 || v > 1) return -1;
        if (v == nd->nullidx) return append_null(nodes, outs, i) < 0 ? -1 : nd->end;
    }
    if (open_entry(nd, o, k) < 0) return -1;
    set_bit(o->validity.p, k);
    switch (nd->kind) {
    case K_NULL:
        break;
    case K_BOOL:
        if (c->p >= c->end || *c->p > 1) return -1;
        if (*c->p++) set_bit(o->values.p, k);
        break;
    case K_INT:
    case K_ENUM: {
        if (read_long(c, &v) < 0) return -1;
        if (nd->kind == K_INT ? (v < INT32_MIN || v > INT32_MAX) : (v < 0 || v >= nd->param)) return -1;
        int32_t x = (int32_t)v;
        memcpy(o->values.p + 4 * k, &x, 4);
        break;
    }
    case K_LONG:
        if (read_long(c, &v) < 0) return -1;
        memcpy(o->values.p + 8 * k, &v, 8);
        break;
    case K_FLOAT:
        if (c->end - c->p < 4) return -1;
        memcpy(o->values.p + 4 * k, c->p, 4); /* little-endian, as x86 and ARM run */
        c->p += 4;
        break;
    case K_DOUBLE:
        if (c->end - c->p < 8) return -1;
        memcpy(o->values.p + 8 * k, c->p, 8);
        c->p += 8;
        break;
    case K_BYTES:
    case K_STRING:
    case K_FIXED: {
        if (nd->kind == K_FIXED) {
            v = nd->param;
        } else if (read_long(c, &v) < 0 || v < 0) {
            return -1;
        }
        if (v > c->end - c->p) return -1;
        if (nd->kind == K_STRING && !valid_utf8(c->p, (size_t)v)) return -1;
        if (o->dlen + (size_t)v > (size_t)INT32_MAX || reserve(&o->data, o->dlen + (size_t)v) < 0) return -1;
        if (v) memcpy(o->data.p + o->dlen, c->p, (size_t)v);
        o->dlen += (size_t)v;
        c->p += v;
        if (put_offset(o, k, (Py_ssize_t)o->dlen) < 0) return -1;
        break;
    }
    case K_RECORD:
        for (int j = i + 1; j < nd->end;) {
            j = dec(nodes, outs, j, c);
            if (j < 0) return -1;
        }
        break;
    case K_ARRAY:
    case K_MAP:
        if (dec_items(nodes, outs, i, c) < 0 || put_offset(o, k, outs[i + 1].count) < 0) return -1;
        break;
    default:
        return -1;
    }
    o->count = k + 1;
    return nd->end;
}

static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "decode takes 9 arguments");
        return NULL;
    }
    Py_buffer prog = {0}, head = {0}, offs = {0}, data = {0}, valid = {0}, take = {0};
    Out *outs = NULL;
    int nnodes = 0;
    PyObject *result = NULL;
    Py_ssize_t aoff = PyLong_AsSsize_t(args[5]), n = PyLong_AsSsize_t(args[6]), base = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred()) return NULL;
    if (PyObject_GetBuffer(args[0], &prog, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[1], &head, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[2], &offs, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[3], &data, PyBUF_SIMPLE) < 0) goto done;
    if (args[4] != Py_None && PyObject_GetBuffer(args[4], &valid, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[7], &take, PyBUF_WRITABLE) < 0) goto done;
    if (head.len != 5 || prog.len % 16 != 0 || prog.len == 0 || aoff < 0 || n < 0 || base < 0 ||
        offs.len / 4 < aoff + n + 1 || take.len / 4 < aoff + n ||
        (valid.buf != NULL && valid.len * 8 < aoff + n)) {
        PyErr_SetString(PyExc_ValueError, "decode: inconsistent buffers");
        goto done;
    }
    nnodes = (int)(prog.len / 16);
    const Node *nodes = (const Node *)prog.buf;
    for (int i = 0; i < nnodes; i++) {
        const Node *nd = &nodes[i];
        int composite = nd->kind == K_RECORD || nd->kind == K_ARRAY || nd->kind == K_MAP;
        if (nd->kind < K_NULL || nd->kind > K_MAP || nd->nullidx < -1 || nd->nullidx > 1 || nd->end <= i ||
            nd->end > nnodes || (!composite && nd->end != i + 1) || nd->param < 0 || (i == 0 && nd->end != nnodes) ||
            (nd->kind == K_ARRAY && (i + 1 >= nd->end || nodes[i + 1].end != nd->end)) ||
            (nd->kind == K_MAP && (i + 2 >= nd->end || nodes[i + 1].kind != K_STRING || nodes[i + 1].nullidx != -1 ||
                                   nodes[i + 2].end != nd->end))) {
            PyErr_SetString(PyExc_ValueError, "decode: bad program");
            goto done;
        }
    }
    outs = PyMem_Calloc((size_t)nnodes, sizeof(Out));
    if (outs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *ov = (const int32_t *)offs.buf;
    const uint8_t *bytes = (const uint8_t *)data.buf, *vbits = (const uint8_t *)valid.buf;
    const uint8_t *want = (const uint8_t *)head.buf;
    int32_t *tk = (int32_t *)take.buf;
    const uint8_t *other = NULL;
    Py_ssize_t k = 0;
    int bad = 0;
    for (Py_ssize_t r = 0; r < n && !bad; r++) {
        Py_ssize_t idx = aoff + r;
        if (vbits != NULL && !((vbits[idx >> 3] >> (idx & 7)) & 1)) continue;
        int32_t s = ov[idx], e = ov[idx + 1];
        if (s < 0 || e < s || e > data.len || e - s < 5 || bytes[s] != 0) {
            bad = 1;
            break;
        }
        if (memcmp(bytes + s, want, 5) != 0) {
            if (other == NULL && tk[idx] < 0) other = bytes + s; /* not decoded by an earlier call */
            continue;
        }
        Cur c = {bytes + s + 5, bytes + e};
        if (dec(nodes, outs, 0, &c) < 0 || c.p != c.end) {
            bad = 1;
            break;
        }
        if (base + k > INT32_MAX) {
            bad = 1;
            break;
        }
        tk[idx] = (int32_t)(base + k);
        k++;
    }
    if (bad) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *cols = PyList_New(nnodes);
    if (cols == NULL) goto done;
    for (int i = 0; i < nnodes; i++) {
        int kind = nodes[i].kind;
        Out *o = &outs[i];
        Py_ssize_t m = o->count;
        Py_ssize_t vlen = kind == K_BOOL ? (m + 7) / 8 : has_offsets(kind) ? (m + 1) * 4 : m * width(kind);
        /* the zero-filled buffers hold every byte reported (an empty one: the first offset, 0) */
        if (reserve(&o->validity, (size_t)(m + 7) / 8 + 1) < 0 || reserve(&o->values, (size_t)vlen + 1) < 0 ||
            reserve(&o->data, o->dlen + 1) < 0) {
            Py_DECREF(cols);
            PyErr_NoMemory();
            goto done;
        }
        PyObject *t = Py_BuildValue("(ny#y#y#)", m, (const char *)o->validity.p, (Py_ssize_t)((m + 7) / 8),
                                    (const char *)o->values.p, vlen, (const char *)o->data.p, (Py_ssize_t)o->dlen);
        if (t == NULL) {
            Py_DECREF(cols);
            goto done;
        }
        PyList_SET_ITEM(cols, i, t);
    }
    PyObject *oh = other ? PyBytes_FromStringAndSize((const char *)other, 5) : Py_NewRef(Py_None);
    if (oh == NULL) {
        Py_DECREF(cols);
        goto done;
    }
    result = Py_BuildValue("(nNN)", k, oh, cols);
done:
    if (outs != NULL) {
        for (int i = 0; i < nnodes; i++) {
            PyMem_Free(outs[i].validity.p);
            PyMem_Free(outs[i].values.p);
            PyMem_Free(outs[i].data.p);
        }
        PyMem_Free(outs);
    }
    if (prog.obj) PyBuffer_Release(&prog);
    if (head.obj) PyBuffer_Release(&head);
    if (offs.obj) PyBuffer_Release(&offs);
    if (data.obj) PyBuffer_Release(&data);
    if (valid.obj) PyBuffer_Release(&valid);
    if (take.obj) PyBuffer_Release(&take);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "decode(program, header, offsets, data, validity, offset, length, take, base) -> (count, other header, "
     "[(entries, validity, values, data)]) or None when a value is malformed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "odradek.spark._avrocols", "Compiled column-wise decoding of framed Avro values.", -1, methods,
};

PyMODINIT_FUNC PyInit__avrocols(void) { return PyModule_Create(&module); }
