/* Compiled twin of gengroup.protocol.records._decode_records_py.
 *
 * Theory of operation: decode_records(buf, pos, end, count, base_offset,
 * base_timestamp) walks the records of one uncompressed RecordBatch v2 body,
 * buf[pos:end], and returns the same list of Record objects the pure-Python
 * loop returns, or raises the same CorruptRecordError (the messages differ).
 *
 * Every read is bounded: a record must lie inside [pos, end) (end itself is
 * clamped to len(buf)), and every field of a record must lie inside the
 * record's declared length. The pure-Python loop may read a little further
 * before it notices the inconsistency, but both reject exactly the same
 * inputs: a batch is accepted only if each record ends where its length says
 * and the last record ends at `end`, which puts every read inside those
 * bounds. Varints follow the Python rules: at most 5 bytes for a varint, 10
 * for a varlong, and no bits beyond 32 or 64.
 *
 * Record objects are built without calling the dataclass's __init__ (which
 * only stores its arguments): configure() looks up the slot offsets of the
 * Record class once, and each record is allocated with tp_alloc and its five
 * slots filled in. Offsets and timestamps that overflow a C int64 fall back
 * to Python integer arithmetic, as the pure-Python loop computes them.
 *
 * Each record is untracked from the cyclic garbage collector once built: a
 * Record is frozen and its fields are integers, bytes, None and a tuple of
 * headers built before it, so it cannot be part of a reference cycle, and
 * leaving it tracked made every collection traverse every record still
 * buffered or in use.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define N_FIELDS 5

static PyObject *record_type = NULL; /* the Record dataclass */
static PyObject *corrupt_error = NULL; /* CorruptRecordError */
static Py_ssize_t slot_offsets[N_FIELDS]; /* offset, timestamp, key, value, headers */
static int use_slots = 0;

static const char *const field_names[N_FIELDS] = {
    "offset", "timestamp", "key", "value", "headers"};

static PyObject *
corrupt(const char *fmt, Py_ssize_t at)
{
    PyErr_Format(corrupt_error, fmt, at);
    return NULL;
}

/* Read an unsigned LEB128 varint of at most max_bytes bytes from
 * buf[*pos:limit]; 0 on success, -1 (with CorruptRecordError set) on error. */
static int
read_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
            uint64_t *out)
{
    Py_ssize_t p = *pos;
    unsigned char b;
    if (p < limit && (b = buf[p]) < 0x80) { /* fast path: one byte */
        *out = b;
        *pos = p + 1;
        return 0;
    }
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p + i >= limit) {
            corrupt("varint at byte %zd runs past the end of its record", p);
            return -1;
        }
        b = buf[p + i];
        uint64_t bits = (uint64_t)(b & 0x7F);
        if (b < 0x80) {
            if (max_bytes == 5 ? (i == 4 && bits > 0x0F) : (i == 9 && bits > 0x01)) {
                corrupt("varint at byte %zd overflows", p);
                return -1;
            }
            *out = result | (bits << shift);
            *pos = p + i + 1;
            return 0;
        }
        result |= bits << shift;
        shift += 7;
    }
    PyErr_Format(corrupt_error, "varint at byte %zd is longer than %d bytes", p, max_bytes);
    return -1;
}

static inline int64_t
zigzag(uint64_t raw)
{
    return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
}

/* base + delta as a Python int, exact even beyond int64. */
static PyObject *
add_exact(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = a ? PyLong_FromLongLong(delta) : NULL;
    PyObject *r = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* A nullable byte string: raw 1 (= -1) is None, other odd values are errors. */
static PyObject *
read_bytes(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, const char *what)
{
    uint64_t raw;
    if (read_varint(buf, pos, limit, 5, &raw) < 0) {
        return NULL;
    }
    if (raw & 1) {
        if (raw != 1) {
            PyErr_Format(corrupt_error, "negative %s length at byte %zd", what, *pos);
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_ssize_t n = (Py_ssize_t)(raw >> 1);
    if (n > limit - *pos) {
        PyErr_Format(corrupt_error, "%s at byte %zd overruns its record", what, *pos);
        return NULL;
    }
    PyObject *r = PyBytes_FromStringAndSize((const char *)buf + *pos, n);
    *pos += n;
    return r;
}

static PyObject *
read_headers(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t record_end)
{
    uint64_t raw;
    if (read_varint(buf, pos, record_end, 5, &raw) < 0) {
        return NULL;
    }
    if (raw & 1) {
        return corrupt("negative header count at byte %zd", *pos);
    }
    Py_ssize_t count = (Py_ssize_t)(raw >> 1);
    if (count > (record_end - *pos) / 2) {
        return corrupt("too many headers for the record at byte %zd", *pos);
    }
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (read_varint(buf, pos, record_end, 5, &raw) < 0) {
            goto error;
        }
        if (raw & 1) {
            corrupt("null or negative header key length at byte %zd", *pos);
            goto error;
        }
        Py_ssize_t n = (Py_ssize_t)(raw >> 1);
        if (n > record_end - *pos) {
            corrupt("header key at byte %zd overruns its record", *pos);
            goto error;
        }
        /* Bytes that are not UTF-8 become U+FFFD, as Java's new String(bytes, UTF_8)
           reads them: Kafka does not check header names. */
        PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + *pos, n, "replace");
        if (name == NULL) {
            goto error;
        }
        *pos += n;
        PyObject *value = read_bytes(buf, pos, record_end, "header value");
        if (value == NULL) {
            Py_DECREF(name);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
error:
    Py_DECREF(headers);
    return NULL;
}

/* A Record holding the five new references in fields (stolen, even on error). */
static PyObject *
new_record(PyObject **fields)
{
    PyObject *rec;
    if (use_slots) {
        PyTypeObject *tp = (PyTypeObject *)record_type;
        rec = tp->tp_alloc(tp, 0);
        if (rec != NULL) {
            for (int k = 0; k < N_FIELDS; k++) {
                *(PyObject **)((char *)rec + slot_offsets[k]) = fields[k];
            }
            if (PyObject_IS_GC(rec)) {
                PyObject_GC_UnTrack(rec);
            }
            return rec;
        }
    }
    else {
        rec = PyObject_Vectorcall(record_type, fields, N_FIELDS, NULL);
    }
    for (int k = 0; k < N_FIELDS; k++) {
        Py_DECREF(fields[k]);
    }
    return rec;
}

static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, count;
    long long base_offset, base_timestamp;
    (void)self;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*nnnLL", &view, &pos, &end, &count, &base_offset,
                          &base_timestamp)) {
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *records = NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "pos must not be negative");
        goto done;
    }
    if (end - pos < 0 || count > (end - pos) / 7) {
        corrupt("the records cannot fit in the batch ending at byte %zd", end);
        goto done;
    }
    if (count < 0) {
        count = 0;
    }
    Py_ssize_t limit = end < view.len ? end : view.len;
    records = PyList_New(count);
    if (records == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t raw;
        if (read_varint(buf, &pos, limit, 5, &raw) < 0) {
            goto error;
        }
        if (raw & 1) {
            corrupt("negative record length at byte %zd", pos);
            goto error;
        }
        Py_ssize_t length = (Py_ssize_t)(raw >> 1);
        if (length > limit - pos || length < 1) {
            corrupt("record at byte %zd overruns its batch", pos);
            goto error;
        }
        Py_ssize_t record_end = pos + length;
        pos += 1; /* attributes: int8, unused in v2 */
        if (read_varint(buf, &pos, record_end, 10, &raw) < 0) {
            goto error;
        }
        int64_t timestamp_delta = zigzag(raw);
        if (read_varint(buf, &pos, record_end, 5, &raw) < 0) {
            goto error;
        }
        int64_t offset_delta = zigzag(raw);
        PyObject *fields[N_FIELDS] = {NULL, NULL, NULL, NULL, NULL};
        fields[2] = read_bytes(buf, &pos, record_end, "key");
        if (fields[2] == NULL) {
            goto error;
        }
        fields[3] = read_bytes(buf, &pos, record_end, "value");
        if (fields[3] == NULL) {
            Py_DECREF(fields[2]);
            goto error;
        }
        if (pos < record_end && buf[pos] == 0) {
            pos += 1;
            fields[4] = PyTuple_New(0);
        }
        else {
            fields[4] = read_headers(buf, &pos, record_end);
        }
        if (fields[4] != NULL && pos != record_end) {
            Py_CLEAR(fields[4]);
            PyErr_Format(corrupt_error, "record ends at byte %zd, its length says %zd", pos,
                         record_end);
        }
        if (fields[4] != NULL) {
            fields[0] = add_exact(base_offset, offset_delta);
            if (fields[0] != NULL) {
                fields[1] = add_exact(base_timestamp, timestamp_delta);
            }
        }
        if (fields[1] == NULL) {
            for (int k = 0; k < N_FIELDS; k++) {
                Py_XDECREF(fields[k]);
            }
            goto error;
        }
        PyObject *rec = new_record(fields);
        if (rec == NULL) {
            goto error;
        }
        PyList_SET_ITEM(records, i, rec);
    }
    if (pos != end) {
        PyErr_Format(corrupt_error, "records end at byte %zd, the batch ends at byte %zd", pos,
                     end);
        goto error;
    }
    goto done;
error:
    Py_CLEAR(records);
done:
    PyBuffer_Release(&view);
    return records;
}

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *rtype, *error;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &rtype, &PyType_Type, &error)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)error, (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "the error type must be an Exception subclass");
        return NULL;
    }
    /* Use direct slot stores only if all five fields are plain object slots
     * of this very class, and nothing but the slots is stored. */
    PyTypeObject *tp = (PyTypeObject *)rtype;
    int slots = tp->tp_itemsize == 0 && tp->tp_dictoffset == 0 &&
                tp->tp_alloc == PyType_GenericAlloc;
    for (int k = 0; k < N_FIELDS && slots; k++) {
        PyObject *descr = PyDict_GetItemString(tp->tp_dict, field_names[k]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            slots = 0;
            break;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || member->flags != 0) {
            slots = 0;
            break;
        }
        slot_offsets[k] = member->offset;
    }
    Py_INCREF(rtype);
    Py_XSETREF(record_type, rtype);
    Py_INCREF(error);
    Py_XSETREF(corrupt_error, error);
    use_slots = slots;
    return PyBool_FromLong(slots);
}

/* ------------------------------------------------------------------ columns
 *
 * arrow_columns(segments) walks the records of one or more uncompressed
 * batch bodies and fills Arrow column buffers directly, without a Python
 * object per record. Each segment is a tuple
 *   (buf, pos, end, count, base_offset, base_timestamp, attributes,
 *    max_timestamp, min_offset)
 * with the meaning of decode_records' arguments plus what _records_of
 * applies after the loop: attributes bit 3 (log-append time: every
 * timestamp is max_timestamp), bit 5 (control: every key must be at least
 * 4 bytes) and min_offset (records below it are checked but not kept).
 *
 * The reads are bounded exactly as in decode_records, so the same inputs are
 * rejected, plus one rule of its own: an offset or timestamp outside int64
 * (which the Record path keeps as a Python int) cannot be stored in an Arrow
 * int64 column and is rejected too (arrow.py applies the same rule to the
 * Record path's output). A header key that is not strict UTF-8 as Python's
 * decoder reads it (overlong forms, surrogates, anything above U+10FFFF) is
 * stored as decode_records makes it: decoded with U+FFFD replacing the bad
 * bytes, then encoded back to UTF-8 (Arrow strings must be valid UTF-8).
 *
 * The result is a tuple of bytes objects holding the Arrow buffers (int64
 * values, int32 offsets starting at 0, LSB-first validity bitmaps, or None
 * for a column without nulls) and the counts needed to wrap them, in the
 * order arrow.py unpacks them. Each growable buffer is a bytes object grown
 * by doubling and cut to its final size at the end.
 */

typedef struct {
    PyObject *obj; /* a bytes object, NULL once given away or on error */
    char *p;
    Py_ssize_t len, cap;
} growbuf;

static int
gb_init(growbuf *g, Py_ssize_t cap)
{
    if (cap < 16) {
        cap = 16;
    }
    g->obj = PyBytes_FromStringAndSize(NULL, cap);
    if (g->obj == NULL) {
        return -1;
    }
    g->p = PyBytes_AS_STRING(g->obj);
    g->len = 0;
    g->cap = cap;
    return 0;
}

static int
gb_grow(growbuf *g, Py_ssize_t extra)
{
    Py_ssize_t cap = g->cap;
    while (cap - g->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    if (_PyBytes_Resize(&g->obj, cap) < 0) {
        return -1; /* g->obj is NULL now */
    }
    g->p = PyBytes_AS_STRING(g->obj);
    g->cap = cap;
    return 0;
}

static inline int
gb_reserve(growbuf *g, Py_ssize_t extra)
{
    return (g->cap - g->len >= extra) ? 0 : gb_grow(g, extra);
}

static inline int
gb_i32(growbuf *g, Py_ssize_t value)
{
    if (gb_reserve(g, 4) < 0) {
        return -1;
    }
    int32_t v = (int32_t)value;
    memcpy(g->p + g->len, &v, 4);
    g->len += 4;
    return 0;
}

static inline int
gb_i64(growbuf *g, int64_t v)
{
    if (gb_reserve(g, 8) < 0) {
        return -1;
    }
    memcpy(g->p + g->len, &v, 8);
    g->len += 8;
    return 0;
}

/* Set or clear validity bit `index` (bits are appended in order). */
static inline int
gb_bit(growbuf *g, Py_ssize_t index, int valid)
{
    if ((index & 7) == 0) {
        if (gb_reserve(g, 1) < 0) {
            return -1;
        }
        g->p[g->len++] = 0;
    }
    if (valid) {
        g->p[index >> 3] |= (char)(1 << (index & 7));
    }
    return 0;
}

/* The bytes object cut to its length (a new reference), or NULL. */
static PyObject *
gb_finish(growbuf *g)
{
    if (g->len != g->cap && _PyBytes_Resize(&g->obj, g->len) < 0) {
        return NULL;
    }
    PyObject *r = g->obj;
    g->obj = NULL;
    return r;
}

/* A variable-size column: int32 offsets, data, validity bitmap. */
typedef struct {
    growbuf offsets, data, valid;
    Py_ssize_t nulls;
} varcol;

static int
vc_init(varcol *c, Py_ssize_t rows, Py_ssize_t data_cap)
{
    c->nulls = 0;
    if (gb_init(&c->offsets, 4 * (rows + 1)) < 0 || gb_init(&c->data, data_cap) < 0 ||
        gb_init(&c->valid, rows / 8 + 1) < 0) {
        return -1;
    }
    return gb_i32(&c->offsets, 0);
}

static void
vc_clear(varcol *c)
{
    Py_CLEAR(c->offsets.obj);
    Py_CLEAR(c->data.obj);
    Py_CLEAR(c->valid.obj);
}

/* Append value `index` of the column: n bytes at src, or null if n < 0. */
static int
vc_append(varcol *c, Py_ssize_t index, const unsigned char *src, Py_ssize_t n)
{
    if (gb_bit(&c->valid, index, n >= 0) < 0) {
        return -1;
    }
    if (n < 0) {
        c->nulls++;
    }
    else {
        if (n > (Py_ssize_t)INT32_MAX - c->data.len) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of data in one Arrow column");
            return -1;
        }
        if (gb_reserve(&c->data, n) < 0) {
            return -1;
        }
        memcpy(c->data.p + c->data.len, src, (size_t)n);
        c->data.len += n;
    }
    return gb_i32(&c->offsets, c->data.len);
}

/* Whether buf[0:n] is strict UTF-8 as Python decodes it. */
static int
valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) {
                lo = 0xA0;
            }
            else if (c == 0xED) {
                hi = 0x9F;
            }
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) {
                lo = 0x90;
            }
            else if (c == 0xF4) {
                hi = 0x8F;
            }
        }
        else {
            return 0;
        }
        if (more > n - i - 1) {
            return 0;
        }
        if (s[i + 1] < lo || s[i + 1] > hi) {
            return 0;
        }
        for (int k = 2; k <= more; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return 0;
            }
        }
        i += more + 1;
    }
    return 1;
}

/* Append a header key as decode_records reads it: its bytes when they are
   UTF-8 (the common case, no Python object), else the UTF-8 of the text with
   U+FFFD for the bytes that are not. */
static int
append_header_key(varcol *c, Py_ssize_t row, const unsigned char *s, Py_ssize_t n)
{
    if (valid_utf8(s, n)) {
        return vc_append(c, row, s, n);
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "replace");
    if (text == NULL) {
        return -1;
    }
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
    int rc = utf8 == NULL ? -1 : vc_append(c, row, (const unsigned char *)utf8, size);
    Py_DECREF(text);
    return rc;
}

typedef struct {
    growbuf offsets, timestamps, header_offsets;
    varcol keys, values, header_keys, header_values;
    Py_ssize_t rows, headers;
} columns;

/* A nullable byte string inside the record: *n is -1 for null. Returns 0, or
 * -1 with a CorruptRecordError set. */
static int
take_bytes(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, const char *what,
           Py_ssize_t *start, Py_ssize_t *n)
{
    uint64_t raw;
    if (read_varint(buf, pos, limit, 5, &raw) < 0) {
        return -1;
    }
    if (raw & 1) {
        if (raw != 1) {
            PyErr_Format(corrupt_error, "negative %s length at byte %zd", what, *pos);
            return -1;
        }
        *n = -1;
        return 0;
    }
    Py_ssize_t len = (Py_ssize_t)(raw >> 1);
    if (len > limit - *pos) {
        PyErr_Format(corrupt_error, "%s at byte %zd overruns its record", what, *pos);
        return -1;
    }
    *start = *pos;
    *n = len;
    *pos += len;
    return 0;
}

/* Decode one segment's records into the columns; 0, or -1 with an error set. */
static int
fill_segment(columns *c, const unsigned char *buf, Py_ssize_t buf_len, Py_ssize_t pos,
             Py_ssize_t end, Py_ssize_t count, int64_t base_offset, int64_t base_timestamp,
             long attributes, int64_t max_timestamp, int64_t min_offset)
{
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "pos must not be negative");
        return -1;
    }
    if (end - pos < 0 || count > (end - pos) / 7) {
        corrupt("the records cannot fit in the batch ending at byte %zd", end);
        return -1;
    }
    Py_ssize_t limit = end < buf_len ? end : buf_len;
    int log_append = (attributes & 0x08) != 0;
    int control = (attributes & 0x20) != 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t raw;
        if (read_varint(buf, &pos, limit, 5, &raw) < 0) {
            return -1;
        }
        if (raw & 1) {
            corrupt("negative record length at byte %zd", pos);
            return -1;
        }
        Py_ssize_t length = (Py_ssize_t)(raw >> 1);
        if (length > limit - pos || length < 1) {
            corrupt("record at byte %zd overruns its batch", pos);
            return -1;
        }
        Py_ssize_t record_end = pos + length;
        pos += 1; /* attributes */
        if (read_varint(buf, &pos, record_end, 10, &raw) < 0) {
            return -1;
        }
        int64_t timestamp_delta = zigzag(raw);
        if (read_varint(buf, &pos, record_end, 5, &raw) < 0) {
            return -1;
        }
        int64_t offset, timestamp;
        if (__builtin_add_overflow(base_offset, zigzag(raw), &offset)) {
            corrupt("record offset at byte %zd does not fit in 64 bits", pos);
            return -1;
        }
        if (log_append) {
            timestamp = max_timestamp;
        }
        else if (__builtin_add_overflow(base_timestamp, timestamp_delta, &timestamp)) {
            corrupt("record timestamp at byte %zd does not fit in 64 bits", pos);
            return -1;
        }
        int keep = offset >= min_offset;
        Py_ssize_t key_at = 0, key_n, value_at = 0, value_n;
        if (take_bytes(buf, &pos, record_end, "key", &key_at, &key_n) < 0 ||
            take_bytes(buf, &pos, record_end, "value", &value_at, &value_n) < 0) {
            return -1;
        }
        if (pos < record_end && buf[pos] == 0) {
            pos += 1;
        }
        else {
            if (read_varint(buf, &pos, record_end, 5, &raw) < 0) {
                return -1;
            }
            if (raw & 1) {
                corrupt("negative header count at byte %zd", pos);
                return -1;
            }
            Py_ssize_t n_headers = (Py_ssize_t)(raw >> 1);
            if (n_headers > (record_end - pos) / 2) {
                corrupt("too many headers for the record at byte %zd", pos);
                return -1;
            }
            for (Py_ssize_t k = 0; k < n_headers; k++) {
                if (read_varint(buf, &pos, record_end, 5, &raw) < 0) {
                    return -1;
                }
                if (raw & 1) {
                    corrupt("null or negative header key length at byte %zd", pos);
                    return -1;
                }
                Py_ssize_t n = (Py_ssize_t)(raw >> 1);
                if (n > record_end - pos) {
                    corrupt("header key at byte %zd overruns its record", pos);
                    return -1;
                }
                Py_ssize_t name_at = pos;
                pos += n;
                Py_ssize_t hv_at = 0, hv_n;
                if (take_bytes(buf, &pos, record_end, "header value", &hv_at, &hv_n) < 0) {
                    return -1;
                }
                if (keep) {
                    if (append_header_key(&c->header_keys, c->headers, buf + name_at, n) < 0 ||
                        vc_append(&c->header_values, c->headers, buf + hv_at, hv_n) < 0) {
                        return -1;
                    }
                    c->headers++;
                }
            }
        }
        if (pos != record_end) {
            PyErr_Format(corrupt_error, "record ends at byte %zd, its length says %zd", pos,
                         record_end);
            return -1;
        }
        if (control && key_n < 4) {
            corrupt("control record at byte %zd has no valid control key", pos);
            return -1;
        }
        if (keep) {
            if (c->headers > (Py_ssize_t)INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "too many headers for one Arrow column");
                return -1;
            }
            if (gb_i64(&c->offsets, offset) < 0 || gb_i64(&c->timestamps, timestamp) < 0 ||
                vc_append(&c->keys, c->rows, buf + key_at, key_n) < 0 ||
                vc_append(&c->values, c->rows, buf + value_at, value_n) < 0 ||
                gb_i32(&c->header_offsets, c->headers) < 0) {
                return -1;
            }
            c->rows++;
        }
    }
    if (pos != end) {
        PyErr_Format(corrupt_error, "records end at byte %zd, the batch ends at byte %zd", pos,
                     end);
        return -1;
    }
    return 0;
}

/* Prefix the pending CorruptRecordError's message with the batch's offset. */
static void
name_the_batch(long long base_offset)
{
    if (!PyErr_ExceptionMatches(corrupt_error)) {
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    if (text != NULL) {
        PyErr_Format(corrupt_error, "record batch at offset %lld: %U", base_offset, text);
        Py_DECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    else {
        PyErr_Restore(type, value, tb);
    }
}

/* The validity bitmap, or None when the column has no nulls. */
static PyObject *
bitmap_or_none(varcol *c)
{
    if (c->nulls == 0) {
        Py_CLEAR(c->valid.obj);
        Py_RETURN_NONE;
    }
    return gb_finish(&c->valid);
}

static PyObject *
arrow_columns(PyObject *self, PyObject *segments)
{
    (void)self;
    if (corrupt_error == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(segments, "segments must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n_segments = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    /* Capacity estimates: rows by the declared counts, data by the bytes. */
    Py_ssize_t rows = 0, body = 0;
    for (Py_ssize_t s = 0; s < n_segments; s++) {
        PyObject *item = items[s];
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 9) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "each segment must be a 9-tuple");
            return NULL;
        }
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
        Py_ssize_t count = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 3));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_ssize_t size = end > pos ? end - pos : 0;
        if (size > PY_SSIZE_T_MAX / 4 - body) {
            size = 0;
        }
        body += size;
        rows += count > 0 && count <= size / 7 ? count : 0;
    }
    columns c;
    memset(&c, 0, sizeof(c));
    PyObject *result = NULL;
    if (gb_init(&c.offsets, 8 * rows) < 0 || gb_init(&c.timestamps, 8 * rows) < 0 ||
        gb_init(&c.header_offsets, 4 * (rows + 1)) < 0 || gb_i32(&c.header_offsets, 0) < 0 ||
        vc_init(&c.keys, rows, body / 8) < 0 || vc_init(&c.values, rows, body) < 0 ||
        vc_init(&c.header_keys, 0, 0) < 0 || vc_init(&c.header_values, 0, 0) < 0) {
        goto done;
    }
    for (Py_ssize_t s = 0; s < n_segments; s++) {
        Py_buffer view;
        Py_ssize_t pos, end, count;
        long long base_offset, base_timestamp, max_timestamp, min_offset;
        long attributes;
        if (!PyArg_ParseTuple(items[s], "y*nnnLLlLL", &view, &pos, &end, &count, &base_offset,
                              &base_timestamp, &attributes, &max_timestamp, &min_offset)) {
            goto done;
        }
        int rc = fill_segment(&c, (const unsigned char *)view.buf, view.len, pos, end, count,
                              base_offset, base_timestamp, attributes, max_timestamp,
                              min_offset);
        PyBuffer_Release(&view);
        if (rc < 0) {
            name_the_batch(base_offset);
            goto done;
        }
    }
    {
        PyObject *parts[21] = {NULL};
        parts[0] = PyLong_FromSsize_t(c.rows);
        parts[1] = gb_finish(&c.offsets);
        parts[2] = gb_finish(&c.timestamps);
        varcol *cols[4] = {&c.keys, &c.values, &c.header_keys, &c.header_values};
        int at = 3;
        for (int k = 0; k < 4; k++) {
            if (k == 2) {
                parts[at++] = gb_finish(&c.header_offsets);
                parts[at++] = PyLong_FromSsize_t(c.headers);
            }
            parts[at++] = bitmap_or_none(cols[k]);
            parts[at++] = PyLong_FromSsize_t(cols[k]->nulls);
            parts[at++] = gb_finish(&cols[k]->offsets);
            parts[at++] = gb_finish(&cols[k]->data);
        }
        int ok = 1;
        for (int k = 0; k < 21; k++) {
            ok &= parts[k] != NULL;
        }
        if (ok) {
            result = PyTuple_New(21);
        }
        for (int k = 0; k < 21; k++) {
            if (result != NULL) {
                PyTuple_SET_ITEM(result, k, parts[k]);
            }
            else {
                Py_XDECREF(parts[k]);
            }
        }
    }
done:
    Py_CLEAR(c.offsets.obj);
    Py_CLEAR(c.timestamps.obj);
    Py_CLEAR(c.header_offsets.obj);
    vc_clear(&c.keys);
    vc_clear(&c.values);
    vc_clear(&c.header_keys);
    vc_clear(&c.header_values);
    Py_DECREF(seq);
    return result;
}

/* A bytearray of n bytes, not zeroed: the socket fills it (framing.py). */
static PyObject *
new_buffer(PyObject *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative buffer size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

static PyMethodDef methods[] = {
    {"new_buffer", new_buffer, METH_O,
     "new_buffer(n) -> bytearray: n bytes, not zeroed, to be overwritten whole"},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(buf, pos, end, count, base_offset, base_timestamp) -> list[Record]"},
    {"configure", configure, METH_VARARGS,
     "configure(record_type, error_type) -> bool: set the classes decode_records uses"},
    {"arrow_columns", arrow_columns, METH_O,
     "arrow_columns(segments) -> tuple: the Arrow column buffers of the segments' records"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Compiled record decoding for gengroup.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
