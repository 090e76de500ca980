/* Texts the hot path reads or writes for every record, in C: a decoded struct's payload, its
 * canonical JSON and its times in one call, an aware datetime's microseconds since the epoch,
 * an instant's canonical UTC text, the ID alphabet check, a text as a JSON string, the source's
 * plain-line guard and a block's arrival texts as microseconds, a JSON template filled with
 * integers, texts and instants, and a join pair's ID with the texts that carry it.
 *
 * Why: each was a handful of interpreter calls per field. An instant went through a datetime
 * subtraction and three attribute reads of the timedelta it made, its text through msgspec's
 * encoder, a slice and a decode, and the IDs were joined into one string for a regex search.
 * Measured per payment (interpreter, 200,000 calls each): 329 ns for one instant's
 * microseconds, 261 ns for its text, 374 ns for the join and the search; a payment has two
 * instants and three IDs. And a fact's IDs and times went to orjson and back to be quoted
 * (docs/performance.md, thirtieth round). The payload and the guard are the thirty-first
 * round's, the template the thirty-second's, the arrival texts the thirty-seventh's, the
 * pair's texts the fifty-fifth's (each says why where it is defined).
 *
 * Each function but the template has a Python twin that gives the same answer (the arrival
 * texts' is `timeutil.parse_utc_us`, one text at a time; the pair's texts', the join's
 * `_written_pair_texts`) (tests/test_texts.py, tests/test_canonical_payload.py and
 * tests/test_interval_join_parts.py compare them on generated input);
 * the template's callers write what it declines themselves, and it is compared with orjson:
 * `streaming.contracts.canonical`, `streaming.timeutil`, `streaming.operators.base` and
 * `streaming.sources.records` use these where the compiled core is in use, their own Python
 * otherwise. Built by `python -m riskstream_tools.native_build` beside the mypyc modules. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define US_PER_S 1000000LL
#define US_PER_DAY 86400000000LL
/* Days from 0001-01-01 to 1970-01-01, and the last day of 9999 after the epoch: the range of
 * instants that have a four-digit year. */
#define FIRST_DAY (-719162LL)
#define LAST_DAY 2932896LL

/* Howard Hinnant's days_from_civil: days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Its inverse. */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* The microseconds since 1970-01-01T00:00:00Z of an aware datetime into *out; 0, or -1 with
 * the error set. */
static int instant_of(PyObject *dt, int64_t *out) {
    if (!PyDateTime_Check(dt)) {
        PyErr_Format(PyExc_TypeError, "instant_us() takes a datetime, not %.100s",
                     Py_TYPE(dt)->tp_name);
        return -1;
    }
    PyObject *tz = PyDateTime_DATE_GET_TZINFO(dt);  /* borrowed */
    if (tz == Py_None) {
        PyErr_SetString(PyExc_ValueError, "instant_us() takes an aware datetime");
        return -1;
    }
    int64_t us = days_from_civil(PyDateTime_GET_YEAR(dt), PyDateTime_GET_MONTH(dt),
                                 PyDateTime_GET_DAY(dt)) * US_PER_DAY
                 + ((PyDateTime_DATE_GET_HOUR(dt) * 60LL + PyDateTime_DATE_GET_MINUTE(dt)) * 60LL
                    + PyDateTime_DATE_GET_SECOND(dt)) * US_PER_S
                 + PyDateTime_DATE_GET_MICROSECOND(dt);
    if (tz != PyDateTime_TimeZone_UTC) {
        /* Another zone (rare: producers write Z): its offset from UTC, as the zone says. */
        PyObject *off = PyObject_CallMethod(tz, "utcoffset", "O", dt);
        if (off == NULL)
            return -1;
        if (off == Py_None) {
            Py_DECREF(off);
            PyErr_SetString(PyExc_ValueError, "instant_us() takes an aware datetime");
            return -1;
        }
        if (!PyDelta_Check(off)) {
            Py_DECREF(off);
            PyErr_SetString(PyExc_TypeError, "utcoffset() did not return a timedelta");
            return -1;
        }
        us -= PyDateTime_DELTA_GET_DAYS(off) * US_PER_DAY
              + PyDateTime_DELTA_GET_SECONDS(off) * US_PER_S
              + PyDateTime_DELTA_GET_MICROSECONDS(off);
        Py_DECREF(off);
    }
    *out = us;
    return 0;
}

/* instant_us(dt): microseconds since 1970-01-01T00:00:00Z of an aware datetime. */
static PyObject *instant_us(PyObject *module, PyObject *dt) {
    int64_t us;
    if (instant_of(dt, &us) < 0)
        return NULL;
    return PyLong_FromLongLong(us);
}

static char TWO_DIGITS[100][2];

static inline char *put2(char *p, int v) {
    p[0] = TWO_DIGITS[v][0];
    p[1] = TWO_DIGITS[v][1];
    return p + 2;
}

/* An instant's canonical text, "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" (the fraction only when it is
 * not zero), written at p (27 bytes at most): its length, or 0 for an instant outside years
 * 1-9999. */
#define ISO_MAX 27
static int iso_text(int64_t us, char *p) {
    /* Floor division: an instant before the epoch belongs to the day it falls in. */
    int64_t day = us / US_PER_DAY;
    int64_t rem = us % US_PER_DAY;
    if (rem < 0) {
        rem += US_PER_DAY;
        day -= 1;
    }
    if (day < FIRST_DAY || day > LAST_DAY)
        return 0;
    int64_t year;
    int month, mday;
    civil_from_days(day, &year, &month, &mday);
    int64_t secs = rem / US_PER_S;
    int micros = (int)(rem % US_PER_S);
    p = put2(p, (int)(year / 100));
    p = put2(p, (int)(year % 100));
    *p++ = '-';
    p = put2(p, month);
    *p++ = '-';
    p = put2(p, mday);
    *p++ = 'T';
    p = put2(p, (int)(secs / 3600));
    *p++ = ':';
    p = put2(p, (int)(secs / 60 % 60));
    *p++ = ':';
    p = put2(p, (int)(secs % 60));
    if (micros) {
        *p++ = '.';
        p = put2(p, micros / 10000);
        p = put2(p, micros / 100 % 100);
        p = put2(p, micros % 100);
    }
    *p = 'Z';
    return micros ? 27 : 20;
}

/* iso_utc(us): the canonical text of an instant given in microseconds since the epoch, or None
 * for an instant outside years 1-9999. */
static PyObject *iso_utc(PyObject *module, PyObject *arg) {
    int overflow = 0;
    long long us = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (us == -1 && PyErr_Occurred())
        return NULL;
    if (overflow)
        Py_RETURN_NONE;
    char buf[ISO_MAX];
    int len = iso_text(us, buf);
    if (len == 0)
        Py_RETURN_NONE;
    PyObject *out = PyUnicode_New(len, 127);
    if (out == NULL)
        return NULL;
    memcpy(PyUnicode_1BYTE_DATA(out), buf, (size_t)len);
    return out;
}

/* Days in month m (1-12) of year y, proleptic Gregorian. */
static int days_in_month(int64_t y, int m) {
    static const int DAYS[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
        return 29;
    return DAYS[m - 1];
}

/* Two ASCII digits at c as their value, or -1. */
static inline int two_digits(const unsigned char *c) {
    unsigned a = (unsigned)c[0] - '0', b = (unsigned)c[1] - '0';
    return a <= 9 && b <= 9 ? (int)(a * 10 + b) : -1;
}

/* The microseconds of a UTC instant spelled "YYYY-MM-DDTHH:MM:SS", then a fraction of one to
 * six digits or none, then "Z" or "+00:00" (ASCII digits), of a date and time that exist (years
 * 1-9999, no leap second), into *out: 1; 0 for any other text. *canonical says whether the
 * text is "YYYY-MM-DDTHH:MM:SSZ" or "YYYY-MM-DDTHH:MM:SS.ffffffZ". RFC 3339 reads these as
 * every parser of it does; the rest of its spellings (other zones, "t", "z", more digits) are
 * left to the caller's general reader. */
static int utc_text_us(const unsigned char *c, Py_ssize_t n, int64_t *out, int *canonical) {
    if (n < 20 || c[4] != '-' || c[7] != '-' || c[10] != 'T' || c[13] != ':' || c[16] != ':')
        return 0;
    Py_ssize_t end = n;  /* where the zone starts */
    if (c[n - 1] == 'Z')
        end = n - 1;
    else if (n >= 25 && memcmp(c + n - 6, "+00:00", 6) == 0)
        end = n - 6;
    else
        return 0;
    Py_ssize_t digits = 0;
    if (end > 19) {
        digits = end - 20;
        if (c[19] != '.' || digits < 1 || digits > 6)
            return 0;
    } else if (end != 19) {
        return 0;
    }
    int y1 = two_digits(c), y2 = two_digits(c + 2), mo = two_digits(c + 5),
        d = two_digits(c + 8), h = two_digits(c + 11), mi = two_digits(c + 14),
        s = two_digits(c + 17);
    if (y1 < 0 || y2 < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 ||
        mi > 59 || s < 0 || s > 59)
        return 0;
    int64_t y = y1 * 100 + y2;
    if (y < 1 || d > days_in_month(y, mo))
        return 0;
    int64_t frac = 0;
    for (Py_ssize_t i = 20; i < 26; i++) {
        unsigned dg = 0;
        if (i < 20 + digits) {
            dg = (unsigned)c[i] - '0';
            if (dg > 9)
                return 0;
        }
        frac = frac * 10 + dg;
    }
    *canonical = end == n - 1 && (digits == 0 || digits == 6);
    *out = days_from_civil(y, mo, d) * US_PER_DAY +
           ((int64_t)(h * 60 + mi) * 60 + s) * US_PER_S + frac;
    return 1;
}

/* The microseconds of a canonical UTC spelling, "YYYY-MM-DDTHH:MM:SSZ" or
 * "YYYY-MM-DDTHH:MM:SS.ffffffZ" (ASCII digits), of a date and time that exist (years 1-9999, no
 * leap second), into *out: 1; 0 for any other text. What timeutil.parse_utc_us gives for such a
 * text (tests/test_timeutil.py compares the two). */
static int canonical_utc_us(PyObject *v, int64_t *out) {
    if (!PyUnicode_CheckExact(v) || PyUnicode_READY(v) < 0 || !PyUnicode_IS_ASCII(v))
        return 0;
    int canonical;
    return utc_text_us(PyUnicode_1BYTE_DATA(v), PyUnicode_GET_LENGTH(v), out, &canonical) &&
           canonical;
}

/* utc_us_texts(values): the microseconds of each text of the list when every one is a
 * canonical UTC spelling of an instant that exists (`canonical_utc_us`), else None: the caller
 * then reads them one at a time with timeutil.parse_utc_us, which gives the same values and
 * names the defect. Why: the file log reads every line's arrival time, and one call per text
 * (a slice, a dictionary lookup and an encode each) was about a third of judging a block's
 * arrivals (docs/performance.md, thirty-seventh round). */
static PyObject *utc_us_texts(PyObject *module, PyObject *values) {
    if (!PyList_Check(values)) {
        PyErr_Format(PyExc_TypeError, "utc_us_texts() takes a list, not %.100s",
                     Py_TYPE(values)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t us;
        if (!canonical_utc_us(PyList_GET_ITEM(values, i), &us)) {
            Py_DECREF(out);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        PyObject *boxed = PyLong_FromLongLong(us);
        if (boxed == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, boxed);
    }
    return out;
}

/* The ID alphabet (streaming.contracts.bounds.ID_CHARS): letters, digits and . _ ~ + = @ - */
static unsigned char ID_CHAR[128];

/* ids_in_alphabet(ids): whether every character of every text in the tuple is in the ID
 * alphabet (an empty text has none outside it). */
static PyObject *ids_in_alphabet(PyObject *module, PyObject *ids) {
    if (!PyTuple_Check(ids)) {
        PyErr_Format(PyExc_TypeError, "ids_in_alphabet() takes a tuple, not %.100s",
                     Py_TYPE(ids)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(ids);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(ids, i);
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "ID %zd: expected str, not %.100s", i,
                         Py_TYPE(s)->tp_name);
            return NULL;
        }
        if (PyUnicode_READY(s) < 0)
            return NULL;
        if (!PyUnicode_IS_ASCII(s))
            Py_RETURN_FALSE;  /* every character outside ASCII is outside the alphabet */
        const unsigned char *c = PyUnicode_1BYTE_DATA(s);
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        for (Py_ssize_t k = 0; k < len; k++) {
            if (!ID_CHAR[c[k]])
                Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

/* Whether JSON writes a character escaped inside a string: a control character, a quote, a
 * backslash (the one definition: json_quoted, and ascii_plain below with its word form). */
static inline int needs_escape(Py_UCS4 ch) {
    return ch < 0x20 || ch == '"' || ch == '\\';
}

/* json_quoted(s): the JSON string orjson writes for `s` when that is `s` in quotes (no
 * character below U+0020, no quote, no backslash, no lone surrogate, which orjson refuses);
 * None otherwise, for the caller to encode. */
static PyObject *json_quoted(PyObject *module, PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "json_quoted() takes a str, not %.100s",
                     Py_TYPE(s)->tp_name);
        return NULL;
    }
    if (PyUnicode_READY(s) < 0)
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const unsigned char *c = data;
        for (Py_ssize_t k = 0; k < len; k++) {
            if (needs_escape(c[k]))
                Py_RETURN_NONE;
        }
    } else {
        for (Py_ssize_t k = 0; k < len; k++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, k);
            if (needs_escape(ch) || (ch >= 0xD800 && ch <= 0xDFFF))
                Py_RETURN_NONE;
        }
    }
    PyObject *out = PyUnicode_New(len + 2, PyUnicode_MAX_CHAR_VALUE(s));
    if (out == NULL)
        return NULL;
    PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), 0, '"');
    if (PyUnicode_CopyCharacters(out, 1, s, 0, len) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), len + 1, '"');
    return out;
}

/* plain_key_part(s): `s` itself when it holds neither '|' nor a backslash, the two characters
 * `streaming.keys.escape` escapes in a key part, so escaping would give it back unchanged;
 * None otherwise, or for a subclass of str, for the caller to escape. */
static PyObject *plain_key_part(PyObject *module, PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "plain_key_part() takes a str, not %.100s",
                     Py_TYPE(s)->tp_name);
        return NULL;
    }
    if (!PyUnicode_CheckExact(s) || PyUnicode_READY(s) < 0)
        Py_RETURN_NONE;
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        if (memchr(data, '|', (size_t)len) != NULL || memchr(data, '\\', (size_t)len) != NULL)
            Py_RETURN_NONE;
    } else {
        for (Py_ssize_t k = 0; k < len; k++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, k);
            if (ch == '|' || ch == '\\')
                Py_RETURN_NONE;
        }
    }
    Py_INCREF(s);
    return s;
}

/* The source's guard before it trusts msgspec's skipping of a line's other fields
 * (streaming.sources.records.py_plain_lines, its Python twin, says why): lines no longer than
 * PLAIN_LONGEST bytes, all ASCII, with no exponent of three or more digits ("e" or "E" followed
 * by three characters each a digit or "+") and no run of PLAIN_DIGIT_RUN digits or "+".
 * The twin joins the block and translates it into a copy to search it: about a third of a
 * second per 1,000,000 lines. Here a line is read a word at a time for its ASCII, searched
 * for its "e"s with memchr, and probed for a long run every PLAIN_DIGIT_RUN - 1 bytes (any
 * such run covers a probe); a byte-by-byte pass cost 0.2 s per 1,000,000 lines, as its
 * branches follow the digits of the times (docs/performance.md, thirty-first round). A
 * newline joins the twin's lines and is neither a digit nor an "e", so nothing it finds spans
 * two lines, and judging line by line is the same. */
#define PLAIN_LONGEST 2048
#define PLAIN_DIGIT_RUN 210
static unsigned char DIGITISH[256];  /* a digit or "+": what the twin's shape writes as "0" */

static int line_is_plain(const unsigned char *c, Py_ssize_t len) {
    uint64_t seen = 0;
    Py_ssize_t k = 0;
    for (; k + 8 <= len; k += 8) {
        uint64_t word;
        memcpy(&word, c + k, 8);
        seen |= word;
    }
    for (; k < len; k++)
        seen |= c[k];
    if (seen & 0x8080808080808080ULL)
        return 0;
    const unsigned char *end = c + len;
    for (const char *e = "eE"; *e; e++) {
        const unsigned char *p = c;
        while ((p = memchr(p, *e, (size_t)(end - p))) != NULL) {
            if (end - p > 3 && DIGITISH[p[1]] && DIGITISH[p[2]] && DIGITISH[p[3]])
                return 0;
            p++;
        }
    }
    for (Py_ssize_t i = PLAIN_DIGIT_RUN - 2; i < len; i += PLAIN_DIGIT_RUN - 1) {
        if (!DIGITISH[c[i]])
            continue;
        Py_ssize_t lo = i, hi = i + 1;
        while (lo > 0 && DIGITISH[c[lo - 1]])
            lo--;
        while (hi < len && DIGITISH[c[hi]])
            hi++;
        if (hi - lo >= PLAIN_DIGIT_RUN)
            return 0;
    }
    return 1;
}

static PyObject *plain_lines(PyObject *module, PyObject *lines) {
    if (!PyList_Check(lines)) {
        PyErr_Format(PyExc_TypeError, "plain_lines() takes a list, not %.100s",
                     Py_TYPE(lines)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(lines);
    /* The twin judges the length of every line before it looks at any byte. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(line)) {
            PyErr_Format(PyExc_TypeError, "line %zd: expected bytes, not %.100s", i,
                         Py_TYPE(line)->tp_name);
            return NULL;
        }
        if (PyBytes_GET_SIZE(line) > PLAIN_LONGEST)
            Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!line_is_plain((const unsigned char *)PyBytes_AS_STRING(line),
                           PyBytes_GET_SIZE(line)))
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ the decoded payload */
/* What payload_of does with each field of a contract's struct (a bit set per field, from
 * streaming.contracts.canonical.payload_roles). */
#define ROLE_IN_PAYLOAD 1  /* a member of the payload */
#define ROLE_ID 2          /* a text in the ID alphabet */
#define ROLE_TIME 4        /* an instant (or None): its microseconds go into the times */

/* A growable byte buffer for the payload's JSON. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
    char local[512];
} Buffer;

static int buf_reserve(Buffer *b, Py_ssize_t more) {
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap;
    while (cap < b->len + more)
        cap *= 2;
    char *grown = PyMem_Malloc((size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(grown, b->data, (size_t)b->len);
    if (b->data != b->local)
        PyMem_Free(b->data);
    b->data = grown;
    b->cap = cap;
    return 0;
}

static int buf_put(Buffer *b, const char *p, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

/* A value as the `encode` callable (orjson, sorted keys) writes it: for everything the loop
 * below does not spell itself. */
static int buf_encoded(Buffer *b, PyObject *encode, PyObject *value) {
    PyObject *raw = PyObject_CallOneArg(encode, value);
    if (raw == NULL)
        return -1;
    if (!PyBytes_Check(raw)) {
        Py_DECREF(raw);
        PyErr_SetString(PyExc_TypeError, "payload_of(): encode did not return bytes");
        return -1;
    }
    int rc = buf_put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw));
    Py_DECREF(raw);
    return rc;
}

/* A 64-bit integer's decimal digits at p (20 bytes at most); their count. (snprintf took
 * about 700 instructions an integer; the digits are made two at a time, from the end.) */
static int put_decimal(char *p, long long x) {
    char digits[20];
    int at = 20;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    while (u >= 100) {
        int two = (int)(u % 100);
        u /= 100;
        at -= 2;
        digits[at] = TWO_DIGITS[two][0];
        digits[at + 1] = TWO_DIGITS[two][1];
    }
    if (u >= 10) {
        at -= 2;
        digits[at] = TWO_DIGITS[u][0];
        digits[at + 1] = TWO_DIGITS[u][1];
    } else {
        digits[--at] = (char)('0' + u);
    }
    int len = 0;
    if (x < 0)
        p[len++] = '-';
    memcpy(p + len, digits + at, (size_t)(20 - at));
    return len + 20 - at;
}

/* A finite float as canonical JSON writes it (orjson, and Python's repr: the shortest digits
 * that read back as the same float, with ".0" after an integral one), at p (40 bytes at most):
 * its length, 0 for a float that Python writes with an exponent (below 1e-4 or from 1e16 on in
 * magnitude: orjson writes some of those in full and the rest with another exponent, so the
 * caller writes them), -1 for a NaN or an infinity (JSON has none), -2 on a memory error.
 *
 * A score is a probability rounded to at most six decimals (streaming.models.logistic), so
 * first the decimals 0..6 are tried: the smallest d for which round(|x| * 10^d) / 10^d is x
 * again gives the digits. They are the shortest: any text with fewer decimals is at least
 * 10^-d away from them, more than the float's spacing, since |x| < 2^30 puts that spacing at
 * most 2^-22. Other floats go through Python's own shortest writer. Why: orjson's encoding of
 * a score and the decode of its bytes were about 1,200 instructions of each decision and each
 * signal (docs/performance.md, fifty-seventh round). */
static int put_float(char *p, double x) {
    static const double TEN_TO[7] = {1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6};
    if (!isfinite(x))
        return -1;
    double mag = fabs(x);
    if (mag == 0.0 || (mag >= 1e-4 && mag < 1073741824.0)) {
        for (int d = 0; d <= 6; d++) {
            double scaled = mag * TEN_TO[d];
            long long m = llround(scaled);
            if ((double)m / TEN_TO[d] != mag)
                continue;
            int len = 0;
            if (signbit(x))
                p[len++] = '-';
            long long whole = m, frac = 0;
            if (d > 0) {
                long long unit = (long long)TEN_TO[d];
                whole = m / unit;
                frac = m % unit;
            }
            len += put_decimal(p + len, whole);
            p[len++] = '.';
            if (d == 0) {
                p[len++] = '0';
            } else {
                for (int k = d - 1; k >= 0; k--) {  /* leading zeros kept: 0.05 */
                    p[len + k] = (char)('0' + frac % 10);
                    frac /= 10;
                }
                len += d;
            }
            return len;
        }
    }
    int type = 0;
    char *text = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, &type);
    if (text == NULL)
        return -2;
    size_t len = strlen(text);
    int plain = type == Py_DTST_FINITE && len < 40 && strchr(text, 'e') == NULL;
    if (plain)
        memcpy(p, text, len);
    PyMem_Free(text);
    return plain ? (int)len : 0;
}

/* A str's characters as bytes when it is ASCII: 1 with *c and *len set, 0 when it is not ASCII,
 * -1 on error. */
static int ascii_view(PyObject *s, const unsigned char **c, Py_ssize_t *len) {
    if (PyUnicode_READY(s) < 0)
        return -1;
    if (!PyUnicode_IS_ASCII(s))
        return 0;
    *c = PyUnicode_1BYTE_DATA(s);
    *len = PyUnicode_GET_LENGTH(s);
    return 1;
}

/* Whether an ASCII text needs no escape inside a JSON string: no byte below 0x20, no quote,
 * no backslash. Read a word at a time: when every byte of a word w is below 0x80 (ASCII),
 * (w - n in every byte) & ~w & (0x80 in every byte) is non-zero exactly when some byte is below
 * n (n <= 0x80), and a byte equals b exactly when w ^ (b in every byte) has a byte below 1.
 * Byte by byte it took three compares and branches a character, the largest part of the
 * template fill's own instructions (docs/performance.md, thirty-second round). */
#define BYTES_ONES 0x0101010101010101ULL
#define BYTES_HIGHS 0x8080808080808080ULL
static inline uint64_t has_below(uint64_t w, unsigned n) {
    return (w - BYTES_ONES * n) & ~w & BYTES_HIGHS;
}
static inline uint64_t has_byte(uint64_t w, unsigned b) {
    return has_below(w ^ (BYTES_ONES * b), 1);
}
static inline int word_plain(const unsigned char *c) {
    uint64_t w;
    memcpy(&w, c, 8);
    return !(has_below(w, 0x20) | has_byte(w, '"') | has_byte(w, '\\'));
}
static int ascii_plain(const unsigned char *c, Py_ssize_t n) {
    if (n < 8) {
        for (Py_ssize_t k = 0; k < n; k++) {
            if (needs_escape(c[k]))
                return 0;
        }
        return 1;
    }
    for (Py_ssize_t k = 0; k + 8 <= n; k += 8) {
        if (!word_plain(c + k))
            return 0;
    }
    return word_plain(c + n - 8);  /* the tail, as the last word (overlapping the one before) */
}

/* The first and last microsecond of years 1-9999: the instants a record may hold
 * (streaming.contracts.bounds; canonical.py checks its MIN_US and MAX_US against these). */
#define FIRST_US (FIRST_DAY * US_PER_DAY)
#define LAST_US ((LAST_DAY + 1) * US_PER_DAY - 1)

/* payload_of(values, fields, roles, order, encode, read_instant): the record of a struct the
 * decoder accepted, as canonical.record_of's Python twin (`py_payload_of`) builds it, in one
 * call: (payload, its canonical JSON, times), or None when an ID has a character outside the
 * alphabet, an instant lies outside years 1-9999 (in UTC) or an instant given as text is one
 * `read_instant` refuses.
 *
 * `values` are the struct's field values in field order (msgspec.structs.astuple), `fields`
 * their names, `roles` a ROLE_* bit set per field, `order` the indices of the payload's members
 * sorted by name (every name plain ASCII); an instant is an aware datetime or a text: a UTC
 * spelling `utc_text_us` reads is read here, any other by `read_instant` (text -> aware
 * datetime, or None for a text the contract refuses). The payload holds the members in field
 * order, each instant as its canonical UTC text; `times` maps every time field to its
 * microseconds (None for an absent optional one). The JSON is the payload with sorted keys, compact, as orjson
 * writes it: a text that needs no escape, an integer within 64 bits, true, false and null are
 * spelled here, and any other value is written by `encode` (orjson with sorted keys), so the
 * bytes are orjson's whatever the value.
 *
 * Why: the Python twin built the struct's dict, rewrote and dropped members, sorted and encoded
 * the dict and decoded the bytes again, about 10,000 of a record's 17,000 instructions
 * (docs/performance.md, thirty-first round). */
static PyObject *payload_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "payload_of() takes 6 arguments");
        return NULL;
    }
    PyObject *values = args[0], *fields = args[1], *roles = args[2], *order = args[3];
    PyObject *encode = args[4], *read_instant = args[5];
    if (!PyTuple_Check(values) || !PyTuple_Check(fields) || !PyBytes_Check(roles) ||
        !PyTuple_Check(order)) {
        PyErr_SetString(PyExc_TypeError,
                        "payload_of() takes (tuple, tuple, bytes, tuple, callable)");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(values);
    if (PyTuple_GET_SIZE(fields) != n || PyBytes_GET_SIZE(roles) != n) {
        PyErr_SetString(PyExc_ValueError,
                        "payload_of(): values, fields and roles differ in length");
        return NULL;
    }
    const unsigned char *role = (const unsigned char *)PyBytes_AS_STRING(roles);
    /* Each time field's text (payload members only), by field index; NULL elsewhere. */
    PyObject *texts[32] = {NULL};
    if (n > 32) {
        PyErr_SetString(PyExc_ValueError, "payload_of(): more than 32 fields");
        return NULL;
    }
    PyObject *payload = NULL, *times = NULL, *text = NULL, *result = NULL;
    int ascii = 1;  /* the JSON is ASCII unless `encode` wrote a member */
    Buffer b;
    b.data = b.local;
    b.len = 0;
    b.cap = (Py_ssize_t)sizeof b.local;

    /* Sized for their members at once: grown from empty, the payload's dict was resized on
     * the way. */
    payload = _PyDict_NewPresized(PyTuple_GET_SIZE(order));
    times = _PyDict_NewPresized(2);
    if (payload == NULL || times == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(values, i);
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        unsigned char r = role[i];
        if (r & ROLE_ID) {
            if (!PyUnicode_Check(v)) {
                PyErr_Format(PyExc_TypeError, "ID field %R: expected str", name);
                goto done;
            }
            const unsigned char *c;
            Py_ssize_t len;
            int viewed = ascii_view(v, &c, &len);
            if (viewed < 0)
                goto done;
            if (!viewed)
                goto refused;
            for (Py_ssize_t k = 0; k < len; k++) {
                if (!ID_CHAR[c[k]])
                    goto refused;
            }
        }
        if (r & ROLE_TIME) {
            if (v == Py_None) {
                if (PyDict_SetItem(times, name, Py_None) < 0)
                    goto done;
            } else {
                int64_t us;
                /* The C decoder's struct holds each instant as the text it came as
                 * (Contract.plan): a UTC spelling `utc_text_us` reads is read here, any other
                 * by `read_instant`, as the contract's struct reads it; the canonical text is
                 * kept as the payload's. A struct of the general path holds datetimes. */
                int from_text = PyUnicode_CheckExact(v), canonical = 0;
                if (from_text &&
                    !(PyUnicode_READY(v) == 0 && PyUnicode_IS_ASCII(v) &&
                      utc_text_us(PyUnicode_1BYTE_DATA(v), PyUnicode_GET_LENGTH(v), &us,
                                  &canonical))) {
                    /* Another spelling: read by `read_instant` (a datetime, or None for a
                     * text the contract refuses, which the general path then names). */
                    PyObject *dt = PyObject_CallOneArg(read_instant, v);
                    if (dt == NULL)
                        goto done;
                    if (dt == Py_None) {
                        Py_DECREF(dt);
                        goto refused;
                    }
                    int read = instant_of(dt, &us);
                    Py_DECREF(dt);
                    if (read < 0)
                        goto done;
                } else if (!from_text && instant_of(v, &us) < 0) {
                    goto done;
                }
                if (us < FIRST_US || us > LAST_US)
                    goto refused;
                PyObject *boxed = PyLong_FromLongLong(us);
                if (boxed == NULL)
                    goto done;
                int rc = PyDict_SetItem(times, name, boxed);
                Py_DECREF(boxed);
                if (rc < 0)
                    goto done;
                if ((r & ROLE_IN_PAYLOAD) && canonical &&
                    (PyUnicode_GET_LENGTH(v) == 20 || us % US_PER_S != 0)) {
                    /* The text is the canonical one already (a zero fraction is written
                     * without one): the payload keeps it. */
                    Py_INCREF(v);
                    texts[i] = v;
                } else if (r & ROLE_IN_PAYLOAD) {
                    char iso[ISO_MAX];
                    int len = iso_text(us, iso);
                    if (len == 0)
                        goto refused;  /* not reached: the range is years 1-9999 */
                    PyObject *t = PyUnicode_New(len, 127);
                    if (t == NULL)
                        goto done;
                    memcpy(PyUnicode_1BYTE_DATA(t), iso, (size_t)len);
                    texts[i] = t;
                    v = t;
                }
            }
        }
        if ((r & ROLE_IN_PAYLOAD) && PyDict_SetItem(payload, name, v) < 0)
            goto done;
    }
    /* The canonical JSON, members in key order. */
    if (buf_put(&b, "{", 1) < 0)
        goto done;
    Py_ssize_t members = PyTuple_GET_SIZE(order);
    for (Py_ssize_t j = 0; j < members; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(order, j));
        if (i == -1 && PyErr_Occurred())
            goto done;
        if (i < 0 || i >= n) {
            PyErr_SetString(PyExc_IndexError, "payload_of(): order names no field");
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        PyObject *v = texts[i] != NULL ? texts[i] : PyTuple_GET_ITEM(values, i);
        Py_ssize_t name_len;
        const char *name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_len);
        if (name_utf8 == NULL)
            goto done;
        if (buf_reserve(&b, name_len + 4) < 0)
            goto done;
        if (j)
            b.data[b.len++] = ',';
        b.data[b.len++] = '"';
        memcpy(b.data + b.len, name_utf8, (size_t)name_len);
        b.len += name_len;
        b.data[b.len++] = '"';
        b.data[b.len++] = ':';
        if (PyUnicode_CheckExact(v)) {
            if (PyUnicode_READY(v) < 0)
                goto done;
            Py_ssize_t len = PyUnicode_GET_LENGTH(v);
            const unsigned char *c = PyUnicode_1BYTE_DATA(v);
            if (PyUnicode_IS_ASCII(v) && ascii_plain(c, len)) {
                if (buf_reserve(&b, len + 2) < 0)
                    goto done;
                b.data[b.len++] = '"';
                memcpy(b.data + b.len, c, (size_t)len);
                b.len += len;
                b.data[b.len++] = '"';
                continue;
            }
        } else if (v == Py_True) {
            if (buf_put(&b, "true", 4) < 0)
                goto done;
            continue;
        } else if (v == Py_False) {
            if (buf_put(&b, "false", 5) < 0)
                goto done;
            continue;
        } else if (v == Py_None) {
            if (buf_put(&b, "null", 4) < 0)
                goto done;
            continue;
        } else if (PyLong_CheckExact(v)) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred())
                goto done;
            if (!overflow) {
                if (buf_reserve(&b, 20) < 0)
                    goto done;
                b.len += put_decimal(b.data + b.len, x);
                continue;
            }
        }
        ascii = 0;
        if (buf_encoded(&b, encode, v) < 0)
            goto done;
    }
    if (buf_put(&b, "}", 1) < 0)
        goto done;
    if (ascii) {
        text = PyUnicode_New(b.len, 127);
        if (text == NULL)
            goto done;
        memcpy(PyUnicode_1BYTE_DATA(text), b.data, (size_t)b.len);
    } else {
        text = PyUnicode_DecodeUTF8(b.data, b.len, "strict");
        if (text == NULL)
            goto done;
    }
    result = PyTuple_Pack(3, payload, text, times);
    goto done;
refused:
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(texts[i]);
    if (b.data != b.local)
        PyMem_Free(b.data);
    Py_XDECREF(payload);
    Py_XDECREF(times);
    Py_XDECREF(text);
    return result;
}

/* ------------------------------------------------------------------ filled JSON templates */
/* json_fill(parts, kinds, values): the text parts[0] + values[0] + parts[1] + ... + values[n-1]
 * + parts[n], each value written as its kind (one byte of `kinds` per value) says:
 *   'i'  an integer within 64 bits, as its decimal digits
 *   's'  an ASCII text that needs no escape, in quotes
 *   't'  an instant in microseconds since the epoch, as its canonical UTC text in quotes
 *   'r'  an ASCII text written as it is (JSON the caller has written: a number, a quoted text)
 *   'f'  a float, as canonical JSON writes it (`put_float`)
 * or None when a value is outside its kind (another type, an integer past 64 bits, a text that
 * is not ASCII or needs an escape, an instant outside years 1-9999, a float that is not finite
 * or whose text takes an exponent): the caller then writes the
 * text itself, as its Python twin does whatever the values. Every part is ASCII.
 *
 * Why: a receipt decision's document written by an f-string of fifteen members (JSON spellings
 * looked up, integers and instants formatted, the pieces joined) cost about 6,000 of the
 * decision's 21,000 instructions; this call, with the tuple of values, costs about 2,500
 * (docs/performance.md, thirty-second round).
 *
 * json_fill_texts(parts, kinds, values): several such texts from one template, a tuple of
 * them, or None when any value is outside its kind. Kind '|' ends a text where it stands (its
 * value is not read; the caller passes None) and the next begins with the part after it. Why:
 * a payment's seven texts of its pair and outcome facts were six calls and an f-string, 7,857
 * instructions a payment; one call over one template takes 7,181 (docs/performance.md,
 * fifty-fourth round). */

/* The buffer's text as a str (every byte ASCII). */
static PyObject *buf_text(const Buffer *b) {
    PyObject *text = PyUnicode_New(b->len, 127);
    if (text != NULL)
        memcpy(PyUnicode_1BYTE_DATA(text), b->data, (size_t)b->len);
    return text;
}

/* The body of both: `texts` NULL for json_fill (kind '|' is then unknown), else the list each
 * text ended by a '|' is appended to. Returns the last text, Py_None (a new reference) when a
 * value is outside its kind, or NULL with an exception set. */
static PyObject *fill_template(PyObject *const *args, Py_ssize_t nargs, const char *name,
                               PyObject *texts) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes 3 arguments", name);
        return NULL;
    }
    PyObject *parts = args[0], *kinds = args[1], *values = args[2];
    if (!PyTuple_Check(parts) || !PyBytes_Check(kinds) || !PyTuple_Check(values)) {
        PyErr_Format(PyExc_TypeError, "%s() takes (tuple of str, bytes, tuple)", name);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(values);
    if (PyBytes_GET_SIZE(kinds) != n || PyTuple_GET_SIZE(parts) != n + 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): one kind per value and one part more than values", name);
        return NULL;
    }
    const char *kind = PyBytes_AS_STRING(kinds);
    Buffer b;
    b.data = b.local;
    b.len = 0;
    b.cap = (Py_ssize_t)sizeof b.local;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i <= n; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        if (!PyUnicode_Check(part) || PyUnicode_READY(part) < 0 || !PyUnicode_IS_ASCII(part)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s(): part %zd is not an ASCII str", name, i);
            goto done;
        }
        /* Room for the part and for an integer or an instant after it. */
        Py_ssize_t plen = PyUnicode_GET_LENGTH(part);
        if (buf_reserve(&b, plen + ISO_MAX + 2) < 0)
            goto done;
        const char *pc = (const char *)PyUnicode_1BYTE_DATA(part);
        if (plen <= 8) {  /* most parts are a comma and a name: no call for them */
            for (Py_ssize_t k = 0; k < plen; k++)
                b.data[b.len + k] = pc[k];
        } else {
            memcpy(b.data + b.len, pc, (size_t)plen);
        }
        b.len += plen;
        if (i == n)
            break;
        PyObject *v = PyTuple_GET_ITEM(values, i);
        switch (kind[i]) {
        case 'i':
        case 't': {
            if (!PyLong_CheckExact(v))
                goto refused;
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred())
                goto done;
            if (overflow)
                goto refused;
            if (kind[i] == 'i') {
                b.len += put_decimal(b.data + b.len, x);
            } else {
                char *p = b.data + b.len;
                int len = iso_text(x, p + 1);
                if (len == 0)
                    goto refused;
                p[0] = '"';
                p[len + 1] = '"';
                b.len += len + 2;
            }
            break;
        }
        case 'f': {
            if (!PyFloat_CheckExact(v))
                goto refused;
            /* The part's room (ISO_MAX + 2 bytes) is not enough for every float's text. */
            if (buf_reserve(&b, 40) < 0)
                goto done;
            int len = put_float(b.data + b.len, PyFloat_AS_DOUBLE(v));
            if (len == -2)
                goto done;
            if (len <= 0)
                goto refused;
            b.len += len;
            break;
        }
        case 's':
        case 'r': {
            if (!PyUnicode_CheckExact(v))
                goto refused;
            const unsigned char *c;
            Py_ssize_t len;
            int viewed = ascii_view(v, &c, &len);
            if (viewed < 0)
                goto done;
            if (!viewed)
                goto refused;
            if (kind[i] == 'r') {
                if (buf_put(&b, (const char *)c, len) < 0)
                    goto done;
                break;
            }
            if (!ascii_plain(c, len))
                goto refused;
            if (buf_reserve(&b, len + 2) < 0)
                goto done;
            b.data[b.len] = '"';
            memcpy(b.data + b.len + 1, c, (size_t)len);
            b.data[b.len + 1 + len] = '"';
            b.len += len + 2;
            break;
        }
        case '|':
            if (texts != NULL) {
                PyObject *text = buf_text(&b);
                if (text == NULL)
                    goto done;
                int appended = PyList_Append(texts, text);
                Py_DECREF(text);
                if (appended < 0)
                    goto done;
                b.len = 0;
                break;
            }
            /* fall through: json_fill has no cuts */
        default:
            PyErr_Format(PyExc_ValueError, "%s(): unknown kind byte %d at %zd", name,
                         (int)(unsigned char)kind[i], i);
            goto done;
        }
    }
    result = buf_text(&b);
    goto done;
refused:
    result = Py_None;
    Py_INCREF(result);
done:
    if (b.data != b.local)
        PyMem_Free(b.data);
    return result;
}

static PyObject *json_fill(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    return fill_template(args, nargs, "json_fill", NULL);
}

static PyObject *json_fill_texts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *texts = PyList_New(0);
    if (texts == NULL)
        return NULL;
    PyObject *last = fill_template(args, nargs, "json_fill_texts", texts);
    PyObject *result = NULL;
    if (last == Py_None) {
        result = last;  /* a value outside its kind */
    } else if (last != NULL) {
        int appended = PyList_Append(texts, last);
        Py_DECREF(last);
        if (appended == 0)
            result = PyList_AsTuple(texts);
    }
    Py_DECREF(texts);
    return result;
}

/* ------------------------------------------------------------------ a pair's texts
 * A published pair's ID and the three texts that carry it, in one call: what the join's
 * `_written_pair_texts` writes with four string joins and a digest (of a fifth). The ID is
 * blake2b-128 of the payment's half of the ID's text followed by the signal's, hashed from one
 * buffer and written as hex straight into the texts, never a text object of its own until the
 * result. As four joins and a digest they took 3,955 instructions a pair (a join about 470),
 * as this one call 3,001, the hash 1,818 of them (callgrind over the join operator:
 * docs/performance.md, fifty-fifth round). */

/* streaming._blake2b's `hex128` into a caller's buffer (its capsule HEX128_INTO), set when
 * this module loads. */
typedef void (*Hex128Into)(const char *data, size_t len, Py_UCS1 *hex);
static Hex128Into HEX128_INTO;
#define PID_LEN 32
#define PUBLISH_TAIL "|publish"

/* A new str of the pieces one after another (every byte ASCII). */
static PyObject *ascii_joined(int count, const unsigned char *const *c, const Py_ssize_t *n) {
    Py_ssize_t len = 0;
    for (int i = 0; i < count; i++)
        len += n[i];
    PyObject *text = PyUnicode_New(len, 127);
    if (text == NULL)
        return NULL;
    Py_UCS1 *p = PyUnicode_1BYTE_DATA(text);
    for (int i = 0; i < count; i++) {
        memcpy(p, c[i], (size_t)n[i]);
        p += n[i];
    }
    return text;
}

/* Argument i of `fn` as the bytes of an ASCII str: 1 with *c and *len set, 0 when the str is
 * past ASCII (the caller then declines and its Python twin writes the texts), -1 with
 * TypeError when it is not a str. */
static int text_arg(const char *fn, PyObject *const *args, int i, const unsigned char **c,
                    Py_ssize_t *len) {
    if (!PyUnicode_CheckExact(args[i])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument %d is not a str", fn, i);
        return -1;
    }
    return ascii_view(args[i], c, len);
}

enum { PID_HEAD, PID_TAIL, PAIR_HEAD, PAIR_MID, PAIR_TAIL, KEY_HEAD, PAYMENT_EID, SIGNAL_EID,
       RULE_EID, PAIR_ARGS };

static PyObject *pair_texts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != PAIR_ARGS) {
        PyErr_Format(PyExc_TypeError, "pair_texts() takes %d arguments", PAIR_ARGS);
        return NULL;
    }
    const unsigned char *c[PAIR_ARGS];
    Py_ssize_t n[PAIR_ARGS];
    for (int i = 0; i < PAIR_ARGS; i++) {
        int viewed = text_arg("pair_texts", args, i, &c[i], &n[i]);
        if (viewed < 0)
            return NULL;
        if (!viewed)  /* the caller writes a text past ASCII (hashed as its UTF-8) itself */
            Py_RETURN_NONE;
    }
    /* The ID's text is short (two escaped IDs, two revisions and the rule): on the stack. */
    char local[256];
    Py_ssize_t id_len = n[PID_HEAD] + n[PID_TAIL];
    char *id_text = local;
    if (id_len > (Py_ssize_t)sizeof local) {
        id_text = PyMem_Malloc((size_t)id_len);
        if (id_text == NULL)
            return PyErr_NoMemory();
    }
    memcpy(id_text, c[PID_HEAD], (size_t)n[PID_HEAD]);
    memcpy(id_text + n[PID_HEAD], c[PID_TAIL], (size_t)n[PID_TAIL]);
    Py_UCS1 pid[PID_LEN];
    HEX128_INTO(id_text, (size_t)id_len, pid);
    if (id_text != local)
        PyMem_Free(id_text);

    static const unsigned char BAR[] = "|";
    static const unsigned char TAIL[] = PUBLISH_TAIL;
    const unsigned char *id_c[1] = {pid};
    const Py_ssize_t id_n[1] = {PID_LEN};
    const unsigned char *json_c[4] = {c[PAIR_HEAD], pid, c[PAIR_MID], c[PAIR_TAIL]};
    const Py_ssize_t json_n[4] = {n[PAIR_HEAD], PID_LEN, n[PAIR_MID], n[PAIR_TAIL]};
    const unsigned char *key_c[3] = {c[KEY_HEAD], pid, TAIL};
    const Py_ssize_t key_n[3] = {n[KEY_HEAD], PID_LEN, (Py_ssize_t)sizeof TAIL - 1};
    const unsigned char *logical_c[5] = {c[PAYMENT_EID], BAR, c[SIGNAL_EID], BAR, c[RULE_EID]};
    const Py_ssize_t logical_n[5] = {n[PAYMENT_EID], 1, n[SIGNAL_EID], 1, n[RULE_EID]};
    PyObject *result = PyTuple_New(4);
    if (result == NULL)
        return NULL;
    PyObject *texts[4] = {ascii_joined(1, id_c, id_n), ascii_joined(4, json_c, json_n),
                          ascii_joined(3, key_c, key_n), ascii_joined(5, logical_c, logical_n)};
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        if (texts[i] == NULL)
            failed = 1;
        else
            PyTuple_SET_ITEM(result, i, texts[i]);  /* steals */
    }
    if (failed) {
        Py_DECREF(result);  /* frees the texts made; the empty slots are NULL */
        return NULL;
    }
    return result;
}

/* An outcome's JSON (head, the count's digits, mid, tail) and its fact key (key head, the
 * sequence number's digits), or None when a text is past ASCII or a number is negative or
 * past 64 bits: the caller writes those itself. As two f-strings, the texts and the two
 * numbers' digits took about 1,200 instructions an outcome; this call, with its tuple, about
 * 850 (docs/performance.md, sixtieth round). */
enum { OUTCOME_HEAD, OUTCOME_COUNT, OUTCOME_MID, OUTCOME_TAIL, OUTCOME_KEY_HEAD, OUTCOME_SEQ,
       OUTCOME_ARGS };

static PyObject *outcome_texts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != OUTCOME_ARGS) {
        PyErr_Format(PyExc_TypeError, "outcome_texts() takes %d arguments", OUTCOME_ARGS);
        return NULL;
    }
    const unsigned char *c[OUTCOME_ARGS];
    Py_ssize_t n[OUTCOME_ARGS];
    char digits[2][24];
    for (int i = 0; i < OUTCOME_ARGS; i++) {
        if (i == OUTCOME_COUNT || i == OUTCOME_SEQ) {
            if (!PyLong_CheckExact(args[i])) {
                PyErr_Format(PyExc_TypeError, "outcome_texts(): argument %d is not an int", i);
                return NULL;
            }
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(args[i], &overflow);
            if (v == -1 && PyErr_Occurred())
                return NULL;
            if (overflow || v < 0)
                Py_RETURN_NONE;
            char *d = digits[i == OUTCOME_SEQ];
            n[i] = put_decimal(d, v);
            c[i] = (const unsigned char *)d;
            continue;
        }
        int viewed = text_arg("outcome_texts", args, i, &c[i], &n[i]);
        if (viewed < 0)
            return NULL;
        if (!viewed)
            Py_RETURN_NONE;
    }
    PyObject *json = ascii_joined(4, c, n);
    if (json == NULL)
        return NULL;
    PyObject *key = ascii_joined(2, c + OUTCOME_KEY_HEAD, n + OUTCOME_KEY_HEAD);
    if (key == NULL) {
        Py_DECREF(json);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(json);
        Py_DECREF(key);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, json);  /* steals */
    PyTuple_SET_ITEM(result, 1, key);
    return result;
}

static PyMethodDef methods[] = {
    {"instant_us", instant_us, METH_O,
     "instant_us(dt, /)\n--\n\nMicroseconds since the epoch of an aware datetime."},
    {"iso_utc", iso_utc, METH_O,
     "iso_utc(us, /)\n--\n\nThe canonical UTC text of an instant given in microseconds since "
     "the epoch, or None outside years 1-9999."},
    {"ids_in_alphabet", ids_in_alphabet, METH_O,
     "ids_in_alphabet(ids, /)\n--\n\nWhether every text of the tuple is in the ID alphabet."},
    {"json_quoted", json_quoted, METH_O,
     "json_quoted(s, /)\n--\n\nThe JSON string of `s` when it needs no escape, else None."},
    {"payload_of", (PyCFunction)(void (*)(void))payload_of, METH_FASTCALL,
     "payload_of(values, fields, roles, order, encode, read_instant, /)\n--\n\nA decoded "
     "struct's payload, its canonical JSON and its times, or None when an ID or an instant is "
     "outside its bounds."},
    {"json_fill", (PyCFunction)(void (*)(void))json_fill, METH_FASTCALL,
     "json_fill(parts, kinds, values, /)\n--\n\nThe parts with the values written between "
     "them as their kinds say (i integer, s text, t instant, r raw JSON), or None when a value "
     "is outside its kind."},
    {"json_fill_texts", (PyCFunction)(void (*)(void))json_fill_texts, METH_FASTCALL,
     "json_fill_texts(parts, kinds, values, /)\n--\n\nAs json_fill, cut into a tuple of "
     "texts where a kind is '|' (its value is not read), or None when a value is outside its "
     "kind."},
    {"pair_texts", (PyCFunction)(void (*)(void))pair_texts, METH_FASTCALL,
     "pair_texts(pid_head, pid_tail, pair_head, pair_mid, pair_tail, key_head, payment_eid, "
     "signal_eid, rule_eid, /)\n--\n\nA pair's ID (the hex digest of pid_head + pid_tail), "
     "its JSON (pair_head, ID, pair_mid, pair_tail), its fact key (key_head, ID, '|publish') "
     "and its logical key (the three escaped IDs joined by '|'), or None when a text is past "
     "ASCII."},
    {"outcome_texts", (PyCFunction)(void (*)(void))outcome_texts, METH_FASTCALL,
     "outcome_texts(head, count, mid, tail, key_head, seq, /)\n--\n\nAn outcome's JSON "
     "(head, count, mid, tail) and its fact key (key_head, seq), the numbers as their "
     "decimal digits, or None when a text is past ASCII or a number is negative or past 64 "
     "bits."},
    {"utc_us_texts", utc_us_texts, METH_O,
     "utc_us_texts(values, /)\n--\n\nThe microseconds of each text of the list when every one "
     "is a canonical UTC spelling of an existing instant, else None."},
    {"plain_key_part", plain_key_part, METH_O,
     "plain_key_part(s, /)\n--\n\n`s` itself when it holds neither '|' nor a backslash (a key "
     "part escaping leaves as it is), else None."},
    {"plain_lines", plain_lines, METH_O,
     "plain_lines(lines, /)\n--\n\nWhether a list of source lines is plain: short, ASCII, "
     "no exponent of three digits, no long run of digits."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_texts",
    "Texts of the hot path in C: instants, IDs, JSON strings and the source's plain-line guard "
    "(streaming.contracts.canonical, streaming.timeutil, streaming.operators.base, "
    "streaming.sources.records).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__texts(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    for (int v = 0; v < 100; v++) {
        TWO_DIGITS[v][0] = (char)('0' + v / 10);
        TWO_DIGITS[v][1] = (char)('0' + v % 10);
    }
    static const char PUNCT[] = "._~+=@-";
    for (int c = 0; c < 128; c++)
        ID_CHAR[c] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    for (const char *p = PUNCT; *p; p++)
        ID_CHAR[(unsigned char)*p] = 1;
    for (int c = 0; c < 256; c++)
        DIGITISH[c] = (c >= '0' && c <= '9') || c == '+';
    /* PyCapsule_Import imports only the package and reads the rest as attributes: the module
     * is imported first, so this one loads whichever of the two is asked for first. */
    PyObject *blake2b = PyImport_ImportModule("streaming._blake2b");
    if (blake2b == NULL)
        return NULL;
    Py_DECREF(blake2b);
    HEX128_INTO = (Hex128Into)PyCapsule_Import("streaming._blake2b.HEX128_INTO", 0);
    if (HEX128_INTO == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObject(m, "FIRST_US", PyLong_FromLongLong(FIRST_US)) < 0 ||
        PyModule_AddObject(m, "LAST_US", PyLong_FromLongLong(LAST_US)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
