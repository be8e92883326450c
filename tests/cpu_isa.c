/* Prints the instruction set tensor/cpu.c detected and the one in use ("cpu avx512 in use
 * avx512"), for tests/isa_dispatch.sh and tests/old_cpu.sh to compare with what the CPU has. */
#include <stdio.h>

#include "tensor/op.h" /* ag__cpu_isa, ag__isa_in_use: the one CPU dispatch */

int main(void) {
    printf("cpu %s in use %s\n", ag__isa_name(ag__cpu_isa()), ag__isa_name(ag__isa_in_use()));
    return 0;
}
