/* Prints the thread count attograd starts with in this environment (ag_get_num_threads):
 * bench/run.sh notes it alone and under a simulated mpirun of 2 ranks on this machine
 * (OMPI_COMM_WORLD_LOCAL_SIZE=2), both without OMP_NUM_THREADS. */
#include <stdio.h>

#include "../attograd.h"

int main(void) {
    printf("%d\n", ag_get_num_threads());
    return 0;
}
