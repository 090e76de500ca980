/* The project's content hash, blake2b with a 16-byte digest and no key, as 32 lowercase hex
 * digits: the same text `hashlib.blake2b(data, digest_size=16).hexdigest()` gives
 * (tests/test_hashing.py checks it across lengths and block boundaries).
 *
 * Why a function of our own: the hot path hashes several short texts per record (a payload, a
 * pair ID, a pair's and an outcome's JSON), and through hashlib each digest copies a hasher
 * object, calls three of its methods and, for a text, encodes it to bytes first. Measured with
 * callgrind over the join operator, that came to about a third of the digest's instructions,
 * besides the compression itself (docs/performance.md, twenty-ninth round). Here a digest is
 * one call: the state lives on the stack, a text is read as its UTF-8 bytes where it lies, and
 * the hex is written into the new string directly.
 *
 * BLAKE2b as RFC 7693 defines it; the counter's high word stays zero (inputs below 2**64
 * bytes). Part of the compiled core: built by `python -m riskstream_tools.native_build` beside
 * the mypyc modules, used only when the core is (streaming/hashing.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 128
#define OUT_BYTES 16
/* Inputs at least this long are hashed with the interpreter lock released, as hashlib does
 * (from 2 KiB there); the hot path's texts are far shorter. */
#define RELEASE_GIL_FROM (64 * 1024)

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
    0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
    0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, unsigned n) {
    return (x >> n) | (x << (64 - n));
}

/* Little-endian whatever the host's order (compilers make it one load on x86-64). */
static inline uint64_t load64(const uint8_t *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

#define G(a, b, c, d, x, y)                      \
    do {                                         \
        v[a] = v[a] + v[b] + (x);                \
        v[d] = rotr64(v[d] ^ v[a], 32);          \
        v[c] = v[c] + v[d];                      \
        v[b] = rotr64(v[b] ^ v[c], 24);          \
        v[a] = v[a] + v[b] + (y);                \
        v[d] = rotr64(v[d] ^ v[a], 16);          \
        v[c] = v[c] + v[d];                      \
        v[b] = rotr64(v[b] ^ v[c], 63);          \
    } while (0)

#define ROUND(r)                                                  \
    do {                                                          \
        G(0, 4, 8, 12, m[SIGMA[r][0]], m[SIGMA[r][1]]);           \
        G(1, 5, 9, 13, m[SIGMA[r][2]], m[SIGMA[r][3]]);           \
        G(2, 6, 10, 14, m[SIGMA[r][4]], m[SIGMA[r][5]]);          \
        G(3, 7, 11, 15, m[SIGMA[r][6]], m[SIGMA[r][7]]);          \
        G(0, 5, 10, 15, m[SIGMA[r][8]], m[SIGMA[r][9]]);          \
        G(1, 6, 11, 12, m[SIGMA[r][10]], m[SIGMA[r][11]]);        \
        G(2, 7, 8, 13, m[SIGMA[r][12]], m[SIGMA[r][13]]);         \
        G(3, 4, 9, 14, m[SIGMA[r][14]], m[SIGMA[r][15]]);         \
    } while (0)

static void compress(uint64_t h[8], const uint8_t *block, uint64_t counter, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= counter;
    if (last) v[14] = ~v[14];
    /* Spelled out round by round: with the round a constant, each message word's index is
     * one, and the words stay in registers instead of being fetched through SIGMA (a loop over
     * the rounds ran slower than hashlib's own). */
    ROUND(0); ROUND(1); ROUND(2); ROUND(3); ROUND(4); ROUND(5);
    ROUND(6); ROUND(7); ROUND(8); ROUND(9); ROUND(10); ROUND(11);
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The first 16 bytes of the final state are the digest: h[0] and h[1], little-endian. */
static void blake2b_128(const uint8_t *in, size_t len, uint64_t out[2]) {
    uint64_t h[8];
    uint64_t counter = 0;
    uint8_t last[BLOCK];
    memcpy(h, IV, sizeof h);
    /* The parameter block's first word: digest length 16, key length 0, fanout 1, depth 1. */
    h[0] ^= 0x01010000ULL ^ OUT_BYTES;
    /* Every block but the last is compressed as it lies; the last (possibly the only one, and
     * empty for empty input) is zero-padded and flagged. */
    while (len > BLOCK) {
        counter += BLOCK;
        compress(h, in, counter, 0);
        in += BLOCK;
        len -= BLOCK;
    }
    memset(last, 0, sizeof last);
    if (len) memcpy(last, in, len);
    counter += len;
    compress(h, last, counter, 1);
    out[0] = h[0];
    out[1] = h[1];
}


/* ------------------------------------------------------------------ several messages at once
 * A single message's compression is a chain of dependent steps: four lanes of one message in
 * vector registers gain nothing over the word-at-a-time code (docs/performance.md,
 * thirty-fourth round). Several messages are independent, so each lane of a vector register
 * can carry a different message: 4 lanes with AVX2, 8 with AVX-512, chosen when the module
 * loads by what the processor has. `hex128_many` hashes a list this way: messages of the same
 * number of blocks go through together (grouped first, so no lane idles through a longer
 * neighbour's blocks), the rest one at a time. Every lane computes exactly what `compress`
 * does; tests/test_hashing.py holds each width to hashlib. */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_LANES 1
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f")))

AVX2 static inline __m256i ror32_4(__m256i x) {
    return _mm256_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1));
}
AVX2 static inline __m256i ror24_4(__m256i x) {
    const __m256i m = _mm256_setr_epi8(3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10,
                                       3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10);
    return _mm256_shuffle_epi8(x, m);
}
AVX2 static inline __m256i ror16_4(__m256i x) {
    const __m256i m = _mm256_setr_epi8(2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9,
                                       2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9);
    return _mm256_shuffle_epi8(x, m);
}
AVX2 static inline __m256i ror63_4(__m256i x) {
    return _mm256_or_si256(_mm256_srli_epi64(x, 63), _mm256_add_epi64(x, x));
}

#define G4(a, b, c, d, x, y)                                                     \
    do {                                                                         \
        v[a] = _mm256_add_epi64(_mm256_add_epi64(v[a], v[b]), (x));              \
        v[d] = ror32_4(_mm256_xor_si256(v[d], v[a]));                            \
        v[c] = _mm256_add_epi64(v[c], v[d]);                                     \
        v[b] = ror24_4(_mm256_xor_si256(v[b], v[c]));                            \
        v[a] = _mm256_add_epi64(_mm256_add_epi64(v[a], v[b]), (y));              \
        v[d] = ror16_4(_mm256_xor_si256(v[d], v[a]));                            \
        v[c] = _mm256_add_epi64(v[c], v[d]);                                     \
        v[b] = ror63_4(_mm256_xor_si256(v[b], v[c]));                            \
    } while (0)

#define G8(a, b, c, d, x, y)                                                     \
    do {                                                                         \
        v[a] = _mm512_add_epi64(_mm512_add_epi64(v[a], v[b]), (x));              \
        v[d] = _mm512_ror_epi64(_mm512_xor_si512(v[d], v[a]), 32);               \
        v[c] = _mm512_add_epi64(v[c], v[d]);                                     \
        v[b] = _mm512_ror_epi64(_mm512_xor_si512(v[b], v[c]), 24);               \
        v[a] = _mm512_add_epi64(_mm512_add_epi64(v[a], v[b]), (y));              \
        v[d] = _mm512_ror_epi64(_mm512_xor_si512(v[d], v[a]), 16);               \
        v[c] = _mm512_add_epi64(v[c], v[d]);                                     \
        v[b] = _mm512_ror_epi64(_mm512_xor_si512(v[b], v[c]), 63);               \
    } while (0)

#define ROUND_WITH(GX, r)                                                  \
    do {                                                                   \
        GX(0, 4, 8, 12, m[SIGMA[r][0]], m[SIGMA[r][1]]);                   \
        GX(1, 5, 9, 13, m[SIGMA[r][2]], m[SIGMA[r][3]]);                   \
        GX(2, 6, 10, 14, m[SIGMA[r][4]], m[SIGMA[r][5]]);                  \
        GX(3, 7, 11, 15, m[SIGMA[r][6]], m[SIGMA[r][7]]);                  \
        GX(0, 5, 10, 15, m[SIGMA[r][8]], m[SIGMA[r][9]]);                  \
        GX(1, 6, 11, 12, m[SIGMA[r][10]], m[SIGMA[r][11]]);                \
        GX(2, 7, 8, 13, m[SIGMA[r][12]], m[SIGMA[r][13]]);                 \
        GX(3, 4, 9, 14, m[SIGMA[r][14]], m[SIGMA[r][15]]);                 \
    } while (0)

#define TWELVE_ROUNDS(GX)                                                              \
    do {                                                                               \
        ROUND_WITH(GX, 0); ROUND_WITH(GX, 1); ROUND_WITH(GX, 2); ROUND_WITH(GX, 3);   \
        ROUND_WITH(GX, 4); ROUND_WITH(GX, 5); ROUND_WITH(GX, 6); ROUND_WITH(GX, 7);   \
        ROUND_WITH(GX, 8); ROUND_WITH(GX, 9); ROUND_WITH(GX, 10); ROUND_WITH(GX, 11); \
    } while (0)

/* One block of each of 4 messages: lane l reads `blocks[l]`, its counter `counter[l]` and its
 * last-block flag `last[l]` (all ones or zero). Message word i of every lane in one register:
 * the four lanes' 32-byte quarters loaded as rows and transposed. */
AVX2 static void compress4(__m256i h[8], const uint8_t *const blocks[4],
                           const uint64_t counter[4], const uint64_t last[4]) {
    __m256i m[16], v[16];
    for (int q = 0; q < 4; q++) {
        __m256i r0 = _mm256_loadu_si256((const __m256i *)(blocks[0] + 32 * q));
        __m256i r1 = _mm256_loadu_si256((const __m256i *)(blocks[1] + 32 * q));
        __m256i r2 = _mm256_loadu_si256((const __m256i *)(blocks[2] + 32 * q));
        __m256i r3 = _mm256_loadu_si256((const __m256i *)(blocks[3] + 32 * q));
        __m256i t0 = _mm256_unpacklo_epi64(r0, r1), t1 = _mm256_unpackhi_epi64(r0, r1);
        __m256i t2 = _mm256_unpacklo_epi64(r2, r3), t3 = _mm256_unpackhi_epi64(r2, r3);
        m[4 * q + 0] = _mm256_permute2x128_si256(t0, t2, 0x20);
        m[4 * q + 1] = _mm256_permute2x128_si256(t1, t3, 0x20);
        m[4 * q + 2] = _mm256_permute2x128_si256(t0, t2, 0x31);
        m[4 * q + 3] = _mm256_permute2x128_si256(t1, t3, 0x31);
    }
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = _mm256_set1_epi64x((long long)IV[i]);
    }
    v[12] = _mm256_xor_si256(v[12], _mm256_loadu_si256((const __m256i *)counter));
    v[14] = _mm256_xor_si256(v[14], _mm256_loadu_si256((const __m256i *)last));
    TWELVE_ROUNDS(G4);
    for (int i = 0; i < 8; i++) h[i] = _mm256_xor_si256(h[i], _mm256_xor_si256(v[i], v[i + 8]));
}

/* The same for 8 messages, each message word gathered from the 8 lanes' block addresses. */
AVX512 static void compress8(__m512i h[8], const uint8_t *const blocks[8],
                             const uint64_t counter[8], const uint64_t last[8]) {
    __m512i m[16], v[16];
    const __m512i at = _mm512_loadu_si512((const void *)blocks);
    for (int i = 0; i < 16; i++) {
        m[i] = _mm512_i64gather_epi64(_mm512_add_epi64(at, _mm512_set1_epi64(8 * i)),
                                      (const void *)0, 1);
    }
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = _mm512_set1_epi64((long long)IV[i]);
    }
    v[12] = _mm512_xor_si512(v[12], _mm512_loadu_si512((const void *)counter));
    v[14] = _mm512_xor_si512(v[14], _mm512_loadu_si512((const void *)last));
    TWELVE_ROUNDS(G8);
    for (int i = 0; i < 8; i++) h[i] = _mm512_xor_si512(h[i], _mm512_xor_si512(v[i], v[i + 8]));
}

#define MAX_LANES 8

/* The digests of `N` messages of `blocks` blocks each, in `N` lanes of `VEC`: every block but
 * the last compressed as it lies, the last (possibly the only one, and empty for empty input)
 * zero-padded in a buffer of its own and flagged, as `blake2b_128` does one message. One
 * definition for both widths; the vector type, its operations and its compression vary. */
#define DEFINE_LANES_128(NAME, TARGET, N, VEC, SET1, XOR, STORE, COMPRESS)               \
    TARGET static void NAME(size_t blocks, const uint8_t *const in[N], const size_t len[N], \
                            uint64_t out[][2]) {                                           \
        VEC h[8];                                                                          \
        uint8_t pad[N][BLOCK];                                                             \
        const uint8_t *at[N];                                                              \
        uint64_t counter[N], last[N], w0[N], w1[N];                                        \
        for (int i = 0; i < 8; i++) h[i] = SET1((long long)IV[i]);                         \
        h[0] = XOR(h[0], SET1(0x01010000LL ^ OUT_BYTES));                                  \
        for (size_t b = 0; b + 1 < blocks; b++) {                                          \
            for (int l = 0; l < N; l++) {                                                  \
                at[l] = in[l] + b * BLOCK;                                                 \
                counter[l] = (b + 1) * BLOCK;                                              \
                last[l] = 0;                                                               \
            }                                                                              \
            COMPRESS(h, at, counter, last);                                                \
        }                                                                                  \
        for (int l = 0; l < N; l++) {                                                      \
            size_t off = (blocks - 1) * BLOCK;                                             \
            memset(pad[l], 0, BLOCK);                                                      \
            if (len[l] > off) memcpy(pad[l], in[l] + off, len[l] - off);                   \
            at[l] = pad[l];                                                                \
            counter[l] = len[l];                                                           \
            last[l] = ~0ULL;                                                               \
        }                                                                                  \
        COMPRESS(h, at, counter, last);                                                    \
        STORE((void *)w0, h[0]);                                                           \
        STORE((void *)w1, h[1]);                                                           \
        for (int l = 0; l < N; l++) {                                                      \
            out[l][0] = w0[l];                                                             \
            out[l][1] = w1[l];                                                             \
        }                                                                                  \
    }

DEFINE_LANES_128(lanes4_128, AVX2, 4, __m256i, _mm256_set1_epi64x, _mm256_xor_si256,
                 _mm256_storeu_si256, compress4)
DEFINE_LANES_128(lanes8_128, AVX512, 8, __m512i, _mm512_set1_epi64, _mm512_xor_si512,
                 _mm512_storeu_si512, compress8)

/* `lanes` messages of `blocks` blocks each (so `(blocks - 1) * BLOCK < len <= blocks * BLOCK`,
 * or an empty message for one block): their digests into out[l]. Each message's last block
 * is copied into a zero-padded buffer, as `blake2b_128` does. */
static void lanes_128(int lanes, size_t blocks, const uint8_t *const in[], const size_t len[],
                      uint64_t out[][2]) {
    if (lanes == 8) lanes8_128(blocks, in, len, out);
    else lanes4_128(blocks, in, len, out);
}

/* The widest the processor runs: 8, 4, or 1 (no vector code). */
static int widest_lanes(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 8;
    if (__builtin_cpu_supports("avx2")) return 4;
    return 1;
}
#else
#define MAX_LANES 1
static int widest_lanes(void) { return 1; }
#endif

/* Each byte's two hex digits, filled in when the module loads. */
static char HEX_PAIRS[256][2];

static void write_hex(Py_UCS1 *hex, const uint64_t words[2]) {
    for (int i = 0; i < OUT_BYTES; i++) {
        memcpy(hex + 2 * i, HEX_PAIRS[(words[i / 8] >> (8 * (i % 8))) & 0xff], 2);
    }
}

static PyObject *hex128(PyObject *module, PyObject *arg) {
    const char *data;
    Py_ssize_t len;
    Py_buffer view;
    int viewed = 0;
    uint64_t words[2];
    (void)module;
    if (PyBytes_CheckExact(arg)) {
        data = PyBytes_AS_STRING(arg);
        len = PyBytes_GET_SIZE(arg);
    } else if (PyUnicode_Check(arg)) {
        /* An ASCII text's UTF-8 is its own data: no copy. Any other text's UTF-8 is made once
         * and kept by the string (as `str.encode` would make it, failing the same way on a lone
         * surrogate). */
        data = PyUnicode_AsUTF8AndSize(arg, &len);
        if (data == NULL) return NULL;
    } else {
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
        data = (const char *)view.buf;
        len = view.len;
        viewed = 1;
    }
    if (len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        blake2b_128((const uint8_t *)data, (size_t)len, words);
        Py_END_ALLOW_THREADS
    } else {
        blake2b_128((const uint8_t *)data, (size_t)len, words);
    }
    if (viewed) PyBuffer_Release(&view);
    PyObject *text = PyUnicode_New(2 * OUT_BYTES, 127);
    if (text == NULL) return NULL;
    write_hex(PyUnicode_1BYTE_DATA(text), words);
    return text;
}

/* `hex128` of `len` bytes at `data`, written as 32 hex digits at `hex`: for the compiled
 * core's other C, through the capsule HEX128_INTO (streaming._texts names a pair by the digest
 * of its text and writes the digest into the pair's texts, with no text object in between). */
static void hex128_into(const char *data, size_t len, Py_UCS1 *hex) {
    uint64_t words[2];
    blake2b_128((const uint8_t *)data, len, words);
    write_hex(hex, words);
}

/* The widest lane count this processor runs (set when the module loads). */
static int WIDEST = 1;

/* Messages of more blocks than this are hashed one at a time: few and long, they gain little. */
#define MAX_GROUPED_BLOCKS 8

/* The bytes a str or bytes item is hashed over; NULL with an exception for any other item. */
static const char *item_bytes(PyObject *item, Py_ssize_t *len) {
    if (PyBytes_CheckExact(item)) {
        *len = PyBytes_GET_SIZE(item);
        return PyBytes_AS_STRING(item);
    }
    if (PyUnicode_Check(item)) return PyUnicode_AsUTF8AndSize(item, len);
    PyErr_Format(PyExc_TypeError, "hex128_many: an item is %.100s, not str or bytes",
                 Py_TYPE(item)->tp_name);
    return NULL;
}

static PyObject *hex128_many(PyObject *module, PyObject *args) {
    PyObject *items;
    int lanes = 0;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!|i:hex128_many", &PyList_Type, &items, &lanes)) return NULL;
    if (lanes == 0) lanes = WIDEST;
    if (lanes != 1 && lanes != 4 && lanes != 8) {
        return PyErr_Format(PyExc_ValueError, "hex128_many: lanes must be 0, 1, 4 or 8, not %d",
                            lanes);
    }
    if (lanes > WIDEST) {
        return PyErr_Format(PyExc_ValueError,
                            "hex128_many: this processor runs at most %d lanes, not %d",
                            WIDEST, lanes);
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *result = PyList_New(n);
    if (result == NULL) return NULL;
    const uint8_t **data = PyMem_Malloc(sizeof(*data) * (size_t)(n ? n : 1));
    size_t *len = PyMem_Malloc(sizeof(*len) * (size_t)(n ? n : 1));
    Py_ssize_t *order = PyMem_Malloc(sizeof(*order) * (size_t)(n ? n : 1));
    uint64_t (*words)[2] = PyMem_Malloc(sizeof(*words) * (size_t)(n ? n : 1));
    if (data == NULL || len == NULL || order == NULL || words == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* The items' bytes (the list holds the items, so their data stays put) and, counted by
     * number of blocks, the order that groups messages of the same length in blocks. */
    Py_ssize_t count[MAX_GROUPED_BLOCKS + 2] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size;
        const char *bytes = item_bytes(PyList_GET_ITEM(items, i), &size);
        if (bytes == NULL) goto fail;
        data[i] = (const uint8_t *)bytes;
        len[i] = (size_t)size;
        size_t blocks = size ? ((size_t)size + BLOCK - 1) / BLOCK : 1;
        count[blocks <= MAX_GROUPED_BLOCKS ? blocks : MAX_GROUPED_BLOCKS + 1]++;
    }
    Py_ssize_t start[MAX_GROUPED_BLOCKS + 2];
    Py_ssize_t at = 0;
    for (int b = 0; b < MAX_GROUPED_BLOCKS + 2; b++) {
        start[b] = at;
        at += count[b];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t blocks = len[i] ? (len[i] + BLOCK - 1) / BLOCK : 1;
        order[start[blocks <= MAX_GROUPED_BLOCKS ? blocks : MAX_GROUPED_BLOCKS + 1]++] = i;
    }
    /* Full groups of `lanes` messages of one block count through the vector code; what is
     * left of each count, and every longer message, one at a time. */
    Py_ssize_t pos = 0;
    for (int b = 0; b < MAX_GROUPED_BLOCKS + 2; b++) {
        Py_ssize_t end = pos + count[b];
#ifdef HAVE_LANES
        if (lanes > 1 && b >= 1 && b <= MAX_GROUPED_BLOCKS) {
            const uint8_t *in[MAX_LANES];
            size_t sizes[MAX_LANES];
            uint64_t got[MAX_LANES][2];
            for (; pos + lanes <= end; pos += lanes) {
                for (int l = 0; l < lanes; l++) {
                    in[l] = data[order[pos + l]];
                    sizes[l] = len[order[pos + l]];
                }
                lanes_128(lanes, (size_t)b, in, sizes, got);
                for (int l = 0; l < lanes; l++) {
                    words[order[pos + l]][0] = got[l][0];
                    words[order[pos + l]][1] = got[l][1];
                }
            }
        }
#endif
        for (; pos < end; pos++) blake2b_128(data[order[pos]], len[order[pos]], words[order[pos]]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyUnicode_New(2 * OUT_BYTES, 127);
        if (text == NULL) goto fail;
        write_hex(PyUnicode_1BYTE_DATA(text), words[i]);
        PyList_SET_ITEM(result, i, text);
    }
    PyMem_Free(data);
    PyMem_Free(len);
    PyMem_Free(order);
    PyMem_Free(words);
    return result;
fail:
    PyMem_Free(data);
    PyMem_Free(len);
    PyMem_Free(order);
    PyMem_Free(words);
    Py_DECREF(result);
    return NULL;
}

static PyObject *widest(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyLong_FromLong(WIDEST);
}

static PyMethodDef methods[] = {
    {"hex128", hex128, METH_O,
     "hex128(data, /)\n--\n\nblake2b with a 16-byte digest of `data` (bytes, a bytes-like "
     "object, or a str as its UTF-8), as 32 lowercase hex digits."},
    {"hex128_many", hex128_many, METH_VARARGS,
     "hex128_many(items, lanes=0, /)\n--\n\n`hex128` of every item of a list (str or "
     "bytes), as a list, several messages at a time in vector registers. `lanes`: 0 for the "
     "widest the processor runs, else 1, 4 or 8 (a width it does not run is refused)."},
    {"widest_lanes", widest, METH_NOARGS,
     "widest_lanes()\n--\n\nThe lanes `hex128_many` uses by default: 8 (AVX-512), 4 (AVX2) or "
     "1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_blake2b",
    "blake2b-128 as hex, the content hash of streaming.hashing, in one C call.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__blake2b(void) {
    static const char HEX[] = "0123456789abcdef";
    for (int b = 0; b < 256; b++) {
        HEX_PAIRS[b][0] = HEX[b >> 4];
        HEX_PAIRS[b][1] = HEX[b & 0xf];
    }
    WIDEST = widest_lanes();
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    PyObject *into = PyCapsule_New((void *)hex128_into, "streaming._blake2b.HEX128_INTO", NULL);
    if (into == NULL || PyModule_AddObject(m, "HEX128_INTO", into) < 0) {
        Py_XDECREF(into);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
