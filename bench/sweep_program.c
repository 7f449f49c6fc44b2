/* The program of bench/command_sweep.py: burns MS milliseconds of its own CPU time (a fixed
 * amount of work, which contention stretches in wall time for both sides alike), then writes
 * {"a": A, "b": B, "value": A*B} into the file OUT.
 *
 *     sweep_program MS A B OUT
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MS A B OUT\n", argv[0]);
        return 2;
    }
    double ms = atof(argv[1]);
    long a = atol(argv[2]), b = atol(argv[3]);
    volatile unsigned long spin = 0;
    while (cpu_ms() < ms) {
        for (int i = 0; i < 1000; i++) spin += i;
    }
    FILE *out = fopen(argv[4], "w");
    if (out == NULL) {
        perror(argv[4]);
        return 1;
    }
    fprintf(out, "{\"a\": %ld, \"b\": %ld, \"value\": %ld}\n", a, b, a * b);
    return fclose(out) == 0 ? 0 : 1;
}
