/* safetensors.h — the safetensors reader on bytes in memory (safetensors.c); the file API is public, in tegraph.h. */
#ifndef TG_IO_SAFETENSORS_H
#define TG_IO_SAFETENSORS_H

#include "tegraph.h"

#include <stddef.h>

/* tg_safetensors_open on the len bytes at bytes (a whole file's contents), validated the same way; name stands for
 * the path in errors. The reader uses the bytes in place: they must outlive it. */
tg_status tg_safetensors_open_memory(const void *bytes, size_t len, const char *name, tg_safetensors **out);

#endif
