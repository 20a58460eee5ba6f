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
        PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + *pos, n, "strict");
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                corrupt("header key at byte %zd is not UTF-8", *pos);
            }
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

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(buf, pos, end, count, base_offset, base_timestamp) -> list[Record]"},
    {"configure", configure, METH_VARARGS,
     "configure(record_type, error_type) -> bool: set the classes decode_records uses"},
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
