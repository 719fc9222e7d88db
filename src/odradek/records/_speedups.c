/* Compiled record code: decoding the records of v2 batches, and a producer's open batch.
 *
 * Optional: built at install when a C compiler is there (setup.py, optional=True);
 * odradek.records.speedups falls back to the pure-Python code when it is not, or when
 * ODRADEK_PURE_PYTHON=1.  Entry points:
 *
 *   decode_records(buf, start, stop, count, base_offset, base_timestamp, log_append_time, record_type)
 *       -> list of record_type tuples (offset, timestamp, key, value, headers), as v2.decode_records
 *   decode_columns(batches, with_headers[, alloc])
 *       -> the Arrow buffers of the columns of several batches' records (see decode_columns below)
 *   check_records(buf, start, stop, count, base_timestamp, last_offset_delta, sequential)
 *       -> what is wrong with a batch's records, in one pass with no object per record (see below)
 *   check_produced(buf, max_size, refuse_keyless, create_time, now, before, after)
 *       -> a produced batch's max timestamp when it passes every check (CRC too), else None
 *   crc32c(data, crc=0)
 *       -> CRC-32C, as the crc32c package (the one check_produced uses; for the tests)
 *   encode_record_body(timestamp_delta, offset_delta, key, value)
 *       -> one record without headers, as BatchBuilder stores it
 *   Pool, Receipt, Appender
 *       -> a producer's open batch (odradek.records.appender; see "The producer's open batch")
 *
 * Any problem with the data raises ValueError: the caller then decodes the batch with the
 * pure-Python decoder, which raises the precise error.  Nothing here trusts a length: every
 * read is checked against the end of the records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <structmember.h>

typedef struct {
    const uint8_t *p;   /* the records: p[0] .. p[n - 1] */
    Py_ssize_t n;
    Py_ssize_t pos;
} reader;

/* Kafka's varint / varlong: zigzag-encoded LEB128, at most 5 / 10 bytes.  As in Kafka's reader,
 * bits beyond the type's width in the last byte are dropped.  0, or -1 when the data ends inside
 * it, -2 when it is longer than its type allows. */
static inline int read_varlong(reader *r, int max_bytes, int64_t *out) {
    Py_ssize_t pos = r->pos;
    if (pos + 1 < r->n) { /* one or two bytes: nearly every length and delta */
        uint64_t b0 = r->p[pos];
        if (!(b0 & 0x80)) {
            r->pos = pos + 1;
            *out = (int64_t)((b0 >> 1) ^ (~(b0 & 1) + 1));
            return 0;
        }
        uint64_t b1 = r->p[pos + 1];
        if (!(b1 & 0x80)) {
            uint64_t v = (b0 & 0x7F) | (b1 << 7);
            r->pos = pos + 2;
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return 0;
        }
    } else if (pos < r->n && !(r->p[pos] & 0x80)) {
        uint64_t b = r->p[pos];
        r->pos = pos + 1;
        *out = (int64_t)((b >> 1) ^ (~(b & 1) + 1));
        return 0;
    }
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (r->pos >= r->n) return -1;
        uint8_t b = r->p[r->pos++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            if (max_bytes == 5) v &= 0xFFFFFFFFu;
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return 0;
        }
        shift += 7;
    }
    return -2;
}

static inline int read_varint(reader *r, int64_t *out) { return read_varlong(r, 5, out); }

typedef struct {
    int64_t offset_delta;
    int64_t timestamp_delta;
    Py_ssize_t key_at, value_at, headers_at;
    int64_t key_len, value_len, header_count;
    Py_ssize_t header_bytes[2];  /* total key bytes, value bytes of its headers */
    int64_t header_null_values;
} record;

/* What is wrong with the records of a batch (odradek.records.check names them; keep in step). */
enum {
    P_OK = 0,
    P_EOF = 1,                   /* the records end before the declared count */
    P_VARINT = 2,                /* a varint longer than its type allows */
    P_RECORD_SIZE = 3,           /* a record length negative or past the end: value, extra = bytes left */
    P_STRUCTURE = 4,             /* a field runs past the end of its record */
    P_KEY_LENGTH = 5,            /* key length below -1: value */
    P_VALUE_LENGTH = 6,          /* value length below -1: value */
    P_HEADER_COUNT = 7,          /* negative header count: value */
    P_HEADER_COUNT_LARGE = 8,    /* more headers than bytes left in the record: value, extra */
    P_HEADER_KEY_LENGTH = 9,     /* negative header key length: value */
    P_HEADER_VALUE_LENGTH = 10,  /* header value length below -1: value */
    P_SIZE_MISMATCH = 11,        /* the fields end before the record length: value = length, extra = read */
    P_OFFSET_DELTA = 12,         /* offset delta out of order: value, extra = expected / previous */
    P_TIMESTAMP = 13,            /* base timestamp + delta beyond int64: value = delta */
    P_TRAILING = 14,             /* bytes after the last record: value */
    P_HEADER_KEY_UTF8 = 15,      /* a header key that is not UTF-8 (decoders only) */
};

typedef struct {
    int64_t value, extra;
} detail;

#define FIELD_FAIL(rc) ((rc) == -2 ? P_VARINT : P_STRUCTURE)

/* Parse the record at r->pos; leaves r->pos after it.  0, or what is wrong (P_*), with the
 * numbers of the problem in *d. */
static inline int parse_record(reader *r, record *rec, int check_utf8, detail *d) {
    int64_t length;
    int rc = read_varint(r, &length);
    if (rc < 0) return rc == -2 ? P_VARINT : P_EOF;
    Py_ssize_t start = r->pos;
    if (length < 0 || length > r->n - start) {
        d->value = length;
        d->extra = r->n - start;
        return P_RECORD_SIZE;
    }
    reader body = {r->p, start + (Py_ssize_t)length, start};
    if (body.pos >= body.n) return P_STRUCTURE;
    body.pos++; /* attributes: unused */
    if ((rc = read_varlong(&body, 10, &rec->timestamp_delta)) < 0) return FIELD_FAIL(rc);
    if ((rc = read_varint(&body, &rec->offset_delta)) < 0) return FIELD_FAIL(rc);
    if ((rc = read_varint(&body, &rec->key_len)) < 0) return FIELD_FAIL(rc);
    if (rec->key_len < -1) {
        d->value = rec->key_len;
        return P_KEY_LENGTH;
    }
    rec->key_at = body.pos;
    if (rec->key_len >= 0) {
        if (rec->key_len > body.n - body.pos) return P_STRUCTURE;
        body.pos += (Py_ssize_t)rec->key_len;
    }
    if ((rc = read_varint(&body, &rec->value_len)) < 0) return FIELD_FAIL(rc);
    if (rec->value_len < -1) {
        d->value = rec->value_len;
        return P_VALUE_LENGTH;
    }
    rec->value_at = body.pos;
    if (rec->value_len >= 0) {
        if (rec->value_len > body.n - body.pos) return P_STRUCTURE;
        body.pos += (Py_ssize_t)rec->value_len;
    }
    if ((rc = read_varint(&body, &rec->header_count)) < 0) return FIELD_FAIL(rc);
    if (rec->header_count < 0) {
        d->value = rec->header_count;
        return P_HEADER_COUNT;
    }
    if (rec->header_count > body.n - body.pos) {
        d->value = rec->header_count;
        d->extra = body.n - body.pos;
        return P_HEADER_COUNT_LARGE;
    }
    rec->headers_at = body.pos;
    rec->header_bytes[0] = rec->header_bytes[1] = 0;
    rec->header_null_values = 0;
    for (int64_t h = 0; h < rec->header_count; h++) {
        int64_t kl, vl;
        if ((rc = read_varint(&body, &kl)) < 0) return FIELD_FAIL(rc);
        if (kl < 0) {
            d->value = kl;
            return P_HEADER_KEY_LENGTH;
        }
        if (kl > body.n - body.pos) return P_STRUCTURE;
        if (check_utf8) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)body.p + body.pos, (Py_ssize_t)kl, NULL);
            if (s == NULL) {
                PyErr_Clear();
                return P_HEADER_KEY_UTF8;
            }
            Py_DECREF(s);
        }
        body.pos += (Py_ssize_t)kl;
        rec->header_bytes[0] += (Py_ssize_t)kl;
        if ((rc = read_varint(&body, &vl)) < 0) return FIELD_FAIL(rc);
        if (vl < -1) {
            d->value = vl;
            return P_HEADER_VALUE_LENGTH;
        }
        if (vl >= 0) {
            if (vl > body.n - body.pos) return P_STRUCTURE;
            body.pos += (Py_ssize_t)vl;
            rec->header_bytes[1] += (Py_ssize_t)vl;
        } else {
            rec->header_null_values++;
        }
    }
    if (body.pos != body.n) { /* the length says more than the fields hold */
        d->value = length;
        d->extra = body.pos - start;
        return P_SIZE_MISMATCH;
    }
    r->pos = body.n;
    return P_OK;
}

static PyObject *corrupt(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return NULL;
}

typedef struct {
    Py_buffer view;
    Py_ssize_t start, stop, count;
    long long base_offset, base_timestamp, log_append_time;
    int has_log_append_time;
} args_t;

static int get_args(PyObject *const *args, Py_ssize_t nargs, args_t *a) {
    if (nargs != 8 && nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "expected 8 or 11 arguments");
        return -1;
    }
    if (PyObject_GetBuffer(args[0], &a->view, PyBUF_SIMPLE) < 0) return -1;
    a->start = PyLong_AsSsize_t(args[1]);
    a->stop = args[2] == Py_None ? a->view.len : PyLong_AsSsize_t(args[2]);
    a->count = PyLong_AsSsize_t(args[3]);
    a->base_offset = PyLong_AsLongLong(args[4]);
    a->base_timestamp = PyLong_AsLongLong(args[5]);
    a->has_log_append_time = args[6] != Py_None;
    a->log_append_time = a->has_log_append_time ? PyLong_AsLongLong(args[6]) : 0;
    if (PyErr_Occurred()) goto fail;
    if (a->start < 0 || a->stop > a->view.len || a->start > a->stop || a->count < 0) {
        PyErr_SetString(PyExc_ValueError, "bad range or count");
        goto fail;
    }
    return 0;
fail:
    PyBuffer_Release(&a->view);
    return -1;
}

static PyObject *bytes_or_none(const uint8_t *p, int64_t len) {
    if (len < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)len);
}

/* decode_records(buf, start, stop, count, base_offset, base_timestamp, log_append_time, record_type
 *                [, topic, partition, timestamp_type]):
 * a list of record_type(offset, timestamp, key, value, headers), or with the last three
 * arguments of record_type(topic, partition, offset, timestamp, timestamp_type, key, value,
 * headers) (the clients' ConsumerRecord). */
static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    args_t a;
    if (get_args(args, nargs, &a) < 0) return NULL;
    PyObject *record_type = args[7];
    if (!PyType_Check(record_type) || !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type)) {
        PyBuffer_Release(&a.view);
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return NULL;
    }
    int consumer = nargs == 11;
    PyObject *last_ts = NULL;
    long long last_ts_value = 0;
    PyObject *out = PyList_New(a.count);
    if (out == NULL) goto fail;
    reader r = {(const uint8_t *)a.view.buf, a.stop, a.start};
    int64_t prev_delta = -1;
    for (Py_ssize_t i = 0; i < a.count; i++) {
        record rec;
        detail d;
        if (parse_record(&r, &rec, 0, &d) != P_OK) {
            corrupt("corrupt record");
            goto fail;
        }
        /* offsets strictly increase within a batch (compaction leaves gaps, never repeats) */
        if (rec.offset_delta <= prev_delta) {
            corrupt("record offsets do not increase");
            goto fail;
        }
        prev_delta = rec.offset_delta;
        int64_t stamp;
        if (!a.has_log_append_time && __builtin_add_overflow((int64_t)a.base_timestamp, rec.timestamp_delta, &stamp)) {
            corrupt("record timestamp out of range");
            goto fail;
        }
        PyObject *headers = PyList_New((Py_ssize_t)rec.header_count);
        if (headers == NULL) goto fail;
        reader hr = {r.p, r.pos, rec.headers_at};
        for (int64_t h = 0; h < rec.header_count; h++) {
            int64_t kl = 0, vl = -1;
            read_varint(&hr, &kl);
            PyObject *k = PyUnicode_DecodeUTF8((const char *)hr.p + hr.pos, (Py_ssize_t)kl, NULL);
            if (k == NULL) {
                Py_DECREF(headers);
                PyErr_Clear();
                corrupt("header key is not UTF-8");
                goto fail;
            }
            hr.pos += (Py_ssize_t)kl;
            read_varint(&hr, &vl);
            PyObject *v = bytes_or_none(hr.p + hr.pos, vl);
            if (vl > 0) hr.pos += (Py_ssize_t)vl;
            PyObject *pair = v ? PyTuple_Pack(2, k, v) : NULL;
            Py_DECREF(k);
            Py_XDECREF(v);
            if (pair == NULL) {
                Py_DECREF(headers);
                goto fail;
            }
            PyList_SET_ITEM(headers, (Py_ssize_t)h, pair);
        }
        long long ts = a.has_log_append_time ? a.log_append_time
                                             : (long long)((uint64_t)a.base_timestamp + (uint64_t)rec.timestamp_delta);
        PyTypeObject *rt = (PyTypeObject *)record_type;
        /* a record_type tuple, as tuple.__new__ makes it */
        PyObject *item = rt->tp_alloc(rt, consumer ? 8 : 5);
        if (item == NULL) {
            Py_DECREF(headers);
            goto fail;
        }
        PyList_SET_ITEM(out, i, item); /* owned by the list from here: freed with it on failure */
        int f = 0;
        if (consumer) {
            Py_INCREF(args[8]);
            Py_INCREF(args[9]);
            PyTuple_SET_ITEM(item, 0, args[8]);
            PyTuple_SET_ITEM(item, 1, args[9]);
            f = 2;
        }
        PyTuple_SET_ITEM(item, f, PyLong_FromLongLong(a.base_offset + rec.offset_delta));
        if (last_ts == NULL || ts != last_ts_value) { /* records of a batch often share a timestamp */
            Py_XDECREF(last_ts);
            last_ts = PyLong_FromLongLong(ts);
            last_ts_value = ts;
            if (last_ts == NULL) {
                Py_DECREF(headers);
                goto fail;
            }
        }
        Py_INCREF(last_ts);
        PyTuple_SET_ITEM(item, f + 1, last_ts);
        if (consumer) {
            Py_INCREF(args[10]);
            PyTuple_SET_ITEM(item, 4, args[10]);
            f = 3;
        }
        PyTuple_SET_ITEM(item, f + 2, bytes_or_none(r.p + rec.key_at, rec.key_len));
        PyTuple_SET_ITEM(item, f + 3, bytes_or_none(r.p + rec.value_at, rec.value_len));
        PyTuple_SET_ITEM(item, f + 4, headers);
        for (int g = 0; g < f + 4; g++) {
            if (PyTuple_GET_ITEM(item, g) == NULL) goto fail;
        }
        if (rec.header_count == 0) {
            /* Nothing in a record without headers can refer back to it (ints, bytes, None, the
             * caller's topic and timestamp type, an empty list), so the cycle collector need
             * not track it or its list: a fetch makes thousands of them at once, and the
             * collection that follows each fetch would otherwise walk every one of them
             * (about a tenth of a consumer's time).  Only a caller putting the record into its
             * own headers list would make a cycle the collector cannot free. */
            PyObject_GC_UnTrack(headers);
            PyObject_GC_UnTrack(item);
        }
    }
    if (r.pos != a.stop) {
        corrupt("bytes left after the last record");
        goto fail;
    }
    Py_XDECREF(last_ts);
    PyBuffer_Release(&a.view);
    return out;
fail:
    Py_XDECREF(last_ts);
    Py_XDECREF(out);
    PyBuffer_Release(&a.view);
    return NULL;
}

/* A zig-zag varint of one to three bytes at q, before bend, into out; anything else (longer, cut
 * by bend) makes the calling function stop: the general parse_record then reads that record. */
#define SHORT_VARINT(out)                                                                           \
    do {                                                                                            \
        if (q >= bend) goto stop;                                                                   \
        uint64_t b0_ = *q, v_;                                                                      \
        if (!(b0_ & 0x80)) {                                                                        \
            v_ = b0_;                                                                               \
            q++;                                                                                    \
        } else {                                                                                    \
            if (bend - q < 2) goto stop;                                                            \
            uint64_t b1_ = q[1];                                                                    \
            if (!(b1_ & 0x80)) {                                                                    \
                v_ = (b0_ & 0x7F) | (b1_ << 7);                                                     \
                q += 2;                                                                             \
            } else {                                                                                \
                if (bend - q < 3 || (q[2] & 0x80)) goto stop;                                       \
                v_ = (b0_ & 0x7F) | ((b1_ & 0x7F) << 7) | ((uint64_t)q[2] << 14);                   \
                q += 3;                                                                             \
            }                                                                                       \
        }                                                                                           \
        (out) = (int64_t)(v_ >> 1) ^ -(int64_t)(v_ & 1);                                            \
    } while (0)

typedef struct {
    int64_t max_ts, min_ts, prev;
    Py_ssize_t keyless;
} tally;

/* check_records' loop over records of the usual shape (every varint of one to three bytes, no
 * headers, offsets and timestamps as they must be), from record i at *pp: the index of the first
 * record it leaves to the general parse (count when none), *pp at it.  Whatever it accepts, the
 * general parse accepts with the same numbers; it only keeps the common case out of the general
 * parse's bookkeeping. */
static inline long long short_records(const uint8_t **pp, const uint8_t *end, long long i, long long count,
                                      int sequential, int64_t lod, int64_t base_ts, tally *t) {
    const uint8_t *p = *pp;
    int64_t max_ts = t->max_ts, min_ts = t->min_ts, prev = t->prev;
    Py_ssize_t keyless = t->keyless;
    for (; i < count; i++) {
        const uint8_t *q = p, *bend = end;
        int64_t length, tsd, od, kl, vl, stamp;
        SHORT_VARINT(length);
        if (length < 1 || length > bend - q) goto stop;
        bend = q + length;
        q++; /* attributes */
        SHORT_VARINT(tsd);
        SHORT_VARINT(od);
        SHORT_VARINT(kl);
        if (kl < -1 || kl > bend - q) goto stop;
        if (kl > 0) q += kl;
        SHORT_VARINT(vl);
        if (vl < -1 || vl > bend - q) goto stop;
        if (vl > 0) q += vl;
        if (bend - q != 1 || *q != 0) goto stop; /* a header count of 0, the record's last byte */
        if (sequential ? od != i : (od <= prev || od > lod)) goto stop;
        if (__builtin_add_overflow(base_ts, tsd, &stamp)) goto stop;
        prev = od;
        if (stamp > max_ts) max_ts = stamp;
        if (stamp != -1 && stamp < min_ts) min_ts = stamp;
        keyless += kl < 0;
        p = bend;
    }
stop:
    *pp = p;
    t->max_ts = max_ts;
    t->min_ts = min_ts;
    t->prev = prev;
    t->keyless = keyless;
    return i;
}

/* What check_span found: the numbers check_records returns. */
typedef struct {
    int problem;
    long long i;
    Py_ssize_t at;
    detail d;
    tally t;
} span_check;

/* check_records' pass over base[start:stop] (see check_records below). */
static void check_span(const uint8_t *base, Py_ssize_t start, Py_ssize_t stop, long long count, long long base_ts,
                       long long lod, int sequential, span_check *o) {
    int problem = P_OK;
    long long i = 0;
    Py_ssize_t at = start;
    detail d = {0, 0};
    tally t = {-1, INT64_MAX, -1, 0};
    const uint8_t *end = base + stop, *p = base + start;
    while (1) {
        i = short_records(&p, end, i, count, sequential, lod, base_ts, &t);
        if (i >= count) break;
        /* a record of another shape, or a problem: the general parse says which */
        reader r = {base, stop, p - base};
        record rec;
        at = r.pos;
        problem = parse_record(&r, &rec, 0, &d);
        if (problem != P_OK) break;
        int64_t od = rec.offset_delta;
        if (sequential ? od != i : (od <= t.prev || od > lod)) {
            problem = P_OFFSET_DELTA;
            d.value = od;
            d.extra = sequential ? i : t.prev;
            break;
        }
        t.prev = od;
        int64_t stamp;
        if (__builtin_add_overflow((int64_t)base_ts, rec.timestamp_delta, &stamp)) {
            problem = P_TIMESTAMP;
            d.value = rec.timestamp_delta;
            break;
        }
        if (stamp > t.max_ts) t.max_ts = stamp;
        if (stamp != -1 && stamp < t.min_ts) t.min_ts = stamp;
        if (rec.key_len < 0) t.keyless++;
        p = base + r.pos;
        i++;
    }
    if (problem == P_OK) {
        at = p - base; /* the end of the records, or where bytes are left after them */
        if (p != end) {
            problem = P_TRAILING;
            d.value = end - p;
        }
    }
    o->problem = problem;
    o->i = i;
    o->at = at;
    o->d = d;
    o->t = t;
}

/* check_records(buf, start, stop, count, base_timestamp, last_offset_delta, sequential)
 *     -> (problem, index, position, value, extra, max_timestamp, min_timestamp, keyless)
 *
 * One pass over the records of a v2 batch (buf[start:stop], uncompressed) against its header,
 * as Kafka's LogValidator iterates them, creating no Python object per record: every record's
 * framing (lengths, varints, key, value and header lengths, header count), the declared count
 * against the records there (no fewer, no bytes after the last), offset deltas (``sequential``:
 * 0, 1, ... as a producer writes them; else strictly increasing up to ``last_offset_delta``, as
 * compaction leaves them) and timestamps within int64.  ``problem`` is 0 or what is wrong (the P_
 * codes above; odradek.records.check names them), found at record ``index`` starting at byte
 * ``position`` of ``buf`` (without a problem: the end of the records), with its numbers
 * ``value`` and ``extra``; ``max_timestamp`` (-1 when no
 * record has a larger one, as Kafka starts from NO_TIMESTAMP) and ``min_timestamp`` (over records
 * whose timestamp is not -1; INT64_MAX when none) and ``keyless`` (records with a null key) sum up
 * the records read.  The GIL is released while it runs over large data. */
static PyObject *check_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "check_records(buf, start, stop, count, base_timestamp, last_offset_delta, sequential)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    long long count = PyLong_AsLongLong(args[3]);
    long long base_ts = PyLong_AsLongLong(args[4]);
    long long lod = PyLong_AsLongLong(args[5]);
    int sequential = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || sequential < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad range");
        return NULL;
    }
    span_check o;
    PyThreadState *ts_state = stop - start >= 65536 ? PyEval_SaveThread() : NULL;
    check_span((const uint8_t *)view.buf, start, stop, count, base_ts, lod, sequential, &o);
    if (ts_state != NULL) PyEval_RestoreThread(ts_state);
    PyBuffer_Release(&view);
    return Py_BuildValue("(iLnLLLLn)", o.problem, o.i, o.at, (long long)o.d.value, (long long)o.d.extra,
                         (long long)o.t.max_ts, (long long)o.t.min_ts, o.t.keyless);
}

/* CRC-32C (Castagnoli), as the crc32c package computes it: the SSE 4.2 instruction where the
 * processor has it, else a table. */
static uint32_t crc32c_table[8][256];

static void crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc32c_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc32c_table[0][c & 0xFF] ^ (c >> 8);
            crc32c_table[k][n] = c;
        }
    }
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc32c_table[7][lo & 0xFF] ^ crc32c_table[6][(lo >> 8) & 0xFF] ^ crc32c_table[5][(lo >> 16) & 0xFF] ^
              crc32c_table[4][lo >> 24] ^ crc32c_table[3][hi & 0xFF] ^ crc32c_table[2][(hi >> 8) & 0xFF] ^
              crc32c_table[1][(hi >> 16) & 0xFF] ^ crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc32c_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(ODRADEK_CRC32C_TABLE)
#define HAVE_CRC32C_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_raw(uint32_t crc, const uint8_t *p, size_t n) {
    /* the register as is (no inversion before or after): one dependency chain */
#if defined(__x86_64__)
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
#endif
    while (n >= 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        crc = __builtin_ia32_crc32si(crc, v);
        p += 4;
        n -= 4;
    }
    while (n--) crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}

#if defined(__x86_64__)
/* The instruction takes 3 cycles and can start one each cycle: three streams over adjacent
 * blocks run three times as fast as one.  The register is linear in the data once its start is
 * taken out: reg(s, A B) = shift(reg(s, A), |B|) ^ reg(0, B), where shift(c, n) is c times x^(8n)
 * modulo the polynomial (the register moved past n zero bytes).  crc32c_shift_block[k][b] is that
 * shift over CRC32C_BLOCK bytes of byte b at the k-th byte of the register. */
#define CRC32C_BLOCK 512
static uint32_t crc32c_shift_block[4][256];

/* a * b modulo the polynomial, bit-reflected (the lowest power in the top bit) */
static uint32_t crc32c_multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ 0x82F63B78u : b >> 1;
    }
    return p;
}

static void crc32c_shift_init(void) {
    uint32_t x8n = 1u << 31; /* x^0 */
    for (int i = 0; i < 8 * CRC32C_BLOCK; i++) x8n = crc32c_multmodp(x8n, 1u << 30); /* times x */
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) crc32c_shift_block[k][b] = crc32c_multmodp(x8n, b << (8 * k));
}

static inline uint32_t crc32c_shift(uint32_t c) {
    return crc32c_shift_block[0][c & 0xFF] ^ crc32c_shift_block[1][(c >> 8) & 0xFF] ^
           crc32c_shift_block[2][(c >> 16) & 0xFF] ^ crc32c_shift_block[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = ~crc;
    while (n >= 3 * CRC32C_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC32C_BLOCK;
        while (p < end) {
            uint64_t v0, v1, v2;
            memcpy(&v0, p, 8);
            memcpy(&v1, p + CRC32C_BLOCK, 8);
            memcpy(&v2, p + 2 * CRC32C_BLOCK, 8);
            c0 = __builtin_ia32_crc32di(c0, v0);
            c1 = __builtin_ia32_crc32di(c1, v1);
            c2 = __builtin_ia32_crc32di(c2, v2);
            p += 8;
        }
        c0 = crc32c_shift(crc32c_shift((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * CRC32C_BLOCK;
        n -= 3 * CRC32C_BLOCK;
    }
    return ~crc32c_hw_raw((uint32_t)c0, p, n);
}
#else
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    return ~crc32c_hw_raw(~crc, p, n);
}
#endif
#endif

static uint32_t (*crc32c_impl)(uint32_t, const uint8_t *, size_t) = crc32c_sw;

static void crc32c_choose(void) {
    crc32c_init();
#ifdef HAVE_CRC32C_HW
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
#if defined(__x86_64__)
        crc32c_shift_init();
#endif
        crc32c_impl = crc32c_hw;
    }
#endif
}

/* crc32c(data, crc=0) -> the CRC-32C of data, continuing crc (as crc32c.crc32c): for the tests. */
static PyObject *py_crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    unsigned long crc = 0;
    if (nargs == 2) {
        crc = PyLong_AsUnsignedLong(args[1]);
        if (crc == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t out = crc32c_impl((uint32_t)crc, (const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(out);
}

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v = v << 8 | p[k];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

/* check_produced(buf, max_size, refuse_keyless, create_time, now, before, after) -> int | None
 *
 * The produce fast path's whole check of ``buf`` when it is one uncompressed v2 batch (at
 * position 0, as long as ``buf``): the batch's max timestamp as Kafka's LogValidator sets it
 * (its records', ``create_time``; else the header's) when everything passes, None when anything
 * is off — then the general checks (odradek.storage.validator) find what and answer as Kafka
 * does.  Passing means: magic 2, the batch length, no codec, a record count > 0 that matches the
 * last offset delta, the size within ``max_size``, the CRC, check_records (sequential) without a
 * problem, no keyless record in a non-control batch when ``refuse_keyless``, and (CreateTime,
 * not a log-append-time batch) every record timestamp within [now - before, now + after], -1
 * aside (``before`` and ``after`` None: no limits).  validator._check_produced_python is the
 * same in Python. */
static PyObject *check_produced(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "check_produced(buf, max_size, refuse_keyless, create_time, now, before, after)");
        return NULL;
    }
    long long max_size = PyLong_AsLongLong(args[1]);
    int refuse_keyless = PyObject_IsTrue(args[2]);
    int create_time = PyObject_IsTrue(args[3]);
    long long now = PyLong_AsLongLong(args[4]);
    int limited = args[5] != Py_None; /* before and after are None: no limits */
    long long before = limited ? PyLong_AsLongLong(args[5]) : 0;
    long long after = limited ? PyLong_AsLongLong(args[6]) : 0;
    if (refuse_keyless < 0 || create_time < 0) return NULL;
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return NULL;
        PyErr_Clear(); /* beyond int64: the general checks (Python ints) decide */
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    int ok = 0;
    int64_t result = 0;
    if (n >= 61 && b[16] == 2 && (int64_t)be32(b + 8) + 12 == n) {
        uint32_t crc = (uint32_t)be32(b + 17);
        int attrs = (int)(int16_t)((uint16_t)b[21] << 8 | b[22]);
        int64_t lod = be32(b + 23), bts = be64(b + 27), mts = be64(b + 35), count = be32(b + 57);
        if (!(attrs & 0x07) && count > 0 && count == lod + 1 && n <= max_size) {
            PyThreadState *ts_state = n >= 65536 ? PyEval_SaveThread() : NULL;
            if (crc32c_impl(0, b + 21, (size_t)(n - 21)) == crc) {
                span_check o;
                check_span(b, 61, n, count, bts, lod, 1, &o);
                if (o.problem == P_OK && !(o.t.keyless && !(attrs & 0x20) && refuse_keyless)) {
                    if ((attrs & 0x08) || !create_time || !limited) {
                        ok = 1;
                        result = (attrs & 0x08) || !create_time ? mts : o.t.max_ts;
                    } else {
                        int64_t low, high;
                        if (__builtin_sub_overflow((int64_t)now, (int64_t)before, &low)) low = before > 0 ? INT64_MIN : INT64_MAX;
                        if (__builtin_add_overflow((int64_t)now, (int64_t)after, &high)) high = after > 0 ? INT64_MAX : INT64_MIN;
                        if ((o.t.min_ts == INT64_MAX || o.t.min_ts >= low) && o.t.max_ts <= high) {
                            ok = 1;
                            result = o.t.max_ts;
                        }
                    }
                }
            }
            if (ts_state != NULL) PyEval_RestoreThread(ts_state);
        }
    }
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    return PyLong_FromLongLong(result);
}

/* A growable-free Arrow binary column: int32 offsets, data, validity bitmap. */
typedef struct {
    PyObject *offsets, *data, *validity;
    int32_t *off;
    uint8_t *dat, *valid;
    Py_ssize_t nulls, at;
} binary_col;

/* A new output buffer of ``size`` bytes, its memory in ``*ptr``: ``alloc(size)`` when ``alloc``
 * is given (an object with a writable buffer whose memory stays put while it lives, such as
 * pyarrow.allocate_buffer's: memory from a pool that keeps it, so it is not page-faulted in
 * afresh for every decode, which cost more than the decoding itself), else a bytes object. */
static PyObject *new_out(PyObject *alloc, Py_ssize_t size, void *ptr) {
    if (alloc == NULL) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, size);
        if (b != NULL) *(void **)ptr = PyBytes_AS_STRING(b);
        return b;
    }
    PyObject *b = PyObject_CallFunction(alloc, "n", size);
    if (b == NULL) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(b, &v, PyBUF_WRITABLE) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    void *buf = v.buf;
    Py_ssize_t len = v.len;
    PyBuffer_Release(&v);
    if (len < size) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_ValueError, "alloc returned a buffer smaller than asked");
        return NULL;
    }
    *(void **)ptr = buf;
    return b;
}

static int binary_new(binary_col *c, PyObject *alloc, Py_ssize_t n, Py_ssize_t bytes, Py_ssize_t nulls) {
    memset(c, 0, sizeof(*c));
    if (bytes > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "column larger than 2 GiB");
        return -1;
    }
    c->offsets = new_out(alloc, 4 * (n + 1), &c->off);
    if (c->offsets == NULL) return -1;
    c->data = new_out(alloc, bytes, &c->dat);
    if (c->data == NULL) return -1;
    c->off[0] = 0;
    if (nulls) {
        c->validity = new_out(alloc, (n + 7) / 8, &c->valid);
        if (c->validity == NULL) return -1;
        memset(c->valid, 0, (n + 7) / 8);
    }
    c->nulls = nulls;
    return 0;
}

static inline void binary_put(binary_col *c, Py_ssize_t i, const uint8_t *p, int64_t len) {
    if (len >= 0) {
        memcpy(c->dat + c->at, p, (size_t)len);
        c->at += (Py_ssize_t)len;
        if (c->valid) c->valid[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    c->off[i + 1] = (int32_t)c->at;
}

static void binary_free(binary_col *c) {
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->data);
    Py_CLEAR(c->validity);
}

/* (offsets, data, validity or None, null count) */
static PyObject *binary_tuple(binary_col *c) {
    PyObject *validity = c->validity ? c->validity : Py_None;
    PyObject *t = Py_BuildValue("(OOOn)", c->offsets, c->data, validity, c->nulls);
    binary_free(c);
    return t;
}

typedef struct {
    Py_buffer view;
    int acquired;
    Py_ssize_t start, stop, count;
    long long base_offset, base_timestamp, log_append_time;
    int has_log_append_time;
} spec_t;

/* (buf, start, stop, count, base_offset, base_timestamp, log_append_time or None) */
static int get_spec(PyObject *t, spec_t *s) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 7) {
        PyErr_SetString(PyExc_TypeError, "a batch is (buf, start, stop, count, base_offset, base_timestamp, lat)");
        return -1;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(t, 0), &s->view, PyBUF_SIMPLE) < 0) return -1;
    s->acquired = 1;
    s->start = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
    s->stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
    s->count = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
    s->base_offset = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 4));
    s->base_timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 5));
    PyObject *lat = PyTuple_GET_ITEM(t, 6);
    s->has_log_append_time = lat != Py_None;
    s->log_append_time = s->has_log_append_time ? PyLong_AsLongLong(lat) : 0;
    if (PyErr_Occurred()) return -1;
    if (s->start < 0 || s->stop > s->view.len || s->start > s->stop || s->count < 0) {
        PyErr_SetString(PyExc_ValueError, "bad range or count");
        return -1;
    }
    return 0;
}

/* decode_columns(batches, with_headers[, alloc]) -> (n, offsets int64[n], timestamps_us int64[n], key, value, headers)
 *
 * The records of every batch in ``batches`` (see get_spec), in order, as one set of columns:
 * key, value: (offsets int32[n+1], data, validity bitmap or None, null count);
 * headers (None unless with_headers): (list offsets int32[n+1], list validity or None, list
 * null count, header count, header keys as key/value above, header values likewise).  A record
 * without headers has a null list, as the pure-Python decoder gives.  Without headers one pass
 * fills buffers sized by the batches' bytes (a bound on the keys and values they hold); with
 * them a first pass sizes everything exactly.  ``alloc`` (see new_out): where the buffers come
 * from; without it they are bytes objects, and a column's data is cut to the bytes it holds
 * (with it, the data buffer may be longer: the offsets say how much of it is used). */
static PyObject *decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_columns(batches: list, with_headers: bool[, alloc])");
        return NULL;
    }
    int with_headers = PyObject_IsTrue(args[1]);
    if (with_headers < 0) return NULL;
    PyObject *alloc = nargs == 3 && args[2] != Py_None ? args[2] : NULL;
    Py_ssize_t m = PyList_GET_SIZE(args[0]);
    spec_t *specs = PyMem_Calloc(m ? m : 1, sizeof(spec_t));
    if (specs == NULL) return PyErr_NoMemory();
    PyObject *offsets = NULL, *stamps = NULL, *result = NULL, *list_offsets = NULL, *list_validity = NULL;
    binary_col key, value, hkey, hval;
    memset(&key, 0, sizeof key);
    memset(&value, 0, sizeof value);
    memset(&hkey, 0, sizeof hkey);
    memset(&hval, 0, sizeof hval);
    Py_ssize_t n = 0, cap = 0;
    for (Py_ssize_t b = 0; b < m; b++) {
        if (get_spec(PyList_GET_ITEM(args[0], b), &specs[b]) < 0) goto done;
        n += specs[b].count;
        cap += specs[b].stop - specs[b].start;
    }
    Py_ssize_t key_bytes = cap, value_bytes = cap, key_nulls = 1, value_nulls = 1;
    Py_ssize_t headers = 0, hkey_bytes = 0, hval_bytes = 0, hval_nulls = 0, no_headers = 0;
    if (with_headers) { /* pass 1: check everything and size the columns exactly */
        key_bytes = value_bytes = key_nulls = value_nulls = 0;
        for (Py_ssize_t b = 0; b < m; b++) {
            reader r = {(const uint8_t *)specs[b].view.buf, specs[b].stop, specs[b].start};
            for (Py_ssize_t i = 0; i < specs[b].count; i++) {
                record rec;
                detail d;
                if (parse_record(&r, &rec, 1, &d) != P_OK) {
                    corrupt("corrupt record");
                    goto done;
                }
                if (rec.key_len >= 0) key_bytes += (Py_ssize_t)rec.key_len; else key_nulls++;
                if (rec.value_len >= 0) value_bytes += (Py_ssize_t)rec.value_len; else value_nulls++;
                headers += (Py_ssize_t)rec.header_count;
                if (rec.header_count == 0) no_headers++;
                hkey_bytes += rec.header_bytes[0];
                hval_bytes += rec.header_bytes[1];
                hval_nulls += (Py_ssize_t)rec.header_null_values;
            }
            if (r.pos != specs[b].stop) {
                corrupt("bytes left after the last record");
                goto done;
            }
        }
        if (headers > INT32_MAX) {
            corrupt("too many headers");
            goto done;
        }
    }
    int64_t *off = NULL, *ts = NULL;
    offsets = new_out(alloc, 8 * n, &off);
    if (offsets == NULL) goto done;
    stamps = new_out(alloc, 8 * n, &ts);
    if (stamps == NULL) goto done;
    if (binary_new(&key, alloc, n, key_bytes, key_nulls) < 0 || binary_new(&value, alloc, n, value_bytes, value_nulls) < 0)
        goto done;
    key.nulls = value.nulls = 0; /* counted while filling */
    int32_t *lo = NULL;
    uint8_t *lvalid = NULL;
    if (with_headers) {
        if (binary_new(&hkey, alloc, headers, hkey_bytes, 0) < 0 ||
            binary_new(&hval, alloc, headers, hval_bytes, hval_nulls) < 0)
            goto done;
        hval.nulls = 0;
        list_offsets = new_out(alloc, 4 * (n + 1), &lo);
        if (list_offsets == NULL) goto done;
        lo[0] = 0;
        if (no_headers) {
            list_validity = new_out(alloc, (n + 7) / 8, &lvalid);
            if (list_validity == NULL) goto done;
            memset(lvalid, 0, (n + 7) / 8);
        }
    }
    /* pass 2 (the only one without headers): fill the columns */
    Py_ssize_t i = 0, h_at = 0;
    for (Py_ssize_t b = 0; b < m; b++) {
        spec_t *sp = &specs[b];
        reader r = {(const uint8_t *)sp->view.buf, sp->stop, sp->start};
        int64_t prev_delta = -1;
        for (Py_ssize_t j = 0; j < sp->count; j++, i++) {
            record rec;
            detail d;
            if (parse_record(&r, &rec, 0, &d) != P_OK) { /* only possible without pass 1 */
                corrupt("corrupt record");
                goto done;
            }
            if (rec.offset_delta <= prev_delta) { /* offsets strictly increase within a batch */
                corrupt("record offsets do not increase");
                goto done;
            }
            prev_delta = rec.offset_delta;
            off[i] = (int64_t)((uint64_t)sp->base_offset + (uint64_t)rec.offset_delta);
            uint64_t ms = sp->has_log_append_time ? (uint64_t)sp->log_append_time
                                                  : (uint64_t)sp->base_timestamp + (uint64_t)rec.timestamp_delta;
            ts[i] = (int64_t)(ms * 1000u);
            binary_put(&key, i, r.p + rec.key_at, rec.key_len);
            binary_put(&value, i, r.p + rec.value_at, rec.value_len);
            if (rec.key_len < 0) key.nulls++;
            if (rec.value_len < 0) value.nulls++;
            if (with_headers) {
                reader hr = {r.p, r.pos, rec.headers_at};
                for (int64_t h = 0; h < rec.header_count; h++, h_at++) {
                    int64_t kl = 0, vl = -1;
                    read_varint(&hr, &kl);
                    binary_put(&hkey, h_at, hr.p + hr.pos, kl);
                    hr.pos += (Py_ssize_t)kl;
                    read_varint(&hr, &vl);
                    binary_put(&hval, h_at, hr.p + hr.pos, vl);
                    if (vl >= 0) hr.pos += (Py_ssize_t)vl; else hval.nulls++;
                }
                lo[i + 1] = (int32_t)h_at;
                if (lvalid && rec.header_count) lvalid[i >> 3] |= (uint8_t)(1u << (i & 7));
            }
        }
        if (r.pos != sp->stop) {
            corrupt("bytes left after the last record");
            goto done;
        }
    }
    PyObject *hdr = Py_None;
    Py_INCREF(hdr);
    if (with_headers) {
        PyObject *kt = binary_tuple(&hkey), *vt = binary_tuple(&hval);
        Py_DECREF(hdr);
        hdr = (kt && vt) ? Py_BuildValue("(OOnnOO)", list_offsets, list_validity ? list_validity : Py_None, no_headers,
                                         headers, kt, vt)
                         : NULL;
        Py_XDECREF(kt);
        Py_XDECREF(vt);
        if (hdr == NULL) goto done;
    }
    PyObject *t[2] = {NULL, NULL};
    binary_col *cols[2] = {&key, &value};
    for (int c = 0; c < 2; c++) {
        binary_col *col = cols[c];
        if (alloc == NULL && PyBytes_GET_SIZE(col->data) != col->at && _PyBytes_Resize(&col->data, col->at) < 0) break;
        if (col->nulls == 0) Py_CLEAR(col->validity);
        t[c] = binary_tuple(col);
        if (t[c] == NULL) break;
    }
    if (t[0] && t[1]) result = Py_BuildValue("(nOOOOO)", n, offsets, stamps, t[0], t[1], hdr);
    Py_XDECREF(t[0]);
    Py_XDECREF(t[1]);
    Py_DECREF(hdr);
done:
    binary_free(&key);
    binary_free(&value);
    binary_free(&hkey);
    binary_free(&hval);
    Py_XDECREF(offsets);
    Py_XDECREF(stamps);
    Py_XDECREF(list_offsets);
    Py_XDECREF(list_validity);
    for (Py_ssize_t b = 0; b < m; b++) {
        if (specs[b].acquired) PyBuffer_Release(&specs[b].view);
    }
    PyMem_Free(specs);
    return result;
}

static inline Py_ssize_t put_varlong(uint8_t *out, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 0;
    while (z >= 0x80) {
        out[n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (uint8_t)z;
    return n;
}

/* encode_record_body(timestamp_delta, offset_delta, key, value) -> bytes: a record without
 * headers and without its length prefix, as BatchBuilder stores it (attributes 0). */
static PyObject *encode_record_body(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_record_body(timestamp_delta, offset_delta, key, value)");
        return NULL;
    }
    long long tsd = PyLong_AsLongLong(args[0]);
    long long od = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (od < 0 || od > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "offset delta out of range");
        return NULL;
    }
    const char *kp = NULL, *vp = NULL;
    Py_ssize_t kl = -1, vl = -1;
    if (args[2] != Py_None) {
        if (!PyBytes_Check(args[2])) {
            PyErr_SetString(PyExc_TypeError, "key must be bytes or None");
            return NULL;
        }
        kp = PyBytes_AS_STRING(args[2]);
        kl = PyBytes_GET_SIZE(args[2]);
    }
    if (args[3] != Py_None) {
        if (!PyBytes_Check(args[3])) {
            PyErr_SetString(PyExc_TypeError, "value must be bytes or None");
            return NULL;
        }
        vp = PyBytes_AS_STRING(args[3]);
        vl = PyBytes_GET_SIZE(args[3]);
    }
    if (kl > INT32_MAX || vl > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "key or value larger than 2 GiB");
        return NULL;
    }
    uint8_t head[32];
    Py_ssize_t n = 0;
    head[n++] = 0; /* attributes */
    n += put_varlong(head + n, tsd);
    n += put_varlong(head + n, od);
    n += put_varlong(head + n, kl);
    uint8_t mid[8];
    Py_ssize_t m = put_varlong(mid, vl);
    Py_ssize_t total = n + (kl > 0 ? kl : 0) + m + (vl > 0 ? vl : 0) + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(o, head, (size_t)n);
    o += n;
    if (kl > 0) {
        memcpy(o, kp, (size_t)kl);
        o += kl;
    }
    memcpy(o, mid, (size_t)m);
    o += m;
    if (vl > 0) {
        memcpy(o, vp, (size_t)vl);
        o += vl;
    }
    *o = 0; /* no headers */
    return out;
}

/* ------------------------------------------------------------------------------------------
 * The producer's open batch (odradek.client.producer): records appended one at a time into one
 * growing buffer, in the v2 layout (length prefix, attributes, deltas, key, value, headers).
 *
 *   Pool(limit)                 the bytes buffered by all of a producer's batches (buffer.memory)
 *   Receipt(batch, index, timestamp, ksize, vsize)
 *                               what send() returns (the producer's FutureRecordMetadata is a
 *                               subclass); created here by try_append
 *   Appender(capacity, max_record, pool, batch, receipt_type)
 *       append(timestamp, key, value, headers, size) -> index
 *           any record (headers: the encoded headers section, or None); the caller decided the
 *           record belongs here (the producer does so under its lock)
 *       try_append(value) -> receipt or None
 *           send() with a value only, stamped now: appended unless the appender is closed, the
 *           record would fill the batch to ``capacity`` or the pool beyond its limit, or it is
 *           larger than ``max_record``; None means nothing happened and the caller takes its
 *           general path
 *       close(), records() -> bytes, release()
 *
 * Every method runs under the GIL from start to end without running Python code once it has
 * checked the state (the only allocation that can run a collection, the receipt's, comes
 * first), so try_append needs no lock: a close() in another thread happens before or after it.
 * ``size`` counts a record as the producer's accounting does (key + value + 32 bytes).
 */

typedef struct {
    PyObject_HEAD
    Py_ssize_t used;
    Py_ssize_t limit;
} PoolObject;

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Py_ssize_t limit;
    static char *kwlist[] = {"limit", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &limit)) return NULL;
    PoolObject *self = (PoolObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->used = 0;
    self->limit = limit;
    return (PyObject *)self;
}

static PyObject *pool_add(PoolObject *self, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    self->used += n;
    Py_RETURN_NONE;
}

static PyMethodDef pool_methods[] = {
    {"add", (PyCFunction)pool_add, METH_O, "add(n): n more bytes buffered (negative: released)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pool_members[] = {
    {"buffered", T_PYSSIZET, offsetof(PoolObject, used), READONLY, "bytes buffered now"},
    {"limit", T_PYSSIZET, offsetof(PoolObject, limit), READONLY, "buffer.memory"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.records._speedups.Pool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pool(limit): bytes buffered by a producer's batches",
    .tp_new = pool_new,
    .tp_methods = pool_methods,
    .tp_members = pool_members,
};

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
    long long timestamp;
    Py_ssize_t ksize;
    Py_ssize_t vsize;
} ReceiptObject;

static PyObject *receipt_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *batch;
    Py_ssize_t index, ksize, vsize;
    long long timestamp;
    static char *kwlist[] = {"batch", "index", "timestamp", "ksize", "vsize", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnLnn", kwlist, &batch, &index, &timestamp, &ksize, &vsize))
        return NULL;
    ReceiptObject *self = (ReceiptObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(batch);
    self->batch = batch;
    self->index = index;
    self->timestamp = timestamp;
    self->ksize = ksize;
    self->vsize = vsize;
    return (PyObject *)self;
}

static int receipt_traverse(ReceiptObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->batch);
    return 0;
}

static int receipt_clear(ReceiptObject *self) {
    Py_CLEAR(self->batch);
    return 0;
}

/* a subclass's instances come here from subtype_dealloc, which untracks them before and
 * releases their (heap) type after */
static void receipt_dealloc(ReceiptObject *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef receipt_members[] = {
    {"_batch", T_OBJECT, offsetof(ReceiptObject, batch), READONLY, NULL},
    {"_index", T_PYSSIZET, offsetof(ReceiptObject, index), READONLY, NULL},
    {"_timestamp", T_LONGLONG, offsetof(ReceiptObject, timestamp), READONLY, NULL},
    {"_ksize", T_PYSSIZET, offsetof(ReceiptObject, ksize), READONLY, NULL},
    {"_vsize", T_PYSSIZET, offsetof(ReceiptObject, vsize), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ReceiptType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.records._speedups.Receipt",
    .tp_basicsize = sizeof(ReceiptObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Receipt(batch, index, timestamp, ksize, vsize): one appended record",
    .tp_new = receipt_new,
    .tp_traverse = (traverseproc)receipt_traverse,
    .tp_clear = (inquiry)receipt_clear,
    .tp_dealloc = (destructor)receipt_dealloc,
    .tp_members = receipt_members,
};

typedef struct {
    PyObject_HEAD
    uint8_t *buf;
    Py_ssize_t len, cap;
    Py_ssize_t count;          /* records appended */
    Py_ssize_t size;           /* their accounted size */
    Py_ssize_t capacity;       /* batch.size */
    Py_ssize_t max_record;     /* max.request.size */
    long long first_ts, max_ts;
    int closed;
    PoolObject *pool;
    PyObject *batch;
    PyTypeObject *receipt_type;
} AppenderObject;

static PyObject *appender_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Py_ssize_t capacity, max_record;
    PyObject *pool, *batch, *rtype;
    static char *kwlist[] = {"capacity", "max_record", "pool", "batch", "receipt_type", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nnO!OO!", kwlist, &capacity, &max_record, &PoolType, &pool,
                                     &batch, &PyType_Type, &rtype))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)rtype, &ReceiptType)) {
        PyErr_SetString(PyExc_TypeError, "receipt_type must be a subclass of Receipt");
        return NULL;
    }
    AppenderObject *self = (AppenderObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->capacity = capacity;
    self->max_record = max_record;
    self->max_ts = -1;
    Py_INCREF(pool);
    self->pool = (PoolObject *)pool;
    Py_INCREF(batch);
    self->batch = batch;
    Py_INCREF(rtype);
    self->receipt_type = (PyTypeObject *)rtype;
    return (PyObject *)self;
}

static int appender_traverse(AppenderObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->pool);
    Py_VISIT(self->batch);
    Py_VISIT(self->receipt_type);
    return 0;
}

static int appender_clear(AppenderObject *self) {
    Py_CLEAR(self->pool);
    Py_CLEAR(self->batch);
    Py_CLEAR(self->receipt_type);
    return 0;
}

static void appender_dealloc(AppenderObject *self) {
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    PyMem_Free(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline Py_ssize_t varlong_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

/* Append one record (the state was checked): 0, or -1 with MemoryError set. */
static int appender_put(AppenderObject *self, long long ts, const char *kp, Py_ssize_t kl, const char *vp,
                        Py_ssize_t vl, const char *hp, Py_ssize_t hl, Py_ssize_t size) {
    if (self->count == 0) self->first_ts = ts;
    int64_t tsd = (int64_t)ts - (int64_t)self->first_ts;
    int64_t od = (int64_t)self->count;
    Py_ssize_t body = 1 + varlong_size(tsd) + varlong_size(od) + varlong_size(kl) + (kl > 0 ? kl : 0) +
                      varlong_size(vl) + (vl > 0 ? vl : 0) + (hp != NULL ? hl : 1);
    Py_ssize_t need = self->len + varlong_size(body) + body;
    if (need > self->cap) {
        Py_ssize_t cap = self->cap ? self->cap : 4096;
        while (cap < need) cap = cap < PY_SSIZE_T_MAX / 2 ? cap * 2 : need;
        uint8_t *nb = PyMem_Realloc(self->buf, (size_t)cap);
        if (nb == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->buf = nb;
        self->cap = cap;
    }
    uint8_t *o = self->buf + self->len;
    o += put_varlong(o, body);
    *o++ = 0; /* attributes */
    o += put_varlong(o, tsd);
    o += put_varlong(o, od);
    o += put_varlong(o, kl);
    if (kl > 0) {
        memcpy(o, kp, (size_t)kl);
        o += kl;
    }
    o += put_varlong(o, vl);
    if (vl > 0) {
        memcpy(o, vp, (size_t)vl);
        o += vl;
    }
    if (hp != NULL) {
        memcpy(o, hp, (size_t)hl);
        o += hl;
    } else {
        *o++ = 0;
    }
    self->len = o - self->buf;
    self->count++;
    if (ts > self->max_ts) self->max_ts = ts;
    self->size += size;
    self->pool->used += size;
    return 0;
}

static int bytes_arg(PyObject *o, const char *what, const char **p, Py_ssize_t *n) {
    if (o == Py_None) {
        *p = NULL;
        *n = -1;
        return 0;
    }
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None", what);
        return -1;
    }
    *p = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    if (*n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s larger than 2 GiB", what);
        return -1;
    }
    return 0;
}

static PyObject *appender_append(AppenderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "append(timestamp, key, value, headers, size)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[4]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    const char *kp, *vp, *hp;
    Py_ssize_t kl, vl, hl;
    if (bytes_arg(args[1], "key", &kp, &kl) < 0 || bytes_arg(args[2], "value", &vp, &vl) < 0 ||
        bytes_arg(args[3], "headers", &hp, &hl) < 0)
        return NULL;
    if (self->closed) {
        PyErr_SetString(PyExc_ValueError, "the batch is closed");
        return NULL;
    }
    if (self->count >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the batch is full");
        return NULL;
    }
    Py_ssize_t index = self->count;
    if (appender_put(self, ts, kp, kl, vp, vl, hp, hl, size) < 0) return NULL;
    return PyLong_FromSsize_t(index);
}

static PyObject *appender_try_append(AppenderObject *self, PyObject *value) {
    if (!PyBytes_CheckExact(value)) Py_RETURN_NONE;
    /* the one allocation that may run a collection (and so other threads) comes first */
    ReceiptObject *r = (ReceiptObject *)self->receipt_type->tp_alloc(self->receipt_type, 0);
    if (r == NULL) return NULL;
    Py_ssize_t vl = PyBytes_GET_SIZE(value);
    Py_ssize_t size = vl + 32;
    if (self->closed || self->batch == NULL || self->size + size >= self->capacity ||
        self->pool->used + size > self->pool->limit || vl + 72 > self->max_record || self->count >= INT32_MAX) {
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ts = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    Py_ssize_t index = self->count;
    if (appender_put(self, ts, NULL, -1, PyBytes_AS_STRING(value), vl, NULL, 0, size) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    Py_INCREF(self->batch);
    r->batch = self->batch;
    r->index = index;
    r->timestamp = ts;
    r->ksize = -1;
    r->vsize = vl;
    return (PyObject *)r;
}

static PyObject *appender_close(AppenderObject *self, PyObject *Py_UNUSED(ignored)) {
    self->closed = 1;
    Py_RETURN_NONE;
}

static PyObject *appender_records(AppenderObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyBytes_FromStringAndSize((const char *)self->buf, self->len);
}

static PyObject *appender_release(AppenderObject *self, PyObject *Py_UNUSED(ignored)) {
    self->closed = 1;
    PyMem_Free(self->buf);
    self->buf = NULL;
    self->len = self->cap = 0;
    Py_CLEAR(self->batch);
    Py_RETURN_NONE;
}

static PyObject *appender_get_closed(AppenderObject *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->closed);
}

static PyObject *appender_get_first(AppenderObject *self, void *Py_UNUSED(closure)) {
    if (self->count == 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->first_ts);
}

static PyMethodDef appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))appender_append, METH_FASTCALL,
     "append(timestamp, key, value, headers, size) -> the record's index"},
    {"try_append", (PyCFunction)appender_try_append, METH_O,
     "try_append(value) -> a receipt, or None when the general path must append it"},
    {"close", (PyCFunction)appender_close, METH_NOARGS, "no more records"},
    {"records", (PyCFunction)appender_records, METH_NOARGS, "the records section (length-prefixed records)"},
    {"release", (PyCFunction)appender_release, METH_NOARGS, "close and free the records (the batch was built)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef appender_members[] = {
    {"record_count", T_PYSSIZET, offsetof(AppenderObject, count), READONLY, "records appended"},
    {"size", T_PYSSIZET, offsetof(AppenderObject, size), READONLY, "their accounted size"},
    {"max_timestamp", T_LONGLONG, offsetof(AppenderObject, max_ts), READONLY, "-1 when empty"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef appender_getset[] = {
    {"closed", (getter)appender_get_closed, NULL, "whether it takes no more records", NULL},
    {"first_timestamp", (getter)appender_get_first, NULL, "the first record's timestamp (None when empty)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject AppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.records._speedups.Appender",
    .tp_basicsize = sizeof(AppenderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Appender(capacity, max_record, pool, batch, receipt_type): a producer's open batch",
    .tp_new = appender_new,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_clear = (inquiry)appender_clear,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_methods = appender_methods,
    .tp_members = appender_members,
    .tp_getset = appender_getset,
};

static PyMethodDef methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(buf, start, stop, count, base_offset, base_timestamp, log_append_time, record_type)"},
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL,
     "check_records(buf, start, stop, count, base_timestamp, last_offset_delta, sequential) -> (problem, index, "
     "position, value, extra, max_timestamp, min_timestamp, keyless)"},
    {"check_produced", (PyCFunction)(void (*)(void))check_produced, METH_FASTCALL,
     "check_produced(buf, max_size, refuse_keyless, create_time, now, before, after) -> the max timestamp of a "
     "produced batch that passes every check, or None"},
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL, "crc32c(data, crc=0) -> CRC-32C"},
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_FASTCALL,
     "decode_columns(batches, with_headers[, alloc]): batches are (buf, start, stop, count, base_offset, base_timestamp, lat)"},
    {"encode_record_body", (PyCFunction)(void (*)(void))encode_record_body, METH_FASTCALL,
     "encode_record_body(timestamp_delta, offset_delta, key, value) -> a record body without headers"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "odradek.records._speedups", "Compiled decoding of v2 records.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc32c_choose();
    if (PyType_Ready(&PoolType) < 0 || PyType_Ready(&ReceiptType) < 0 || PyType_Ready(&AppenderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Pool", (PyObject *)&PoolType) < 0 ||
        PyModule_AddObjectRef(m, "Receipt", (PyObject *)&ReceiptType) < 0 ||
        PyModule_AddObjectRef(m, "Appender", (PyObject *)&AppenderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
