/* probe_kernel.c: the blocked batch probe alone (csrc/bloom.c), no Python: 4 KiB pages against
 * transparent huge pages for the table, across prefetch distances. Digests are synthetic
 * (fmix64 of a counter, as XXH3-64 digests are stretched), computed before timing; the table
 * is faulted in before timing too, so only the probes are measured. Best of R runs, process
 * CPU time.
 *
 * Build and run from the repository root:
 *   gcc -O3 -std=c11 -Isrc/urlseen/csrc benchmarks/tools/probe_kernel.c src/urlseen/csrc/bloom.c \
 *       src/urlseen/csrc/xxh3.c -o /tmp/probe_kernel && /tmp/probe_kernel 20000000 5
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bloom.h"
#include "digest.h"

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    /* 15.49 bits a key and k = 9: the blocked filter at error rate 0.001 (bloom/sizing.py) */
    uint64_t nbits = ((uint64_t)((double)n * 15.49) + 511) / 512 * 512;
    size_t nbytes = nbits / 8;
    us_hash128 *h = malloc(n * sizeof *h);
    uint8_t *out = malloc(n);
    if (h == NULL || out == NULL) return 1;
    for (size_t i = 0; i < n; i++) h[i] = us_digest_of_64(us_fmix64(i * 0x9E3779B97F4A7C15ull + 1));
    static const unsigned dists[] = {0, 8, 16, 24, 32, 48, 64};
    for (int huge = 0; huge < 2; huge++) {
        for (size_t d = 0; d < sizeof dists / sizeof *dists; d++) {
            double best = 1e9;
            for (int r = 0; r < reps; r++) {
                uint8_t *bits = mmap(NULL, nbytes, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (bits == MAP_FAILED) return 1;
                if (huge) madvise(bits, nbytes, MADV_HUGEPAGE);
                memset(bits, 0, nbytes);
                us_bloom b = {bits, nbits, 9, US_LAYOUT_BLOCKED};
                us_prefetch_ahead = dists[d];
                double t = cpu_seconds();
                size_t fresh = 0;
                for (size_t i = 0; i < n; i += 65536) /* the bindings' chunk */
                    fresh += us_bloom_test_and_set_many(&b, h + i, n - i < 65536 ? n - i : 65536,
                                                        out + i);
                t = cpu_seconds() - t;
                if (t < best) best = t;
                if (fresh < n / 100 * 99) printf("only %zu new of %zu?\n", fresh, n);
                munmap(bits, nbytes);
            }
            printf("huge pages %s, prefetch %2u ahead: %.1f ns/key (%.2f M keys/s)\n",
                   huge ? "yes" : "no ", dists[d], best / (double)n * 1e9, (double)n / best / 1e6);
            fflush(stdout);
        }
    }
    free(h);
    free(out);
    return 0;
}
