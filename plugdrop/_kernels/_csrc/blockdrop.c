/* plugdrop: fused sparse DropBlock for CPU tensors.
 *
 * out = x * scale (scale broadcast over batch and channels), with the block of every seed
 * zeroed, in one pass over memory. The seeds are drawn inside the kernel from a counter-based
 * generator (below), keyed by two 32-bit words that plugdrop draws from torch's generator, so
 * torch.manual_seed reproduces every mask, activation checkpointing replays it, and the
 * backward regenerates it from the key alone.
 *
 * The generator draws independent Bernoulli(gamma) draws over the seed grid: the positions
 * whose block fits in the map (d < D - bd + 1, h < H - bh + 1, w < W - bw + 1), flattened as
 * (B, C, Dv, Hv, Wv), or (B, 1, Dv, Hv, Wv) with shared != 0. A drawn seed is placed on its
 * map position as a bit, and the bits grow into their blocks by shifted ORs of a bit array
 * instead of a loop over seeds. The seed grid is cut into blocks of 256 positions
 * (256 j .. 256 j + 255), and each block's seeds are drawn by geometric gaps: the gap G before
 * the next seed (the number of positions without one) has P(G >= k) = q**k, q = 1 - gamma,
 * and G = 16 h + r with h and r independent (the geometric law is memoryless):
 * P(h >= i) = q**(16 i), P(r >= i) = (q**i - q**16) / (1 - q**16), i < 16. Draw k of block j
 * takes two counter-based hashes of the 64-bit counter n = 256 j + k,
 *     A(n) = mix(mix(lo(n) ^ k0) ^ hi(n) ^ k1),   B(n) = mix(mix(lo(n) ^ k1) ^ hi(n) ^ k0),
 * where mix is Wellons' "lowbias32" integer hash (x ^= x >> 16; x *= 0x7feb352d;
 * x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16): h = #{i in 1..16: A(n) < T_i},
 * r = #{i in 1..15: B(n) < R_i}, with T_i = round(q**(16 i) * 2**32) and
 * R_i = round(P(r >= i) * 2**32). The block's seeds are at G_0, G_0 + 1 + G_1, ..., while they
 * are inside it (a gap beyond the block ends it: a block is a new start, which the memoryless
 * law allows). That is exactly the law of independent Bernoulli(gamma) draws (to 2**-32), at
 * two hashes per seed plus two per block, with no work at positions without a seed; 16 blocks
 * run as one vector (each count is a binary search of the sorted thresholds). Drawing on the
 * seed grid (not on every position of the maps) costs nothing where no block fits. A range of
 * positions draws the blocks it touches and keeps the seeds inside it, so the seeds depend on
 * the key and the position only, not on how the work is split. plugdrop/_kernels/cext.py has
 * the same definition in torch ops (the reference: hashed_seeds).
 *
 * Layout of one sample (the batch stride may differ between x and out):
 *   channels_last == 0:  [C][D][H][W]   (maps contiguous)
 *   channels_last == 1:  [D][H][W][C]   (channels innermost)
 * 1D and 2D maps are passed as 3D with leading sizes of 1.
 */
#ifdef _OPENMP
#include <omp.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h> /* the AVX2 paths, and the AVX-512 clones (target attributes) */
#endif

/* seed-grid positions per block of the generator */
#define BLOCK_BITS 8
#define BLOCK (1 << BLOCK_BITS)
/* elements per group of maps processed together (channels-first) */
#define GROUP 4096

static inline uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

/* 8 lanes of 32 bits (GCC and clang vector extensions): one AVX2 register */
typedef int32_t v8i __attribute__((vector_size(32)));

/* keep8[m]: lane j all ones iff bit j of m is clear (the element is kept) */
static v8i keep8[256];
__attribute__((constructor)) static void init_tables(void) {
    for (int m = 0; m < 256; ++m)
        for (int j = 0; j < 8; ++j) keep8[m][j] = (m >> j & 1) ? 0 : -1;
}

typedef struct {
    uint32_t k0, k1;
    uint32_t none;      /* gamma == 0: no seeds */
    uint32_t T[16];     /* T[i] = P(G >= 16 (16 - i)) * 2**32, ascending (see the top) */
    uint32_t R[16];     /* R[0] = 0, R[i] = P(r >= 16 - i) * 2**32, ascending */
} rng_t;

/* The seeds of blocks j0 .. j0 + nb - 1 (nb <= 16) into out, as 256 (j - j0) + pos, in no
 * particular order; returns how many (at most 256 nb; out has room for 256 nb + 8: the
 * generic clone stores each lane's value and counts it only if it is a seed). */
typedef uint32_t (*blocks_fn)(const rng_t *restrict, uint64_t, uint32_t, uint32_t *restrict);

/* 8 lanes of unsigned 32 bits (GCC and clang vector extensions) */
typedef uint32_t v8u __attribute__((vector_size(32)));

/* (vectors passed by address: by value, a build without AVX would change the ABI) */
static inline void mix8(v8u *x) {
    v8u v = *x;
    v ^= v >> 16; v *= 0x7feb352dU; v ^= v >> 15; v *= 0x846ca68bU; v ^= v >> 16;
    *x = v;
}

/* *c = 16 - #{i < 16: t[i] <= v} on 8 lanes */
static inline void above8(const uint32_t *t, const v8u *v, v8u *c) {
    v8u r = *v - *v + 16;
    for (int i = 0; i < 16; ++i) r += (v8u)(*v >= t[i]); /* a true comparison is all ones */
    *c = r;
}

/* The generic clone: 8 blocks at a time, one per lane, their draws in step (the lanes whose
 * block is done idle until the last is) */
static uint32_t blocks_base(const rng_t *restrict g, uint64_t j0, uint32_t nb,
                            uint32_t *restrict out) {
    uint32_t n = 0;
    for (uint32_t l0 = 0; l0 < nb; l0 += 8) {
        v8u lo, hk0, hk1, jr, pos, alive;
        for (int i = 0; i < 8; ++i) { /* counter 256 j + k: low word (j << 8) | k, high j >> 24 */
            const uint64_t j = j0 + l0 + (uint32_t)i;
            lo[i] = (uint32_t)(j << BLOCK_BITS);
            hk1[i] = (uint32_t)(j >> (32 - BLOCK_BITS)) ^ g->k1;
            hk0[i] = (uint32_t)(j >> (32 - BLOCK_BITS)) ^ g->k0;
            jr[i] = (l0 + (uint32_t)i) << BLOCK_BITS;
            pos[i] = (uint32_t)-1;
            alive[i] = l0 + (uint32_t)i < nb ? (uint32_t)-1 : 0;
        }
        for (uint32_t k = 0;; ++k) {
            uint32_t any = 0;
            for (int i = 0; i < 8; ++i) any |= alive[i];
            if (!any) break;
            const v8u c = lo | k;
            v8u ua = c ^ g->k0, ub = c ^ g->k1, h, r;
            mix8(&ua);
            ua ^= hk1;
            mix8(&ua);
            mix8(&ub);
            ub ^= hk0;
            mix8(&ub);
            above8(g->T, &ua, &h);
            above8(g->R, &ub, &r);
            pos += (h * 16 + r + 1) & alive;
            const v8u hit = alive & (v8u)(pos <= BLOCK - 1), val = jr + pos;
            for (int i = 0; i < 8; ++i) { /* branch-free: a store, then counted if a seed */
                out[n] = val[i];
                n += hit[i] & 1;
            }
            alive = hit & (v8u)(pos < BLOCK - 1);
        }
    }
    return n;
}

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_AVX512_CLONES 1
#define AVX512_TARGET \
    __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma,prefer-vector-width=512")))

/* mix on 16 lanes */
AVX512_TARGET static inline __m512i mix16(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x7feb352dU));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bU));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

/* 16 - #{i < 16: t[i] <= v} on 16 lanes, t sorted (tv; t15: t[15] broadcast): a binary search
 * of four lookups counts among t[0 .. 14], and t[15] <= v adds the last */
AVX512_TARGET static inline __m512i above16(__m512i tv, __m512i t15, __m512i v) {
    __m512i p = _mm512_setzero_si512();
    for (int step = 8; step >= 1; step >>= 1) {
        const __m512i t =
            _mm512_permutexvar_epi32(_mm512_add_epi32(p, _mm512_set1_epi32(step - 1)), tv);
        p = _mm512_mask_add_epi32(p, _mm512_cmple_epu32_mask(t, v), p, _mm512_set1_epi32(step));
    }
    p = _mm512_mask_add_epi32(p, _mm512_cmple_epu32_mask(t15, v), p, _mm512_set1_epi32(1));
    return _mm512_sub_epi32(_mm512_set1_epi32(16), p);
}

/* blocks_base on 16 lanes, one block per lane, in step: draw k of every lane at once, while
 * any lane's block is not done; the seeds found are compressed into out. */
AVX512_TARGET static uint32_t blocks_avx512(const rng_t *restrict g, uint64_t j0, uint32_t nb,
                                            uint32_t *restrict out) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i jlo = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)j0), iota);
    const __mmask16 carry = _mm512_cmplt_epu32_mask(jlo, _mm512_set1_epi32((int)(uint32_t)j0));
    const __m512i jhi = _mm512_mask_add_epi32(_mm512_set1_epi32((int)(uint32_t)(j0 >> 32)), carry,
                                              _mm512_set1_epi32((int)(uint32_t)(j0 >> 32)),
                                              _mm512_set1_epi32(1));
    /* counter 256 j + k: low word (j << 8) | k, high word j >> 24 */
    const __m512i lo = _mm512_slli_epi32(jlo, BLOCK_BITS);
    const __m512i hi = _mm512_or_si512(_mm512_slli_epi32(jhi, 32 - BLOCK_BITS),
                                       _mm512_srli_epi32(jlo, 32 - BLOCK_BITS));
    const __m512i vk0 = _mm512_set1_epi32((int)g->k0), vk1 = _mm512_set1_epi32((int)g->k1);
    const __m512i hk1 = _mm512_xor_si512(hi, vk1), hk0 = _mm512_xor_si512(hi, vk0);
    const __m512i tv = _mm512_loadu_si512(g->T), rv = _mm512_loadu_si512(g->R);
    const __m512i t15 = _mm512_set1_epi32((int)g->T[15]), r15 = _mm512_set1_epi32((int)g->R[15]);
    const __m512i one = _mm512_set1_epi32(1), lanebase = _mm512_slli_epi32(iota, BLOCK_BITS);
    const __m512i last = _mm512_set1_epi32(BLOCK - 1);
    __m512i pos = _mm512_set1_epi32(-1);
    __mmask16 alive = (__mmask16)(nb >= 16 ? 0xffffU : (1U << nb) - 1);
    uint32_t n = 0;
    for (uint32_t k = 0; alive; ++k) {
        const __m512i c = _mm512_or_si512(lo, _mm512_set1_epi32((int)k));
        const __m512i ua = mix16(_mm512_xor_si512(mix16(_mm512_xor_si512(c, vk0)), hk1));
        const __m512i ub = mix16(_mm512_xor_si512(mix16(_mm512_xor_si512(c, vk1)), hk0));
        const __m512i gap = _mm512_add_epi32(_mm512_slli_epi32(above16(tv, t15, ua), 4),
                                             above16(rv, r15, ub));
        pos = _mm512_mask_add_epi32(pos, alive, pos, _mm512_add_epi32(gap, one));
        /* pos >= -1 + 1; as unsigned, a gap past the block compares above it */
        const __mmask16 hit = alive & _mm512_cmple_epu32_mask(pos, last);
        _mm512_mask_compressstoreu_epi32(out + n, hit, _mm512_add_epi32(lanebase, pos));
        n += (uint32_t)__builtin_popcount(hit);
        alive = hit & _mm512_cmplt_epu32_mask(pos, last);
    }
    return n;
}
#endif

/* The clones in use: 0 generic, 1 AVX-512; -1 until the first call picks the best */
static int isa = -1;
static blocks_fn blocks_impl = blocks_base;

static int avx512_supported(void) {
#ifdef HAVE_AVX512_CLONES
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

static void set_isa(int want) {
    isa = want == 1 && avx512_supported();
#ifdef HAVE_AVX512_CLONES
    blocks_impl = isa ? blocks_avx512 : blocks_base;
#endif
}

/* Pick the clones (want = 0 or 1; 1 falls back to 0 where AVX-512 is missing), or query them
 * (want = -1). Returns the clones in use. For tests: both draw the same seeds and noise. */
int plugdrop_isa(int want) {
    if (want >= 0) set_isa(want);
    else if (isa < 0) set_isa(avx512_supported());
    return isa;
}

/* The blocks of the generator that positions first .. first + count - 1 (count > 0) touch */
static inline int64_t blocks_touched(int64_t first, int64_t count) {
    return ((first + count - 1) >> BLOCK_BITS) + 1 - (first >> BLOCK_BITS);
}

/* The seeds among seed-grid positions first .. first + count - 1, in no particular order, of
 * the blocks b0 .. b1 - 1 (relative to the block of first; all of them: b1 = -1). Each seed,
 * at first + t, goes to hits[n] = t if hits is given (returns n), else sets bit at[t] of m
 * (bit t if at is NULL). */
static int64_t draw_range(const rng_t *g, int64_t first, int64_t count, const uint32_t *at,
                          uint64_t *m, int64_t *hits, int64_t b0, int64_t b1) {
    if (g->none || count <= 0) return 0;
    uint32_t buf[16 * BLOCK + 16];
    const int64_t j0 = first >> BLOCK_BITS, jn = blocks_touched(first, count);
    if (b1 < 0 || b1 > jn) b1 = jn;
    int64_t nh = 0;
    for (int64_t b = b0; b < b1; b += 16) {
        const uint32_t nb = (uint32_t)(b1 - b < 16 ? b1 - b : 16);
        const uint32_t n = blocks_impl(g, (uint64_t)(j0 + b), nb, buf);
        const int64_t base = ((j0 + b) << BLOCK_BITS) - first;
        for (uint32_t i = 0; i < n; ++i) {
            const int64_t t = base + buf[i];
            if ((uint64_t)t >= (uint64_t)count) continue;
            if (hits) hits[nh++] = t;
            else {
                const uint64_t a = at ? at[t] : (uint64_t)t;
                m[a >> 6] |= (uint64_t)1 << (a & 63);
            }
        }
    }
    return nh;
}

/* Part k of `parts` of the seeds of draw_range(g, first, count, at, m): together, the same bits
 * (the blocks split into parts of whole vectors of 16 blocks; later parts may be empty) */
static void draw_part(const rng_t *g, int64_t first, int64_t count, const uint32_t *at,
                      uint64_t *m, int64_t k, int64_t parts) {
    if (count <= 0) return;
    const int64_t jn = blocks_touched(first, count);
    const int64_t step = 16 * (((jn + 15) / 16 + parts - 1) / parts); /* whole vectors */
    const int64_t b0 = k * step, b1 = (k + 1) * step < jn ? (k + 1) * step : jn;
    if (b1 > b0) draw_range(g, first, count, at, m, NULL, b0, b1);
}

/* ------------------------------------------------------------------------------ bit arrays
 * Bit i of an array of uint64_t words is bit (i & 63) of word i >> 6 (and, on the
 * little-endian machines this file is built for, bit i & 7 of byte i >> 3). */

static void set_run(uint64_t *a, int64_t pos, int64_t len) { /* bits pos .. pos + len - 1 */
    while (len > 0) {
        const int r = (int)(pos & 63);
        const int64_t n = 64 - r < len ? 64 - r : len;
        a[pos >> 6] |= (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << r;
        pos += n;
        len -= n;
    }
}

/* dst = src | src << s over words 0 .. nw - 1 (bits move to higher positions) */
static void or_shift(uint64_t *restrict dst, const uint64_t *restrict src, int64_t nw,
                     int64_t s) {
    const int64_t q = s >> 6 < nw ? s >> 6 : nw;
    const int r = (int)(s & 63);
    for (int64_t j = 0; j < q; ++j) dst[j] = src[j];
    if (q == nw) return;
    if (r == 0) {
        for (int64_t j = q; j < nw; ++j) dst[j] = src[j] | src[j - q];
    } else {
        dst[q] = src[q] | src[0] << r;
        for (int64_t j = q + 1; j < nw; ++j)
            dst[j] = src[j] | src[j - q] << r | src[j - q - 1] >> (64 - r);
    }
}

/* Grow every set bit i of a into i, i + stride, ..., i + (width - 1) * stride: log2(width)
 * shifted ORs over the whole array, through tmp (both nw words); returns the array holding
 * the result (a or tmp). */
static uint64_t *dilate(uint64_t *a, uint64_t *tmp, int64_t nw, int64_t width, int64_t stride) {
    for (int64_t cur = 1; cur < width;) {
        const int64_t s = cur < width - cur ? cur : width - cur;
        or_shift(tmp, a, nw, s * stride);
        uint64_t *t = a;
        a = tmp;
        tmp = t;
        cur += s;
    }
    return a;
}

/* dst |= bits 0 .. len - 1 of src, placed at bit pos of dst */
static void or_bits_at(uint64_t *dst, int64_t pos, const uint64_t *src, int64_t len) {
    const int r = (int)(pos & 63);
    uint64_t *d = dst + (pos >> 6);
    for (int64_t j = 0; j * 64 < len; ++j) {
        uint64_t v = src[j];
        if (len - j * 64 < 64) v &= ((uint64_t)1 << (len - j * 64)) - 1;
        d[j] |= v << r;
        d[j + 1] |= (v >> 1) >> (63 - r);
    }
}

static inline uint32_t bits8(const uint64_t *a, int64_t pos) { /* bits pos .. pos + 7 */
    uint16_t t;
    memcpy(&t, (const uint8_t *)a + (pos >> 3), 2);
    return (uint32_t)(t >> (pos & 7)) & 0xffU;
}

/* The seed table of maps 0 .. maps - 1 (S positions each): at seed-grid index t (map t / V,
 * the (Dv, Hv, Wv) grid of the positions whose block fits), the bit position of that seed in
 * the maps' bit array. */
static void seed_table(uint32_t *at, int64_t maps, int64_t S, int64_t H, int64_t W, int64_t Dv,
                       int64_t Hv, int64_t Wv) {
    int64_t t = 0;
    for (int64_t m = 0; m < maps; ++m)
        for (int64_t d = 0; d < Dv; ++d)
            for (int64_t h = 0; h < Hv; ++h)
                for (int64_t w = 0; w < Wv; ++w) at[t++] = (uint32_t)(m * S + (d * H + h) * W + w);
}

typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
typedef uint64_t v4q __attribute__((vector_size(32)));
static const v4q bit4lo = {1, 2, 4, 8}, bit4hi = {16, 32, 64, 128};

/* om[i] = xm[i] * scale[i], or 0 where bit off + i of mask is set; i < S */
static void apply_f32(const float *restrict xm, float *restrict om, const float *restrict scale,
                      const uint64_t *mask, int64_t off, int64_t S) {
    int64_t i = 0;
    if ((off & 7) == 0) { /* whole bytes of the mask: a table lookup per 8 elements */
        const uint8_t *mb = (const uint8_t *)mask + (off >> 3);
        for (; i + 8 <= S; i += 8) {
            v8f xv, sv;
            memcpy(&xv, xm + i, 32);
            memcpy(&sv, scale + i, 32);
            const v8i r = (v8i)(xv * sv) & keep8[mb[i >> 3]];
            memcpy(om + i, &r, 32);
        }
    }
    for (; i + 8 <= S; i += 8) {
        v8f xv, sv;
        memcpy(&xv, xm + i, 32);
        memcpy(&sv, scale + i, 32);
        const v8i r = (v8i)(xv * sv) & keep8[bits8(mask, off + i)];
        memcpy(om + i, &r, 32);
    }
    for (; i < S; ++i) {
        const int64_t p = off + i;
        om[i] = (mask[p >> 6] >> (p & 63)) & 1 ? 0.0f : xm[i] * scale[i];
    }
}

/* apply_f32 with the same scale s everywhere (Dropout2d, blocks as large as the map): one load
 * fewer per element */
static void apply_uniform_f32(const float *restrict xm, float *restrict om, float s,
                              const uint64_t *mask, int64_t off, int64_t S) {
    int64_t i = 0;
    const v8f sv = (v8f){0} + s;
    if ((off & 7) == 0) {
        const uint8_t *mb = (const uint8_t *)mask + (off >> 3);
        for (; i + 8 <= S; i += 8) {
            v8f xv;
            memcpy(&xv, xm + i, 32);
            const v8i r = (v8i)(xv * sv) & keep8[mb[i >> 3]];
            memcpy(om + i, &r, 32);
        }
    }
    for (; i + 8 <= S; i += 8) {
        v8f xv;
        memcpy(&xv, xm + i, 32);
        const v8i r = (v8i)(xv * sv) & keep8[bits8(mask, off + i)];
        memcpy(om + i, &r, 32);
    }
    for (; i < S; ++i) {
        const int64_t p = off + i;
        om[i] = (mask[p >> 6] >> (p & 63)) & 1 ? 0.0f : xm[i] * s;
    }
}

/* om[i] = xm[i] * s, i < len; zeros (x not read) if s == 0 */
static inline __attribute__((always_inline)) void scale_run_f32_body(const float *restrict xm,
                                                                     float *restrict om,
                                                                     float s, int64_t len) {
    if (s == 0.0f) {
        memset(om, 0, (size_t)len * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < len; ++i) om[i] = xm[i] * s;
}

static void scale_run_f32(const float *restrict xm, float *restrict om, float s, int64_t len) {
    scale_run_f32_body(xm, om, s, len);
}

static void scale_run_f64(const double *restrict xm, double *restrict om, double s,
                          int64_t len) {
    if (s == 0.0) {
        memset(om, 0, (size_t)len * sizeof(double));
        return;
    }
    for (int64_t i = 0; i < len; ++i) om[i] = xm[i] * s;
}

#ifdef HAVE_AVX512_CLONES
/* The float32 passes on 16 lanes: the mask of 16 elements is 16 bits of the bit array, the
 * dropped lanes cleared by a zero-masked multiply (no table). Same values as the generic ones.
 * scale per element, or s everywhere (scale == NULL). */
AVX512_TARGET static inline __attribute__((always_inline)) void apply_avx512_body(
    const float *restrict xm, float *restrict om, const float *restrict scale, float s,
    const uint64_t *mask, int64_t off, int64_t S) {
    int64_t i = 0;
    const __m512 sv = _mm512_set1_ps(s);
    if ((off & 7) == 0) {
        const uint8_t *mb = (const uint8_t *)mask + (off >> 3);
        for (; i + 16 <= S; i += 16) {
            uint16_t m;
            memcpy(&m, mb + (i >> 3), 2);
            const __m512 f = scale ? _mm512_loadu_ps(scale + i) : sv;
            _mm512_storeu_ps(om + i,
                             _mm512_maskz_mul_ps((__mmask16)~m, _mm512_loadu_ps(xm + i), f));
        }
    }
    if (i < S) {
        if (scale)
            apply_f32(xm + i, om + i, scale + i, mask, off + i, S - i);
        else
            apply_uniform_f32(xm + i, om + i, s, mask, off + i, S - i);
    }
}

AVX512_TARGET static void apply_f32_avx512(const float *restrict xm, float *restrict om,
                                           const float *restrict scale, const uint64_t *mask,
                                           int64_t off, int64_t S) {
    apply_avx512_body(xm, om, scale, 0.0f, mask, off, S);
}

AVX512_TARGET static void apply_uniform_f32_avx512(const float *restrict xm,
                                                   float *restrict om, float s,
                                                   const uint64_t *mask, int64_t off,
                                                   int64_t S) {
    apply_avx512_body(xm, om, NULL, s, mask, off, S);
}

AVX512_TARGET static void scale_run_f32_avx512(const float *restrict xm, float *restrict om,
                                               float s, int64_t len) {
    scale_run_f32_body(xm, om, s, len);
}
#endif

typedef void (*apply_fn)(const float *restrict, float *restrict, const float *restrict,
                         const uint64_t *, int64_t, int64_t);
typedef void (*apply_uniform_fn)(const float *restrict, float *restrict, float,
                                 const uint64_t *, int64_t, int64_t);
typedef void (*scale_run_fn)(const float *restrict, float *restrict, float, int64_t);

/* The float32 passes of the clones in use (plugdrop_isa) */
static void f32_passes(apply_fn *apply, apply_uniform_fn *uniform, scale_run_fn *run) {
    *apply = apply_f32;
    *uniform = apply_uniform_f32;
    *run = scale_run_f32;
#ifdef HAVE_AVX512_CLONES
    if (isa == 1) {
        *apply = apply_f32_avx512;
        *uniform = apply_uniform_f32_avx512;
        *run = scale_run_f32_avx512;
    }
#endif
}

static void apply_f64(const double *restrict xm, double *restrict om,
                      const double *restrict scale, const uint64_t *mask, int64_t off,
                      int64_t S) {
    int64_t i = 0;
    for (; i + 8 <= S; i += 8) {
        const v4q bits = (v4q){0} + (uint64_t)bits8(mask, off + i);
        v4d x0, x1, s0, s1;
        memcpy(&x0, xm + i, 32);
        memcpy(&x1, xm + i + 4, 32);
        memcpy(&s0, scale + i, 32);
        memcpy(&s1, scale + i + 4, 32);
        const v4l r0 = (v4l)(x0 * s0) & (v4l)((bits & bit4lo) == 0);
        const v4l r1 = (v4l)(x1 * s1) & (v4l)((bits & bit4hi) == 0);
        memcpy(om + i, &r0, 32);
        memcpy(om + i + 4, &r1, 32);
    }
    for (; i < S; ++i) {
        const int64_t p = off + i;
        om[i] = (mask[p >> 6] >> (p & 63)) & 1 ? 0.0 : xm[i] * scale[i];
    }
}

typedef struct {
    const void *x;
    void *out;
    const void *scale;
    rng_t rng;
    int64_t x_bstride, out_bstride;
    int64_t C, D, H, W, bd, bh, bw;
    int channels_last;
    int shared;
    int64_t align; /* channels-first: maps per group are a multiple of this (see below) */
    int64_t u0, u1; /* work units: maps (b, c) if channels-first, samples if channels-last */
    int failed;
} job_t;

/* Groups of maps start at multiples of this many maps: then their first position is a multiple
 * of 64 bits (whole words of the bit arrays). */
static int64_t map_align(int64_t S) {
    int64_t a = 64, s = S;
    while (a > 1 && (s & 1) == 0) {
        a >>= 1;
        s >>= 1;
    }
    return a;
}

/* Slices of the masked pass between which the next group's draws run (the pipeline of
 * channels_first) */
#define PIPE_SLICES 4

/* The seeds in m (bits 0 .. bits - 1; m and t have nw words, zero past bits) grown into their
 * blocks; returns the array holding the result (m or t), zero past bits. */
static uint64_t *grow_blocks(uint64_t *m, uint64_t *t, int64_t bits, int64_t bw, int64_t bh,
                             int64_t bd, int64_t W, int64_t HW) {
    const int64_t words = (bits + 63) / 64;
    uint64_t *res = dilate(m, t, words, bw, 1);
    res = dilate(res, res == m ? t : m, words, bh, W);
    res = dilate(res, res == m ? t : m, words, bd, HW);
    res[words] = res[words + 1] = 0;
    return res;
}

/* Below this map size, runs of consecutive maps are written in one go (a copy of the scale
 * map per map of a group) instead of map by map. */
#define SMALL_MAP 256
/* bytes of channels-first scratch arrays taken on the stack (a small call's: no allocation) */
#define SCRATCH_ON_STACK 8192

/* Channels-first maps u0 .. u1 - 1 (u0 a multiple of job->align). The seeds of a group of maps
 * are drawn on their seed grid, placed as bits on the maps' positions (seed_table), grown into
 * their blocks by shifted ORs of the whole bit array (a block never leaves its map: its seed
 * fits), and the maps written in one pass that multiplies by the scale and clears the dropped
 * elements: no work per element of a block. */
static void channels_first(job_t *job, int dtype) {
    const int64_t C = job->C, H = job->H, W = job->W, S = job->D * H * W;
    const int64_t bd = job->bd, bh = job->bh, bw = job->bw;
    const int64_t Dv = job->D - bd + 1, Hv = H - bh + 1, Wv = W - bw + 1, V = Dv * Hv * Wv;
    const int shared = job->shared;
    const int64_t a = job->align, es = dtype == 0 ? 4 : 8;
    apply_fn apply32;
    apply_uniform_fn uniform32;
    scale_run_fn run32;
    f32_passes(&apply32, &uniform32, &run32);
    int64_t gm = a * ((GROUP / S + a - 1) / a); /* maps per group */
    if (gm < a) gm = a;
    if (gm > job->u1 - job->u0) gm = a * ((job->u1 - job->u0 + a - 1) / a); /* few maps */
    const int64_t sw = (S + 63) / 64 + 2;      /* words of one map's mask (shared) */
    const int64_t nw = (gm * S + 63) / 64 + 2; /* + padding for bits8 and or_bits_at */
    const int64_t nv = shared ? V : gm * V;    /* seeds drawn at a time (seed-grid positions) */
    /* whole maps: bit u - u0 says map u is dropped (all the thread's maps drawn at once: the
     * generator's vectors need many blocks of 256 positions) */
    const int64_t dw = shared ? 1 : (job->u1 - job->u0 + 63) / 64;
    /* The scratch arrays, in one piece: on the stack for a small call (a hooked call on a
     * small tensor pays no allocation), else one allocation. Each array starts at a multiple
     * of 64 bytes of the piece. */
    size_t parts[8] = {(size_t)nw * 8, (size_t)nw * 8, (size_t)nw * 8, (size_t)nw * 8,
                       (size_t)(2 * sw) * 8, (size_t)dw * 8, (size_t)nv * 4,
                       S < SMALL_MAP ? (size_t)(gm * S * es) : 0};
    size_t total = 0;
    for (int i = 0; i < 8; ++i) total += (parts[i] + 63) & ~(size_t)63;
    _Alignas(64) unsigned char local[SCRATCH_ON_STACK];
    unsigned char *piece = total <= sizeof local ? local : (unsigned char *)malloc(total);
    if (!piece) {
        job->failed = 1;
        return;
    }
    unsigned char *at_part[8];
    for (size_t i = 0, off = 0; i < 8; off += (parts[i] + 63) & ~(size_t)63, ++i)
        at_part[i] = piece + off;
    uint64_t *mask = (uint64_t *)at_part[0], *tmp = (uint64_t *)at_part[1];
    uint64_t *mask2 = (uint64_t *)at_part[2], *tmp2 = (uint64_t *)at_part[3];
    uint64_t *smask = (uint64_t *)at_part[4], *drawn = (uint64_t *)at_part[5];
    uint32_t *at = (uint32_t *)at_part[6];
    void *srep = S < SMALL_MAP ? (void *)at_part[7] : NULL;
    memset(drawn, 0, parts[5]);
    seed_table(at, shared ? 1 : gm, S, H, W, Dv, Hv, Wv);
    if (srep)
        for (int64_t k = 0; k < gm; ++k)
            memcpy((char *)srep + k * S * es, job->scale, (size_t)(S * es));
    const int whole = V == 1;
    int uniform = 1; /* the same scale at every position */
    for (int64_t i = 1; i < S && uniform; ++i)
        uniform = memcmp((const char *)job->scale + i * es, job->scale, (size_t)es) == 0;
    /* Each map's own seeds, blocks smaller than the map: a pipeline. The masked pass of one
     * group of maps is bound by its stores, the draws of the next by arithmetic, so the next
     * group's draws are done in parts between slices of this group's pass, while the stores
     * drain. The draws of a group do not depend on how they are split (draw_part). */
    int64_t u_done = job->u0;
    if (!shared && !whole && job->u1 > job->u0) {
        uint64_t *cm = mask, *ct = tmp, *nm = mask2, *nt = tmp2;
        int64_t u = job->u0, n = gm < job->u1 - u ? gm : job->u1 - u;
        memset(cm, 0, (size_t)nw * 8);
        draw_range(&job->rng, u * V, n * V, at, cm, NULL, 0, -1);
        uint64_t *res = grow_blocks(cm, ct, n * S, bw, bh, bd, W, H * W);
        while (u < job->u1) {
            const int64_t un = u + n;
            const int64_t nn = un < job->u1 ? (gm < job->u1 - un ? gm : job->u1 - un) : 0;
            const int64_t slice = ((n * S + PIPE_SLICES - 1) / PIPE_SLICES + 63) & ~(int64_t)63;
            int64_t parts = nn > 0 ? 0 : PIPE_SLICES; /* parts of the next group's draws done */
            if (nn > 0) memset(nm, 0, (size_t)nw * 8);
            for (int64_t k = 0; k < n;) {
                const int64_t m = u + k, b = m / C, c = m - b * C;
                /* small maps: runs of maps consecutive in memory (one sample) in one go */
                const int64_t run = S < SMALL_MAP ? (C - c < n - k ? C - c : n - k) : 1;
                const int64_t len = run * S, off = k * S;
                const int64_t so = srep ? off : 0; /* the scale of element e: at so + e */
                for (int64_t e = 0; e < len;) {
                    const int64_t pl = len - e < slice ? len - e : slice;
                    const int64_t xo = b * job->x_bstride + c * S + e;
                    const int64_t oo = b * job->out_bstride + c * S + e;
                    if (dtype == 0 && uniform)
                        uniform32((const float *)job->x + xo, (float *)job->out + oo,
                                  ((const float *)job->scale)[0], res, off + e, pl);
                    else if (dtype == 0)
                        apply32((const float *)job->x + xo, (float *)job->out + oo,
                                (const float *)(srep ? srep : job->scale) + so + e, res,
                                off + e, pl);
                    else
                        apply_f64((const double *)job->x + xo, (double *)job->out + oo,
                                  (const double *)(srep ? srep : job->scale) + so + e, res,
                                  off + e, pl);
                    e += pl;
                    if (parts < PIPE_SLICES) /* a part of the next group's draws */
                        draw_part(&job->rng, un * V, nn * V, at, nm, parts++, PIPE_SLICES);
                }
                k += run;
            }
            if (nn > 0) {
                while (parts < PIPE_SLICES)
                    draw_part(&job->rng, un * V, nn * V, at, nm, parts++, PIPE_SLICES);
                res = grow_blocks(nm, nt, nn * S, bw, bh, bd, W, H * W);
                uint64_t *t = cm;
                cm = nm;
                nm = t;
                t = ct;
                ct = nt;
                nt = t;
            }
            u = un;
            n = nn;
        }
        u_done = job->u1;
    }
    if (!shared && u_done < job->u1) /* whole maps (the pipeline did not run): all at once */
        draw_range(&job->rng, u_done, job->u1 - u_done, NULL, drawn, NULL, 0, -1);
    int64_t smask_b = -1; /* shared: the sample whose mask is in sres */
    int64_t gmask_b = -1, gmask_n = 0; /* shared: the sample and maps of the group in mask */
    uint64_t *sres = smask;
    for (int64_t u = u_done; u < job->u1;) {
        const int64_t n = gm < job->u1 - u ? gm : job->u1 - u;
        uint64_t *res = mask;
        if (!shared) {
            /* whole maps: map u + k is dropped iff bit u + k - u0 of drawn is set */
            const int64_t d0 = u - u_done;
            if (uniform) {
                /* Maps dropped whole or scaled by one number (Dropout2d, blocks as large as
                 * the map): runs of consecutive maps in the same state, zero-filled without
                 * reading x or multiplied by a constant; no bit arrays. */
                for (int64_t k = 0; k < n;) {
                    const int64_t m = u + k, b = m / C, c = m - b * C;
                    const int drop = drawn[(d0 + k) >> 6] >> ((d0 + k) & 63) & 1;
                    int64_t run = 1;
                    while (run < C - c && k + run < n &&
                           (int)(drawn[(d0 + k + run) >> 6] >> ((d0 + k + run) & 63) & 1) == drop)
                        ++run;
                    if (dtype == 0)
                        run32((const float *)job->x + b * job->x_bstride + c * S,
                              (float *)job->out + b * job->out_bstride + c * S,
                              drop ? 0.0f : ((const float *)job->scale)[0], run * S);
                    else
                        scale_run_f64((const double *)job->x + b * job->x_bstride + c * S,
                                      (double *)job->out + b * job->out_bstride + c * S,
                                      drop ? 0.0 : ((const double *)job->scale)[0], run * S);
                    k += run;
                }
                u += n;
                continue;
            }
            /* the block is the map: a map with a seed is dropped whole */
            memset(tmp, 0, (size_t)nw * 8);
            for (int64_t k = 0; k < n; ++k)
                if (drawn[(d0 + k) >> 6] >> ((d0 + k) & 63) & 1) set_run(tmp, k * S, S);
            res = tmp;
        } else if (u / C != (u + n - 1) / C || u / C != gmask_b || n != gmask_n) {
            /* (a group of maps within the sample of the previous one, as many maps: its
             * mask is the same, the sample's repeated from bit 0: kept) */
            gmask_b = u / C == (u + n - 1) / C ? u / C : -1;
            gmask_n = n;
            memset(mask, 0, (size_t)nw * 8);
            for (int64_t k = 0; k < n; ++k) {
                const int64_t b = (u + k) / C;
                if (b != smask_b) { /* one sample's seeds serve its C maps */
                    memset(smask, 0, (size_t)sw * 8);
                    draw_range(&job->rng, b * V, V, at, smask, NULL, 0, -1);
                    sres = grow_blocks(smask, smask + sw, S, bw, bh, bd, W, H * W);
                    smask_b = b;
                }
                or_bits_at(mask, k * S, sres, S);
            }
        }
        /* runs of maps consecutive in memory (one sample), written in one go if small */
        for (int64_t k = 0; k < n;) {
            const int64_t m = u + k, b = m / C, c = m - b * C;
            const int64_t run = S < SMALL_MAP ? (C - c < n - k ? C - c : n - k) : 1;
            const int64_t len = run * S, off = k * S;
            const void *sc = srep ? (const char *)srep + off * es : job->scale;
            if (dtype == 0 && uniform) {
                uniform32((const float *)job->x + b * job->x_bstride + c * S,
                                  (float *)job->out + b * job->out_bstride + c * S,
                                  ((const float *)job->scale)[0], res, off, len);
            } else if (dtype == 0) {
                apply32((const float *)job->x + b * job->x_bstride + c * S,
                          (float *)job->out + b * job->out_bstride + c * S,
                          (const float *)sc, res, off, len);
            } else {
                apply_f64((const double *)job->x + b * job->x_bstride + c * S,
                          (double *)job->out + b * job->out_bstride + c * S,
                          (const double *)sc, res, off, len);
            }
            k += run;
        }
        u += n;
    }
    if (piece != local) free(piece);
}

/* Channels-last samples u0 .. u1 - 1: x * scale, then the block of each seed zeroed. */
#define DEFINE_KERNEL(NAME, T)                                                                \
static void NAME(job_t *job) {                                                                 \
    const int64_t C = job->C, H = job->H, W = job->W;                                          \
    const int64_t bd = job->bd, bh = job->bh, bw = job->bw;                                    \
    const int64_t Hv = H - bh + 1, Wv = W - bw + 1;                                            \
    const int64_t V = (job->D - bd + 1) * Hv * Wv, S = job->D * H * W;                         \
    const int shared = job->shared;                                                            \
    const T *restrict scale = (const T *)job->scale;                                           \
    const int64_t per = shared ? V : C * V; /* seed-grid positions per sample */               \
    int64_t *hits = (int64_t *)malloc((size_t)(per + 1) * sizeof(int64_t));                    \
    if (!hits) { job->failed = 1; return; }                                                    \
    for (int64_t b = job->u0; b < job->u1; ++b) {                                              \
        const T *restrict x = (const T *)job->x + b * job->x_bstride;                          \
        T *restrict out = (T *)job->out + b * job->out_bstride;                                \
        for (int64_t i = 0; i < S; ++i) {                                                      \
            const T sc = scale[i];                                                             \
            const T *restrict xr = x + i * C;                                                  \
            T *restrict orow = out + i * C;                                                    \
            for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * sc;                              \
        }                                                                                      \
        const int64_t nh = draw_range(&job->rng, b * per, per, NULL, NULL, hits, 0, -1);      \
        for (int64_t k = 0; k < nh; ++k) {                                                     \
            const int64_t c = shared ? 0 : hits[k] / V, r = hits[k] - c * V;                   \
            const int64_t w0 = r % Wv, h0 = (r / Wv) % Hv, d0 = r / (Wv * Hv);                 \
            const int64_t base = (d0 * H + h0) * W + w0;                                       \
            for (int64_t d = 0; d < bd; ++d)                                                   \
                for (int64_t h = 0; h < bh; ++h) {                                             \
                    T *restrict o = out + (base + (d * H + h) * W) * C;                        \
                    if (shared) {                                                              \
                        for (int64_t i = 0; i < bw * C; ++i) o[i] = 0;                         \
                    } else {                                                                   \
                        for (int64_t w = 0; w < bw; ++w) o[w * C + c] = 0;                     \
                    }                                                                          \
                }                                                                              \
        }                                                                                      \
    }                                                                                          \
    free(hits);                                                                                \
}

DEFINE_KERNEL(kernel_f32, float)
DEFINE_KERNEL(kernel_f64, double)

/* Elements below which one thread does the whole call: waking a second thread costs more than
 * it saves, and on a shared CPU a woken thread may wait a whole time slice for a core. */
#define GRAIN 65536

/* dtype: 0 = float32, 1 = float64. Returns 0 on success, -1 if out of memory.
 * Built with OpenMP, it runs on the OpenMP runtime PyTorch already loaded (same soname), so
 * it shares PyTorch's worker threads instead of competing with them. */
int plugdrop_blockdrop(int dtype, int threads, const void *x, void *out, const void *scale,
                       int64_t k0, int64_t k1, const int64_t *law, int64_t B, int64_t x_bstride,
                       int64_t out_bstride, int64_t C, int64_t D, int64_t H, int64_t W,
                       int64_t bd, int64_t bh, int64_t bw, int channels_last, int shared) {
    void (*kernel)(job_t *) = dtype == 0 ? kernel_f32 : kernel_f64;
    plugdrop_isa(-1); /* pick the clones before any thread runs */
    const int64_t units = channels_last ? B : B * C;
    if (units <= 0) return 0;
    const int64_t numel = B * C * D * H * W;
    /* channels-first groups of maps start at multiples of align maps */
    const int64_t align =
        channels_last ? 1 : map_align(D * H * W);
    const int64_t blocks = (units + align - 1) / align;
    if (threads > numel / GRAIN) threads = (int)(numel / GRAIN);
    if (threads > blocks) threads = (int)blocks;
    if (threads > 64) threads = 64;
    if (threads < 1) threads = 1;
    job_t proto;
    proto.x = x; proto.out = out; proto.scale = scale;
    proto.rng.k0 = (uint32_t)k0; proto.rng.k1 = (uint32_t)k1;
    proto.rng.none = law[0] > 0xffffffffLL;
    for (int j = 0; j < 16; ++j) {
        proto.rng.T[j] = (uint32_t)law[j];
        proto.rng.R[j] = (uint32_t)law[16 + j];
    }
    proto.x_bstride = x_bstride; proto.out_bstride = out_bstride;
    proto.C = C; proto.D = D; proto.H = H; proto.W = W; proto.bd = bd; proto.bh = bh;
    proto.bw = bw; proto.channels_last = channels_last; proto.shared = shared;
    proto.align = align;
    proto.failed = 0;
    int failed = 0;
    if (threads == 1) {
        proto.u0 = 0; proto.u1 = units;
        if (channels_last) kernel(&proto); else channels_first(&proto, dtype);
        return proto.failed ? -1 : 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(|| : failed)
    {
        job_t job = proto;
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        job.u0 = blocks * t / n * align;
        job.u1 = t == n - 1 ? units : blocks * (t + 1) / n * align;
        if (channels_last) kernel(&job); else channels_first(&job, dtype);
        failed = failed || job.failed;
    }
#else
    proto.u0 = 0; proto.u1 = units;
    if (channels_last) kernel(&proto); else channels_first(&proto, dtype);
    failed = proto.failed;
#endif
    return failed ? -1 : 0;
}

/* plugdrop_blockdrop with the arguments that stay the same from call to call of one geometry
 * packed into an array once (cext.Prepared), so that a foreign call converts 6 arguments, not
 * 20: a = {dtype, scale, law, B, x_bstride, out_bstride, C, D, H, W, bd, bh, bw,
 * channels_last, shared}, scale and law as addresses. */
int plugdrop_blockdrop_packed(const int64_t *a, int threads, const void *x, void *out,
                              int64_t k0, int64_t k1) {
    return plugdrop_blockdrop((int)a[0], threads, x, out, (const void *)(intptr_t)a[1], k0, k1,
                              (const int64_t *)(intptr_t)a[2], a[3], a[4], a[5], a[6], a[7],
                              a[8], a[9], a[10], a[11], a[12], (int)a[13], (int)a[14]);
}

/* plugdrop_blockdrop_packed with the key read from memory (key[0], key[1]: the tensor torch's
 * generator drew it into), so that it is not read back into Python first. */
int plugdrop_blockdrop_key(const int64_t *a, int threads, const void *x, void *out,
                           const int64_t *key) {
    return plugdrop_blockdrop_packed(a, threads, x, out, key[0], key[1]);
}

/* ---------------------------------------------------------------------------- Gaussian noise
 *
 * out = x + std * z  (or x * (1 + std * z) with multiplicative != 0), z ~ N(0, 1) per element,
 * for float32 tensors taken in storage order. The elements come in chunks of 2 NP: chunk c
 * holds the Box-Muller pairs p = NP c + j, j < NP, cosine at element 2 NP c + j and sine at
 * 2 NP c + NP + j, of the uniforms u = (A(p) >> 8 + 1/2) / 2**24 and v = (B(p) >> 8) / 2**24
 * (A, B as above, p a 64-bit counter): r = sqrt(-2 log u), z = (r cos 2 pi v, r sin 2 pi v).
 * log is a polynomial in m - 1 (u = 2**e m; absolute error below 1e-8), sin and cos are Taylor
 * polynomials on a quadrant (error below 1e-7), so a chunk is straight-line code that the
 * compiler vectorizes; on a CPU with AVX-512 the chunk runs on 16 lanes (a clone of the same
 * code, chosen at run time). A chunk never straddles a multiple of 2**32 pairs, and threads
 * split at chunk boundaries, so z depends on the key and the element's index only. */

#define NP 256
/* chunks ahead whose x and out noise_range fetches (16 KB ahead) */
#define NOISE_AHEAD 4

static inline uint32_t f2u(float f) { uint32_t i; memcpy(&i, &f, 4); return i; }
static inline float u2f(uint32_t i) { float f; memcpy(&f, &i, 4); return f; }

/* log u, u in (0, 1]: u = 2**e m with m in [sqrt(1/2), sqrt(2)); log(1 + f), f = m - 1, as
 * f - f**2 / 2 + f**3 P(f), P of degree 6 fitted by least squares on Chebyshev nodes */
static inline float log_unit(float u) {
    const uint32_t i = f2u(u);
    const uint32_t big = (i & 0x7fffffU) > 0x3504f3U;
    const float e = (float)((int32_t)(i >> 23) - 127 + (int32_t)big);
    const float f = u2f((i & 0x7fffffU) | (0x3f800000U - (big << 23))) - 1.0f, f2 = f * f;
    float p = 8.479153365e-02f;
    p = p * f - 1.431677192e-01f;
    p = p * f + 1.502080411e-01f;
    p = p * f - 1.657457203e-01f;
    p = p * f + 1.995141059e-01f;
    p = p * f - 2.500129342e-01f;
    p = p * f + 3.333426714e-01f;
    return e * 0.69314718056f + (f - 0.5f * f2 + f2 * f * p);
}

static inline __attribute__((always_inline)) void noise_chunk_body(float *restrict z,
                                                                   uint64_t p0, uint32_t k0,
                                                                   uint32_t k1) {
    const uint32_t base = (uint32_t)p0, hi = (uint32_t)(p0 >> 32);
    for (uint32_t j = 0; j < NP; ++j) {
        const uint32_t lo = base + j;
        const uint32_t a = mix(mix(lo ^ k0) ^ hi ^ k1);
        const uint32_t b = mix(mix(lo ^ k1) ^ hi ^ k0);
        const float u = ((float)(int32_t)(a >> 8) + 0.5f) * 0x1p-24f;
        const float r = sqrtf(-2.0f * log_unit(u));
        /* 2 pi v = q pi / 2 + ang: the quadrant q from the top 2 bits, ang in [0, pi / 2) */
        const float ang = (float)(int32_t)((b >> 8) & 0x3fffffU) * (0x1p-22f * 1.57079632679f);
        const float a2 = ang * ang;
        const float sn = ang * (1.0f + a2 * (-1.6666667e-1f + a2 * (8.3333333e-3f + a2 *
                         (-1.9841270e-4f + a2 * (2.7557319e-6f + a2 * -2.5052108e-8f)))));
        const float cs = 1.0f + a2 * (-0.5f + a2 * (4.1666667e-2f + a2 * (-1.3888889e-3f +
                         a2 * (2.4801587e-5f + a2 * (-2.7557319e-7f + a2 * 2.0876757e-9f)))));
        const uint32_t q = b >> 30, odd = q & 1;
        const uint32_t ci = odd ? f2u(sn) : f2u(cs), si = odd ? f2u(cs) : f2u(sn);
        z[j] = r * u2f(ci ^ ((((q + 1) >> 1) & 1) << 31));
        z[NP + j] = r * u2f(si ^ ((q >> 1) << 31));
    }
}

typedef void (*noise_chunk_fn)(float *restrict, uint64_t, uint32_t, uint32_t);

static void noise_chunk_base(float *restrict z, uint64_t p0, uint32_t k0, uint32_t k1) {
    noise_chunk_body(z, p0, k0, k1);
}

#ifdef HAVE_AVX512_CLONES
AVX512_TARGET static void noise_chunk_avx512(float *restrict z, uint64_t p0, uint32_t k0,
                                             uint32_t k1) {
    noise_chunk_body(z, p0, k0, k1);
}
#endif

static void noise_range(const float *restrict x, float *restrict out, int64_t i0, int64_t i1,
                        uint32_t k0, uint32_t k1, float std, int multiplicative,
                        noise_chunk_fn chunk) {
    float z[2 * NP] __attribute__((aligned(64)));
    for (int64_t c = i0 / (2 * NP); c * 2 * NP < i1; ++c) {
        /* x and out of the chunk NOISE_AHEAD chunks on, fetched while this one's normals are
         * computed: the chunk is compute-bound, its pass memory-bound, and without the hints
         * the two did not overlap (8-20% faster with them, most when x comes from memory) */
        const int64_t pc = (c + NOISE_AHEAD) * 2 * NP;
        if (pc + 2 * NP <= i1)
            for (int64_t l = 0; l < 2 * NP; l += 16) {
                __builtin_prefetch(x + pc + l, 0, 3);
                __builtin_prefetch(out + pc + l, 1, 3);
            }
        chunk(z, (uint64_t)c * NP, k0, k1);
        const int64_t e0 = c * 2 * NP > i0 ? c * 2 * NP : i0;
        const int64_t e1 = (c + 1) * 2 * NP < i1 ? (c + 1) * 2 * NP : i1;
        const float *restrict zz = z + (e0 - c * 2 * NP);
        if (multiplicative) {
            for (int64_t i = 0; i < e1 - e0; ++i) out[e0 + i] = x[e0 + i] * (1.0f + std * zz[i]);
        } else {
            for (int64_t i = 0; i < e1 - e0; ++i) out[e0 + i] = x[e0 + i] + std * zz[i];
        }
    }
}

int plugdrop_noise(int threads, const float *x, float *out, int64_t n, int64_t k0, int64_t k1,
                   double std, int multiplicative) {
    noise_chunk_fn chunk = noise_chunk_base;
#ifdef HAVE_AVX512_CLONES
    if (plugdrop_isa(-1) == 1) chunk = noise_chunk_avx512;
#endif
    if (threads > n / GRAIN) threads = (int)(n / GRAIN);
    if (threads > 64) threads = 64;
    if (threads < 1) threads = 1;
    const int64_t chunks = (n + 2 * NP - 1) / (2 * NP);
    if (threads == 1) {
        noise_range(x, out, 0, n, (uint32_t)k0, (uint32_t)k1, (float)std, multiplicative, chunk);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t i0 = chunks * t / nt * 2 * NP;
        const int64_t i1 = t == nt - 1 ? n : chunks * (t + 1) / nt * 2 * NP;
        noise_range(x, out, i0, i1, (uint32_t)k0, (uint32_t)k1, (float)std, multiplicative,
                    chunk);
    }
#else
    (void)chunks;
    noise_range(x, out, 0, n, (uint32_t)k0, (uint32_t)k1, (float)std, multiplicative, chunk);
#endif
    return 0;
}
