/* file.c — opening a file to read it whole, without blocking on a FIFO or a device. */
#include "core/core.h"
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a file";
}

static tg_status open_failed(const char *path, int e, int *err)
{
    if (err) *err = e;
    return tg_error(TG_EIO, "%s: cannot open: %s", path, strerror(e));
}

tg_status tg_file_open_read(const char *path, int allow_dir, int *fd, size_t *size, int *err)
{
    *fd = -1;
    *size = 0;
    if (err) *err = 0;
    TG_NONNULL(path, "path");
    /* O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for one */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (f < 0 || fstat(f, &sb) != 0) {
        int e = errno;
        if (f >= 0) close(f);
        return open_failed(path, e, err);
    }
    if (!S_ISREG(sb.st_mode) && !(allow_dir && S_ISDIR(sb.st_mode))) {
        close(f);
        return tg_error(TG_EIO, "%s: not a regular file (%s)", path, kind_of(sb.st_mode));
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) { /* reads of a regular file block as usual */
        int e = errno;
        close(f);
        return open_failed(path, e, err);
    }
    *fd = f;
    *size = S_ISREG(sb.st_mode) ? (size_t)sb.st_size : 0;
    return TG_OK;
}
