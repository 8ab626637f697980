/* bindings/hugemem.h: zeroed memory for large tables probed at random (the library stage's
 * fingerprint map, the hot-fingerprint cache).
 *
 * Why: such a table is touched all over at once, so with 4 KiB pages it costs a page fault per
 * 4 KiB on first touch (the stage map's doublings alone took ~45k faults on the dev file) and a
 * TLB miss on nearly every probe. From 2 MiB on, the table is mapped on its own and marked for
 * transparent huge pages (where the kernel allows them: madvise mode), 512 times fewer faults
 * and TLB entries. Smaller tables come from Python's raw allocator, as before.
 */
#ifndef URLSEEN_HUGEMEM_H
#define URLSEEN_HUGEMEM_H

#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>

#define US_HUGE_PAGE ((size_t)2 << 20)

/* n * size zeroed bytes, or NULL (no exception set) if they cannot be had. */
static inline void *us_huge_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    if (bytes < US_HUGE_PAGE) return PyMem_RawCalloc(n ? n : 1, size ? size : 1);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: refused, the table works as well */
#endif
    return p;
}

/* Free what us_huge_calloc(n, size) returned (NULL is ignored). */
static inline void us_huge_free(void *p, size_t n, size_t size)
{
    if (p == NULL) return;
    if (n * size < US_HUGE_PAGE) PyMem_RawFree(p);
    else munmap(p, n * size);
}

#endif
