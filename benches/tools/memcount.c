/*
 * Counts the copies a program makes with memcpy and memmove, by call site and size, for the
 * copy figures of docs/performance.md. An LD_PRELOAD shim: nothing of fusebox's build uses
 * it.
 *
 *   cc -O2 -shared -fPIC -o memcount.so benches/tools/memcount.c -ldl
 *   MEMCOUNT=/tmp/copies.txt LD_PRELOAD=$PWD/memcount.so target/release/examples/calls policy 100000
 *   awk '{n += $3} END {print n / 100000, "copies of 64 bytes or more per call"}' /tmp/copies.txt
 *
 * Each line of the output is a call site, a size and a count. Only copies of 64 bytes or
 * more are counted (smaller ones the compiler mostly makes inline, without a call), and only
 * sites seen more than 1000 times are written, so that set-up copies drop out of a run of
 * many calls.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#define N 4096
static struct { void *caller; size_t size; unsigned long count; } tab[N];
static int enabled = 0;
static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);
static void record(void *caller, size_t size) {
    if (!enabled || size < 64) return;
    uintptr_t h = ((uintptr_t)caller ^ size * 2654435761u) % N;
    for (int i = 0; i < N; i++) {
        int j = (h + i) % N;
        if (tab[j].caller == caller && tab[j].size == size) { tab[j].count++; return; }
        if (tab[j].caller == 0) { tab[j].caller = caller; tab[j].size = size; tab[j].count = 1; return; }
    }
}
void *memcpy(void *d, const void *s, size_t n) {
    if (!real_memcpy) real_memcpy = dlsym(RTLD_NEXT, "memcpy");
    record(__builtin_return_address(0), n);
    return real_memcpy(d, s, n);
}
void *memmove(void *d, const void *s, size_t n) {
    if (!real_memmove) real_memmove = dlsym(RTLD_NEXT, "memmove");
    record(__builtin_return_address(0), n);
    return real_memmove(d, s, n);
}
__attribute__((constructor)) static void init(void) { if (getenv("MEMCOUNT")) enabled = 1; }
__attribute__((destructor)) static void fini(void) {
    if (!enabled) return;
    enabled = 0;
    FILE *f = fopen(getenv("MEMCOUNT"), "w");
    for (int i = 0; i < N; i++) if (tab[i].caller && tab[i].count > 1000)
        fprintf(f, "%p %zu %lu\n", tab[i].caller, tab[i].size, tab[i].count);
    fclose(f);
}
