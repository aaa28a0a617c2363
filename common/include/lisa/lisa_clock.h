/*
 * lisa_clock: the two clocks every service reads, in milliseconds. The
 * monotonic one measures intervals and deadlines inside a process (it
 * never steps back); the wall clock stamps what other processes read
 * (records, tokens, deadlines sent on).
 *
 *     int64_t deadline = lisa_clock_mono_ms() + 5000;
 *     ...
 *     if (lisa_clock_mono_ms() >= deadline)
 *         give_up();
 *     record.at_ms = lisa_clock_wall_ms();
 */
#ifndef LISA_CLOCK_H
#define LISA_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t lisa_clock_mono_ms(void);
/* CLOCK_REALTIME in milliseconds since the epoch. */
uint64_t lisa_clock_wall_ms(void);

#endif
