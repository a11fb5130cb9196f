/* plugdrop: fused sparse DropBlock for CPU tensors.
 *
 * out = x * scale (scale broadcast over batch and channels), then the block of every seed is
 * zeroed while its map is still in cache: one pass over memory instead of a multiply followed
 * by a scattered fill. Built at first use by plugdrop/_cext.py; the torch-op path in
 * plugdrop/_kernels.py computes the same result from the same seeds.
 *
 * Layout of one sample (the batch stride may differ between x and out):
 *   channels_last == 0:  [C][D][H][W]   (maps contiguous)
 *   channels_last == 1:  [D][H][W][C]   (channels innermost)
 * 1D and 2D maps are passed as 3D with leading sizes of 1.
 * Seeds index the flattened (B, C, Dv, Hv, Wv) seed grid (or (B, 1, Dv, Hv, Wv) with
 * shared != 0: one mask for all channels of a sample), sorted ascending; each is the corner of
 * a bd x bh x bw block.
 */
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const void *x;
    void *out;
    const void *scale;
    const int64_t *seeds;
    int64_t nseeds;
    int64_t x_bstride, out_bstride;
    int64_t C, D, H, W, bd, bh, bw;
    int channels_last;
    int shared; /* seeds index a (B, 1, Dv, Hv, Wv) grid: one mask for all channels */
    int64_t u0, u1; /* work units: maps (b, c) if channels-first, samples if channels-last */
    int failed;
} job_t;

static int64_t first_seed(const int64_t *seeds, int64_t n, int64_t value) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (seeds[mid] < value) lo = mid + 1; else hi = mid;
    }
    return lo;
}

#define DEFINE_KERNEL(NAME, T)                                                                \
static void *NAME(void *arg) {                                                                 \
    job_t *job = (job_t *)arg;                                                                 \
    const int64_t C = job->C, H = job->H, W = job->W;                                          \
    const int64_t bd = job->bd, bh = job->bh, bw = job->bw;                                    \
    const int64_t Dv = job->D - bd + 1, Hv = H - bh + 1, Wv = W - bw + 1;                      \
    const int64_t S = job->D * H * W, V = Dv * Hv * Wv;                                        \
    const int64_t nseeds = job->nseeds;                                                        \
    const int64_t *seeds = job->seeds;                                                         \
    const T *restrict scale = (const T *)job->scale;                                           \
    /* seed-grid index within a map -> offset of the block corner within the map */           \
    int64_t *corner = (int64_t *)malloc((size_t)V * sizeof(int64_t));                          \
    if (!corner) { job->failed = 1; return 0; }                                                \
    for (int64_t r = 0, d = 0; d < Dv; ++d)                                                    \
        for (int64_t h = 0; h < Hv; ++h)                                                       \
            for (int64_t w = 0; w < Wv; ++w) corner[r++] = (d * H + h) * W + w;               \
    if (!job->channels_last) {                                                                 \
        /* map by map: a map is still in L1 when its blocks are zeroed */                      \
        const int shared = job->shared;                                                        \
        int64_t s = first_seed(seeds, nseeds, (shared ? job->u0 / C : job->u0) * V);           \
        for (int64_t m = job->u0; m < job->u1; ++m) {                                          \
            const int64_t b = m / C, c = m - b * C;                                            \
            const T *restrict xm = (const T *)job->x + b * job->x_bstride + c * S;             \
            T *restrict om = (T *)job->out + b * job->out_bstride + c * S;                     \
            for (int64_t i = 0; i < S; ++i) om[i] = xm[i] * scale[i];                          \
            const int64_t first = (shared ? b : m) * V, end = first + V;                       \
            if (shared) s = first_seed(seeds, nseeds, first);                                  \
            for (; s < nseeds && seeds[s] < end; ++s) {                                        \
                const int64_t base = corner[seeds[s] - first];                                 \
                for (int64_t d = 0; d < bd; ++d)                                               \
                    for (int64_t h = 0; h < bh; ++h) {                                         \
                        T *restrict o = om + base + (d * H + h) * W;                           \
                        for (int64_t w = 0; w < bw; ++w) o[w] = 0;                             \
                    }                                                                          \
            }                                                                                  \
        }                                                                                      \
    } else {                                                                                   \
        int64_t s = first_seed(seeds, nseeds, job->u0 * (job->shared ? 1 : C) * V);           \
        for (int64_t b = job->u0; b < job->u1; ++b) {                                          \
            const T *restrict x = (const T *)job->x + b * job->x_bstride;                      \
            T *restrict out = (T *)job->out + b * job->out_bstride;                            \
            for (int64_t i = 0; i < S; ++i) {                                                  \
                const T sc = scale[i];                                                         \
                const T *restrict xr = x + i * C;                                              \
                T *restrict orow = out + i * C;                                                \
                for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * sc;                          \
            }                                                                                  \
            const int64_t per = job->shared ? V : C * V, first = b * per, end = first + per;   \
            for (; s < nseeds && seeds[s] < end; ++s) {                                        \
                const int64_t r = seeds[s] - first, c = job->shared ? 0 : r / V;               \
                const int64_t base = corner[r - c * V];                                        \
                for (int64_t d = 0; d < bd; ++d)                                               \
                    for (int64_t h = 0; h < bh; ++h) {                                         \
                        T *restrict o = out + (base + (d * H + h) * W) * C;                    \
                        if (job->shared) {                                                     \
                            for (int64_t i = 0; i < bw * C; ++i) o[i] = 0;                     \
                        } else {                                                               \
                            for (int64_t w = 0; w < bw; ++w) o[w * C + c] = 0;                 \
                        }                                                                      \
                    }                                                                          \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    free(corner);                                                                              \
    return 0;                                                                                  \
}

DEFINE_KERNEL(kernel_f32, float)
DEFINE_KERNEL(kernel_f64, double)

static void setup(job_t *j, const void *x, void *out, const void *scale, const int64_t *seeds,
                  int64_t nseeds, int64_t x_bstride, int64_t out_bstride, int64_t C, int64_t D,
                  int64_t H, int64_t W, int64_t bd, int64_t bh, int64_t bw, int channels_last,
                  int shared, int64_t units, int t, int threads) {
    j->x = x; j->out = out; j->scale = scale; j->seeds = seeds; j->nseeds = nseeds;
    j->x_bstride = x_bstride; j->out_bstride = out_bstride;
    j->C = C; j->D = D; j->H = H; j->W = W; j->bd = bd; j->bh = bh; j->bw = bw;
    j->channels_last = channels_last;
    j->shared = shared;
    j->u0 = units * t / threads; j->u1 = units * (t + 1) / threads;
    j->failed = 0;
}

/* dtype: 0 = float32, 1 = float64. Returns 0 on success, -1 if out of memory.
 * Built with OpenMP, it runs on the OpenMP runtime PyTorch already loaded (same soname), so
 * it shares PyTorch's worker threads instead of competing with them. */
int plugdrop_blockdrop(int dtype, int threads, const void *x, void *out, const void *scale,
                       const int64_t *seeds, int64_t nseeds, int64_t B, int64_t x_bstride,
                       int64_t out_bstride, int64_t C, int64_t D, int64_t H, int64_t W,
                       int64_t bd, int64_t bh, int64_t bw, int channels_last, int shared) {
    void *(*kernel)(void *) = dtype == 0 ? kernel_f32 : kernel_f64;
    const int64_t units = channels_last ? B : B * C;
    if (units <= 0) return 0;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (threads > units) threads = (int)units;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(|| : failed)
    {
        job_t job;
        setup(&job, x, out, scale, seeds, nseeds, x_bstride, out_bstride, C, D, H, W, bd, bh,
              bw, channels_last, shared, units, omp_get_thread_num(), omp_get_num_threads());
        kernel(&job);
        failed = failed || job.failed;
    }
#else
    job_t jobs[64];
    pthread_t tids[64];
    for (int t = 0; t < threads; ++t)
        setup(&jobs[t], x, out, scale, seeds, nseeds, x_bstride, out_bstride, C, D, H, W, bd,
              bh, bw, channels_last, shared, units, t, threads);
    int spawned = 0;
    for (int t = 1; t < threads; ++t) {
        if (pthread_create(&tids[t], 0, kernel, &jobs[t]) != 0) break;
        spawned = t;
    }
    kernel(&jobs[0]);
    for (int t = spawned + 1; t < threads; ++t) kernel(&jobs[t]); /* could not spawn */
    for (int t = 1; t <= spawned; ++t) pthread_join(tids[t], 0);
    for (int t = 0; t < threads; ++t) failed = failed || jobs[t].failed;
#endif
    return failed ? -1 : 0;
}
