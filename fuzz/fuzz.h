/* fuzz.h — shared by the C fuzz targets (fuzz/NAME.c, each a libFuzzer entry point calling the library's C
 * readers directly): a wrong answer that is no crash (a broken round trip, an id out of range) is reported
 * like one, so libFuzzer keeps the input. */
#ifndef TG_FUZZ_H
#define TG_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                                          \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz finding: %s:%d: ", __FILE__, __LINE__);                                              \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

#endif
