/*
 * lisa_hash: the 64-bit finaliser the hash tables and content addresses
 * of lisa share (MurmurHash3's fmix64: every input bit flips about half of
 * the output bits). Header only.
 */
#ifndef LISA_HASH_H
#define LISA_HASH_H

#include <stdint.h>

/* x mixed so that nearby inputs land far apart. */
static inline uint64_t
lisa_hash_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

#endif
