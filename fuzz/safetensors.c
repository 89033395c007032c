/* safetensors.c — fuzz target: the input is a safetensors file's bytes; the reader validates them in memory
 * (tg_safetensors_open_memory, the code tg_safetensors_open runs on a mapped file), then every tensor it lists is
 * described and read onto the CPU, and the metadata listed. Checks: each listed name is found at its index, a
 * read tensor has the elements its shape says, and a tensor whose file dtype loads unchanged holds exactly the
 * bytes of the file (all of them together are the data section's bytes). */
#define _GNU_SOURCE /* memmem */
#include "fuzz.h"
#include "io/safetensors.h"
#include "tegraph.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_safetensors *f;
    if (tg_safetensors_open_memory(data, size, "fuzz.safetensors", &f) != TG_OK) return 0;
    const tg_device cpu = {TG_CPU, 0};
    int n = tg_safetensors_count(f);
    for (int i = 0; i < n; i++) {
        const char *name = tg_safetensors_name(f, i);
        FUZZ_CHECK(name != NULL, "tensor %d of %d has no name", i, n);
        FUZZ_CHECK(tg_safetensors_find(f, name) == i, "tensor '%s' listed at %d but found at %d", name, i,
                   tg_safetensors_find(f, name));
        const char *fdt;
        tg_dtype dt;
        int ndim;
        int64_t shape[TG_MAX_DIMS];
        FUZZ_CHECK(tg_safetensors_info(f, name, &fdt, &dt, &ndim, shape) == TG_OK, "info of listed tensor '%s': %s", name,
                   tg_last_error());
        tg_tensor *t;
        if (tg_safetensors_read(f, name, cpu, &t) != TG_OK) continue; /* refused (more dims than tegraph has, ...) */
        int64_t numel = 1;
        for (int d = 0; d < ndim && d < TG_MAX_DIMS; d++) numel *= shape[d];
        FUZZ_CHECK(tg_tensor_numel(t) == numel, "tensor '%s': %lld elements read, its shape says %lld", name,
                   (long long)tg_tensor_numel(t), (long long)numel);
        size_t bytes = (size_t)tg_tensor_numel(t) * tg_dtype_size(tg_tensor_dtype(t));
        if (bytes > 0) {
            unsigned char *buf = malloc(bytes);
            FUZZ_CHECK(buf && tg_tensor_read(t, buf, bytes) == TG_OK, "tensor '%s': reading back failed", name);
            /* dtypes loaded as they are: the tensor's bytes appear in the file */
            if ((!strcmp(fdt, "F32") || !strcmp(fdt, "I32") || !strcmp(fdt, "BF16") || !strcmp(fdt, "U16")) &&
                size >= bytes)
                FUZZ_CHECK(memmem(data, size, buf, bytes) != NULL, "tensor '%s' (%s): its values are not the file's bytes",
                           name, fdt);
            free(buf);
        }
        tg_tensor_free(t);
    }
    int nm = tg_safetensors_metadata_count(f);
    for (int i = 0; i < nm; i++) {
        const char *key = tg_safetensors_metadata_key(f, i);
        FUZZ_CHECK(key && tg_safetensors_metadata(f, key), "metadata key %d has no value", i);
    }
    tg_safetensors_close(f);
    return 0;
}
