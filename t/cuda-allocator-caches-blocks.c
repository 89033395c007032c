/* cuda-allocator-caches-blocks.c — the CUDA allocator reuses freed blocks: no cudaMalloc once warm. */
#include "backend/backend.h"
#include "core/debug.h"

#include "tap.h"

#include <stdlib.h>
#include <string.h>

#ifndef TG_HAVE_CUDA
int main(void) { skip_all("no CUDA device (built without CUDA)"); }
#else
#include "backend/cuda_impl.h"

static const size_t sizes[] = {1, 1000, 4096, (1 << 20) + 5, (3 << 20) + 17};
#define NS (sizeof sizes / sizeof sizes[0])

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    if (tg_debug_get(TG_DEBUG_ALLOC_DIRECT)) skip_all("TG_DEBUG=alloc_direct turns the cache off");
    plan(NO_PLAN);
    const struct tg_backend *be = &tg_backend_cuda;
    void *p[NS];
    size_t used0, cached0, used, cached;
    uint64_t mallocs0, mallocs;

    /* warm up: one block of each size, then back to the cache */
    size_t used_a, cached_a;
    tg_cuda_alloc_stats(0, &used_a, &cached_a, NULL);
    for (size_t i = 0; i < NS; i++)
        if (be->alloc(0, sizes[i], &p[i]) != TG_OK) bail_out("alloc: %s", tg_last_error());
    tg_cuda_alloc_stats(0, &used0, &cached0, &mallocs0);
    ok(used0 - used_a >= (4 << 20), "the blocks are in use (%zu bytes)", used0 - used_a);
    for (size_t i = 0; i < NS; i++) be->free(0, p[i]);
    tg_cuda_alloc_stats(0, &used, &cached, NULL);
    ok(used == used_a && cached - cached0 == used0 - used_a, "freed blocks go to the cache (%zu bytes cached)", cached);

    void *again;
    if (be->alloc(0, sizes[1], &again) != TG_OK) bail_out("alloc: %s", tg_last_error());
    ok(again == p[1], "a freed block of the same size is handed out again");
    be->free(0, again);

    /* hot path: many alloc/free rounds make no cudaMalloc */
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < NS; i++)
            if (be->alloc(0, sizes[i], &p[i]) != TG_OK) bail_out("alloc: %s", tg_last_error());
        for (size_t i = 0; i < NS; i++) be->free(0, p[i]);
    }
    tg_cuda_alloc_stats(0, NULL, NULL, &mallocs);
    is_int((long long)mallocs, (long long)mallocs0, "no cudaMalloc after warm-up (%llu calls in all)", (unsigned long long)mallocs);

    /* the same through tensors */
    int64_t shape[2] = {333, 77};
    for (int round = 0; round < 100; round++) {
        tg_tensor *t = NULL;
        if (tg_tensor_new(TG_BF16, 2, shape, (tg_device){TG_CUDA, 0}, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
        tg_tensor_free(t);
    }
    uint64_t after;
    tg_cuda_alloc_stats(0, &used, NULL, &after);
    ok(after <= mallocs + 1, "100 tensor new/free rounds cost at most one cudaMalloc (%llu)", (unsigned long long)(after - mallocs));
    return done_testing();
}
#endif
