/* plugdrop: fused sparse DropBlock for CPU tensors.
 *
 * out = x * scale (scale broadcast over batch and channels), with the block of every seed
 * zeroed while its map is still in cache: one pass over memory. The seeds are drawn inside the
 * kernel from a counter-based generator (below), keyed by two 32-bit words that plugdrop draws
 * from torch's generator, so torch.manual_seed reproduces every mask, activation checkpointing
 * replays it, and the backward regenerates it from the key alone.
 *
 * The generator: seed-grid position n (a 64-bit counter over the flattened (B, C, Dv, Hv, Wv)
 * grid, or (B, 1, Dv, Hv, Wv) with shared != 0) is a seed iff
 *     h(n) = mix(mix(lo(n) ^ k0) ^ hi(n) ^ k1) < threshold
 * where mix is Wellons' "lowbias32" integer hash (x ^= x >> 16; x *= 0x7feb352d;
 * x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16) and threshold = round(gamma * 2**32).
 * plugdrop/_kernels/cext.py has the same definition in torch ops (the reference).
 *
 * Layout of one sample (the batch stride may differ between x and out):
 *   channels_last == 0:  [C][D][H][W]   (maps contiguous)
 *   channels_last == 1:  [D][H][W][C]   (channels innermost)
 * 1D and 2D maps are passed as 3D with leading sizes of 1.
 */
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <stdlib.h>

#define CHUNK 256

static inline uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

typedef struct {
    uint32_t k0, k1, threshold;
} rng_t;

/* Seeds among positions first .. first + count - 1 of the seed grid, as offsets from first,
 * into hits; returns how many. Hashes a chunk at a time (vectorized), then scans only the
 * chunks that hold a seed. */
static int64_t draw(const rng_t *g, int64_t first, int64_t count, int64_t *hits) {
    uint32_t h[CHUNK];
    int64_t nh = 0;
    for (int64_t c0 = 0; c0 < count; c0 += CHUNK) {
        const int64_t len = count - c0 < CHUNK ? count - c0 : CHUNK;
        const uint64_t base = (uint64_t)(first + c0);
        /* positions of a chunk may straddle a 2**32 boundary: per-element hi word */
        const uint32_t k0 = g->k0, k1 = g->k1, t = g->threshold;
        uint32_t any = 0;
        for (int64_t i = 0; i < len; ++i) {
            const uint64_t n = base + (uint64_t)i;
            uint32_t v = mix(mix((uint32_t)n ^ k0) ^ (uint32_t)(n >> 32) ^ k1);
            h[i] = v;
            any |= (uint32_t)(v < t);
        }
        if (!any) continue;
        for (int64_t i = 0; i < len; ++i)
            if (h[i] < t) hits[nh++] = c0 + i;
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
    int64_t *hits = (int64_t *)malloc((size_t)(per + 1) * sizeof(int64_t));                    \
    if (!hits) { job->failed = 1; return; }                                                    \
    for (int64_t u = job->u0; u < job->u1; ++u) {                                              \
        if (!job->channels_last) {                                                             \
            /* map by map: a map is still in L1/L2 when its blocks are zeroed */               \
            const int64_t b = u / C, c = u - b * C;                                            \
            const T *restrict xm = (const T *)job->x + b * job->x_bstride + c * S;             \
            T *restrict om = (T *)job->out + b * job->out_bstride + c * S;                     \
            for (int64_t i = 0; i < S; ++i) om[i] = xm[i] * scale[i];                          \
            const int64_t nh = draw(&job->rng, (shared ? b : u) * V, V, hits);                 \
            for (int64_t k = 0; k < nh; ++k) {                                                 \
                const int64_t r = hits[k], w0 = r % Wv, h0 = (r / Wv) % Hv, d0 = r / (Wv * Hv); \
                const int64_t base = (d0 * H + h0) * W + w0;                                   \
                for (int64_t d = 0; d < bd; ++d)                                               \
                    for (int64_t h = 0; h < bh; ++h) {                                         \
                        T *restrict o = om + base + (d * H + h) * W;                           \
                        for (int64_t w = 0; w < bw; ++w) o[w] = 0;                             \
                    }                                                                          \
            }                                                                                  \
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
                       int64_t k0, int64_t k1, int64_t threshold, int64_t B, int64_t x_bstride,
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
    proto.rng.threshold = (uint32_t)threshold;
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
