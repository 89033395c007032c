/* file.h — opening a file to read it whole: refused (not waited on) when it is not a regular file. */
#ifndef TG_IO_FILE_H
#define TG_IO_FILE_H

#include "tegraph.h"

#include <stddef.h>

/* Opens path read-only (close-on-exec) into *fd, with its size in *size.
 * The open does not block: a FIFO without a writer or a device would hang
 * the reader, so anything but a regular file fails (TG_EIO, "PATH: not a
 * regular file (a FIFO)"), and a directory too unless allow_dir (*size is
 * then 0). Errors name the path ("PATH: cannot open: REASON"); *fd is -1 on
 * failure, and *err (when not NULL) the errno of a failed open, else 0. */
tg_status tg_file_open_read(const char *path, int allow_dir, int *fd, size_t *size, int *err);

#endif
