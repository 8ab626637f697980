/* check.h: the one assertion macro of the C harnesses: report and count, keep going. */
#ifndef URLSEEN_TEST_CHECK_H
#define URLSEEN_TEST_CHECK_H

#include <stdio.h>

static int failures = 0;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#endif
