/* plugdrop: fused sparse DropBlock for CPU tensors.
 *
 * out = x * scale (scale broadcast over batch and channels), with the block of every seed
 * zeroed while its map is still in cache: one pass over memory. The seeds are drawn inside the
 * kernel from a counter-based generator (below), keyed by two 32-bit words that plugdrop draws
 * from torch's generator, so torch.manual_seed reproduces every mask, activation checkpointing
 * replays it, and the backward regenerates it from the key alone.
 *
 * The generator draws independent Bernoulli(gamma) seeds over the flattened seed grid
 * (B, C, Dv, Hv, Wv), or (B, 1, Dv, Hv, Wv) with shared != 0, in groups of 8 positions
 * (8g .. 8g + 7) with two counter-based hashes of 64-bit counters,
 *     A(n) = mix(mix(lo(n) ^ k0) ^ hi(n) ^ k1),   B(n) = mix(mix(lo(n) ^ k1) ^ hi(n) ^ k0),
 * where mix is Wellons' "lowbias32" integer hash (x ^= x >> 16; x *= 0x7feb352d;
 * x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16):
 *   - group g holds a seed iff A(g) < round((1 - (1 - gamma)**8) * 2**32);
 *   - if so, its first seed is the first j with B(8g + j) < round(gamma / (1 - (1 - gamma)**(8 - j))
 *     * 2**32) (certainly j = 7 if none before), and each later position j is a seed iff
 *     B(8g + j) < round(gamma * 2**32).
 * That is exactly the law of 8 independent Bernoulli(gamma) draws (to 2**-32), at one hash per
 * 8 positions plus 8 per group that holds a seed. plugdrop/_kernels/cext.py has the same
 * definition in torch ops (the reference).
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

#define CHUNK 256
/* elements per group of maps processed together (channels-first) */
#define GROUP 4096

static inline uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

/* 8 lanes of 32 bits (GCC and clang vector extensions): one AVX2 register */
typedef uint32_t v8u __attribute__((vector_size(32)));
static const v8u iota8 = {0, 1, 2, 3, 4, 5, 6, 7};
static const v8u bit8 = {1, 2, 4, 8, 16, 32, 64, 128};

static inline v8u mix8(v8u x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

typedef struct {
    uint32_t k0, k1;
    uint32_t any;       /* a group of 8 positions holds a seed iff A(group) < any */
    v8u first8;         /* given that, position j is its first seed iff B(8 group + j) < first[j] */
    uint32_t each;      /* after the first seed, position j is a seed iff B(8 group + j) < each */
} rng_t;

static inline uint32_t hash_a(uint64_t n, uint32_t k0, uint32_t k1) {
    return mix(mix((uint32_t)n ^ k0) ^ (uint32_t)(n >> 32) ^ k1);
}

/* Seeds among positions first .. first + count - 1 of the seed grid, as offsets from first,
 * into hits (ascending); returns how many. The positions come in groups of 8 (8g .. 8g + 7):
 * one hash per group decides whether it holds a seed (vectorized, a chunk of groups at a
 * time), and only the rare groups that do hash their 8 positions. */
static int64_t draw(const rng_t *g, int64_t first, int64_t count, int64_t *hits) {
    uint8_t flag[CHUNK + 8];
    int64_t nh = 0;
    const uint32_t k0 = g->k0, k1 = g->k1, any = g->any;
    const int64_t g0 = first >> 3, g1 = (first + count + 7) >> 3;
    for (int64_t c0 = g0; c0 < g1; c0 += CHUNK) {
        const int64_t len = g1 - c0 < CHUNK ? g1 - c0 : CHUNK;
        const uint32_t lo = (uint32_t)c0, hk = (uint32_t)((uint64_t)c0 >> 32) ^ k1;
        if ((uint64_t)lo + (uint64_t)len <= ((uint64_t)1 << 32)) {
            for (uint32_t i = 0; i < (uint32_t)len; ++i)  /* 32-bit lanes */
                flag[i] = mix(mix((lo + i) ^ k0) ^ hk) < any;
        } else { /* the chunk straddles a multiple of 2**32 */
            for (int64_t i = 0; i < len; ++i) flag[i] = hash_a((uint64_t)(c0 + i), k0, k1) < any;
        }
        memset(flag + len, 0, 8);
        for (int64_t i = 0; i < len; i += 8) {
            uint64_t w;
            memcpy(&w, flag + i, 8);
            while (w) {
                const int64_t grp = c0 + i + (__builtin_ctzll(w) >> 3);
                w &= w - 1;
                /* the group's 8 hashes in one vector; its seeds as a bit mask */
                const uint64_t n0 = (uint64_t)grp * 8;
                const uint32_t l0 = (uint32_t)n0, h0 = (uint32_t)(n0 >> 32) ^ k0;
                const v8u b = mix8(mix8((l0 + iota8) ^ k1) ^ h0);
                const v8u lt_first = (v8u)(b < g->first8) & bit8, lt_each = (v8u)(b < g->each) & bit8;
                uint32_t firsts = 0x80, each = 0;
                for (int j = 0; j < 8; ++j) {
                    firsts |= lt_first[j];
                    each |= lt_each[j];
                }
                const int f = __builtin_ctz(firsts);
                uint32_t seeds = (1u << f) | (each & ~((2u << f) - 1u));
                while (seeds) {
                    const int64_t n = (int64_t)n0 + __builtin_ctz(seeds);
                    seeds &= seeds - 1;
                    if (n >= first && n < first + count) hits[nh++] = n - first;
                }
            }
        }
    }
    return nh;
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
    int64_t u0, u1; /* work units: maps (b, c) if channels-first, samples if channels-last */
    int failed;
} job_t;

#define DEFINE_KERNEL(NAME, T)                                                                \
static void NAME(job_t *job) {                                                                 \
    const int64_t C = job->C, H = job->H, W = job->W;                                          \
    const int64_t bd = job->bd, bh = job->bh, bw = job->bw;                                    \
    const int64_t Dv = job->D - bd + 1, Hv = H - bh + 1, Wv = W - bw + 1;                      \
    const int64_t S = job->D * H * W, V = Dv * Hv * Wv;                                        \
    const int shared = job->shared;                                                            \
    const T *restrict scale = (const T *)job->scale;                                           \
    const int64_t per = job->channels_last && !shared ? C * V : V;                             \
    const int64_t group = job->channels_last ? per : (GROUP / S > 1 ? GROUP / S : 1) * V;      \
    int64_t *hits = (int64_t *)malloc((size_t)(group + per + 1) * sizeof(int64_t));            \
    if (!hits) { job->failed = 1; return; }                                                    \
    int64_t *shared_hits = hits + group, shared_b = -1, shared_n = 0;                          \
    /* seed-grid index within a map -> offset of its block's corner within the map */         \
    int64_t *corner = (int64_t *)malloc((size_t)V * sizeof(int64_t));                          \
    void **maps = (void **)malloc((size_t)(GROUP + 1) * sizeof(void *));                       \
    if (!corner || !maps) { free(hits); free(corner); free(maps); job->failed = 1; return; }  \
    for (int64_t r = 0, d = 0; d < Dv; ++d)                                                    \
        for (int64_t h = 0; h < Hv; ++h)                                                       \
            for (int64_t w = 0; w < Wv; ++w) corner[r++] = (d * H + h) * W + w;               \
    for (int64_t u = job->u0; u < job->u1; ++u) {                                              \
        if (!job->channels_last) {                                                             \
            /* a group of maps (about GROUP elements, still in cache when their blocks are   \
             * zeroed); their seed-grid positions are consecutive, drawn in one go */         \
            int64_t u1 = u + (GROUP / S > 1 ? GROUP / S : 1);                                  \
            if (u1 > job->u1) u1 = job->u1;                                                    \
            for (int64_t m = u; m < u1; ++m) {                                                 \
                const int64_t b = m / C, c = m - b * C;                                        \
                const T *restrict xm = (const T *)job->x + b * job->x_bstride + c * S;         \
                T *restrict om = (T *)job->out + b * job->out_bstride + c * S;                 \
                maps[m - u] = om;                                                              \
                for (int64_t i = 0; i < S; ++i) om[i] = xm[i] * scale[i];                      \
            }                                                                                  \
            int64_t nh;                                                                        \
            if (!shared) {                                                                     \
                nh = draw(&job->rng, u * V, (u1 - u) * V, hits);                               \
            } else { /* one sample's seeds serve its C maps: drawn once per sample */         \
                nh = 0;                                                                        \
                for (int64_t m = u; m < u1; ++m) {                                             \
                    const int64_t b = m / C;                                                   \
                    if (b != shared_b) {                                                       \
                        shared_n = draw(&job->rng, b * V, V, shared_hits);                     \
                        shared_b = b;                                                          \
                    }                                                                          \
                    for (int64_t k = 0; k < shared_n; ++k)                                     \
                        hits[nh++] = (m - u) * V + shared_hits[k];                             \
                }                                                                              \
            }                                                                                  \
            /* the map of a seed by a multiplication (corrected once): no branch to        \
             * mispredict per seed; rows of the common widths as unrolled stores */            \
            const double inv_v = 1.0 / (double)V;                                              \
            for (int64_t k = 0; k < nh; ++k) {                                                 \
                int64_t q = (int64_t)((double)hits[k] * inv_v);                                \
                q -= q * V > hits[k];                                                          \
                q += (q + 1) * V <= hits[k];                                                   \
                T *restrict om = (T *)maps[q] + corner[hits[k] - q * V];                       \
                for (int64_t d = 0; d < bd; ++d)                                               \
                    for (int64_t h = 0; h < bh; ++h) {                                         \
                        T *restrict o = om + (d * H + h) * W;                                  \
                        switch (bw) {                                                          \
                        case 3: o[0] = 0; o[1] = 0; o[2] = 0; break;                           \
                        case 5: o[0] = 0; o[1] = 0; o[2] = 0; o[3] = 0; o[4] = 0; break;       \
                        case 7: o[0] = 0; o[1] = 0; o[2] = 0; o[3] = 0; o[4] = 0; o[5] = 0;    \
                                o[6] = 0; break;                                               \
                        default: for (int64_t w = 0; w < bw; ++w) o[w] = 0;                    \
                        }                                                                      \
                    }                                                                          \
            }                                                                                  \
            u = u1 - 1;                                                                        \
        } else {                                                                               \
            const int64_t b = u;                                                               \
            const T *restrict x = (const T *)job->x + b * job->x_bstride;                      \
            T *restrict out = (T *)job->out + b * job->out_bstride;                            \
            for (int64_t i = 0; i < S; ++i) {                                                  \
                const T sc = scale[i];                                                         \
                const T *restrict xr = x + i * C;                                              \
                T *restrict orow = out + i * C;                                                \
                for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * sc;                          \
            }                                                                                  \
            const int64_t nh = draw(&job->rng, b * per, per, hits);                            \
            for (int64_t k = 0; k < nh; ++k) {                                                 \
                const int64_t c = shared ? 0 : hits[k] / V, r = hits[k] - c * V;               \
                const int64_t w0 = r % Wv, h0 = (r / Wv) % Hv, d0 = r / (Wv * Hv);             \
                const int64_t base = (d0 * H + h0) * W + w0;                                   \
                for (int64_t d = 0; d < bd; ++d)                                               \
                    for (int64_t h = 0; h < bh; ++h) {                                         \
                        T *restrict o = out + (base + (d * H + h) * W) * C;                    \
                        if (shared) {                                                          \
                            for (int64_t i = 0; i < bw * C; ++i) o[i] = 0;                     \
                        } else {                                                               \
                            for (int64_t w = 0; w < bw; ++w) o[w * C + c] = 0;                 \
                        }                                                                      \
                    }                                                                          \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    free(hits);                                                                                \
    free(corner);                                                                              \
    free(maps);                                                                                \
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
                       int64_t k0, int64_t k1, const int64_t *thresholds, int64_t B, int64_t x_bstride,
                       int64_t out_bstride, int64_t C, int64_t D, int64_t H, int64_t W,
                       int64_t bd, int64_t bh, int64_t bw, int channels_last, int shared) {
    void (*kernel)(job_t *) = dtype == 0 ? kernel_f32 : kernel_f64;
    const int64_t units = channels_last ? B : B * C;
    if (units <= 0) return 0;
    const int64_t numel = B * C * D * H * W;
    if (threads > numel / GRAIN) threads = (int)(numel / GRAIN);
    if (threads > units) threads = (int)units;
    if (threads > 64) threads = 64;
    if (threads < 1) threads = 1;
    job_t proto;
    proto.x = x; proto.out = out; proto.scale = scale;
    proto.rng.k0 = (uint32_t)k0; proto.rng.k1 = (uint32_t)k1;
    proto.rng.any = (uint32_t)thresholds[0];
    for (int j = 0; j < 8; ++j) proto.rng.first8[j] = (uint32_t)thresholds[1 + j];
    proto.rng.each = (uint32_t)thresholds[9];
    proto.x_bstride = x_bstride; proto.out_bstride = out_bstride;
    proto.C = C; proto.D = D; proto.H = H; proto.W = W; proto.bd = bd; proto.bh = bh;
    proto.bw = bw; proto.channels_last = channels_last; proto.shared = shared;
    proto.failed = 0;
    int failed = 0;
    if (threads == 1) {
        proto.u0 = 0; proto.u1 = units;
        kernel(&proto);
        return proto.failed ? -1 : 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(|| : failed)
    {
        job_t job = proto;
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        job.u0 = units * t / n; job.u1 = units * (t + 1) / n;
        kernel(&job);
        failed = failed || job.failed;
    }
#else
    proto.u0 = 0; proto.u1 = units;
    kernel(&proto);
    failed = proto.failed;
#endif
    return failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------- Gaussian noise
 *
 * out = x + std * z  (or x * (1 + std * z) with multiplicative != 0), z ~ N(0, 1) per element,
 * for float32 tensors taken in storage order. Elements 2p and 2p + 1 get the Box-Muller pair of
 * the uniforms u = (A(p) >> 8 + 1/2) / 2**24 and v = (B(p) >> 8) / 2**24 (A, B as above, p a
 * 64-bit counter): r = sqrt(-2 log u), z = (r cos 2 pi v, r sin 2 pi v). log, sin and cos are
 * evaluated with polynomials (float32 accuracy) so that the loop vectorizes. */

static inline float log_unit(float u) {
    uint32_t i;
    memcpy(&i, &u, 4);
    const uint32_t big = (i & 0x7fffffU) > 0x3504f3U;   /* mantissa above sqrt(2) */
    const int e = (int)(i >> 23) - 127 + (int)big;
    i = (i & 0x7fffffU) | (0x3f800000U - (big << 23)); /* m in [sqrt(1/2), sqrt(2)) */
    float m;
    memcpy(&m, &i, 4);
    const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s; /* log m = 2 atanh s, |s| < 0.172 */
    const float p = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
    return (float)e * 0.69314718056f + 2.0f * s * p;
}

static inline float flip(float v, uint32_t sign) { /* v * (sign ? -1 : 1), sign in {0, 1} */
    uint32_t i;
    memcpy(&i, &v, 4);
    i ^= sign << 31;
    memcpy(&v, &i, 4);
    return v;
}

#define PAIRS 256

static void noise_range(const float *restrict x, float *restrict out, int64_t i0, int64_t i1,
                        uint32_t k0, uint32_t k1, float std, int multiplicative) {
    float z[2 * PAIRS];
    for (int64_t p0 = i0 >> 1; 2 * p0 < i1; p0 += PAIRS) {
        const int64_t np = ((i1 + 1) >> 1) - p0 < PAIRS ? ((i1 + 1) >> 1) - p0 : PAIRS;
        const uint32_t lo = (uint32_t)p0, hi = (uint32_t)((uint64_t)p0 >> 32);
        const int wraps = (uint64_t)lo + (uint64_t)np > ((uint64_t)1 << 32);
        for (uint32_t j = 0; j < (uint32_t)np; ++j) {
            const uint32_t h = hi + (uint32_t)(wraps && lo + j < lo);
            const uint32_t a = mix(mix((lo + j) ^ k0) ^ h ^ k1);
            const uint32_t b = mix(mix((lo + j) ^ k1) ^ h ^ k0);
            const float u = ((float)(a >> 8) + 0.5f) * 0x1p-24f;
            const float r = sqrtf(-2.0f * log_unit(u));
            const uint32_t q = b >> 30;                     /* quadrant of 2 pi v */
            const float ang = (float)((b >> 8) & 0x3fffffU) * 0x1p-22f * 1.57079632679f;
            const float a2 = ang * ang;
            const float sn = ang * (1.0f - a2 / 6 * (1.0f - a2 / 20 * (1.0f - a2 / 42 *
                             (1.0f - a2 / 72 * (1.0f - a2 / 110)))));
            const float cs = 1.0f - a2 / 2 * (1.0f - a2 / 12 * (1.0f - a2 / 30 *
                             (1.0f - a2 / 56 * (1.0f - a2 / 90 * (1.0f - a2 / 132)))));
            const uint32_t odd = q & 1;
            const float c1 = odd * sn + (1 - odd) * cs, s1 = odd * cs + (1 - odd) * sn;
            z[2 * j] = r * flip(c1, ((q + 1) >> 1) & 1);
            z[2 * j + 1] = r * flip(s1, q >> 1);
        }
        const int64_t e0 = 2 * p0 > i0 ? 2 * p0 : i0;
        const int64_t e1 = 2 * (p0 + np) < i1 ? 2 * (p0 + np) : i1;
        const float *restrict zz = z + (e0 - 2 * p0);
        if (multiplicative) {
            for (int64_t i = 0; i < e1 - e0; ++i) out[e0 + i] = x[e0 + i] * (1.0f + std * zz[i]);
        } else {
            for (int64_t i = 0; i < e1 - e0; ++i) out[e0 + i] = x[e0 + i] + std * zz[i];
        }
    }
}

int plugdrop_noise(int threads, const float *x, float *out, int64_t n, int64_t k0, int64_t k1,
                   double std, int multiplicative) {
    if (threads > n / GRAIN) threads = (int)(n / GRAIN);
    if (threads > 64) threads = 64;
    if (threads < 1) threads = 1;
    if (threads == 1) {
        noise_range(x, out, 0, n, (uint32_t)k0, (uint32_t)k1, (float)std, multiplicative);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t i0 = (n / 2 * t / nt) * 2, i1 = t == nt - 1 ? n : (n / 2 * (t + 1) / nt) * 2;
        noise_range(x, out, i0, i1, (uint32_t)k0, (uint32_t)k1, (float)std, multiplicative);
    }
#else
    noise_range(x, out, 0, n, (uint32_t)k0, (uint32_t)k1, (float)std, multiplicative);
#endif
    return 0;
}
