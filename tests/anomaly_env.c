/* Run with AG_ANOMALY=1 in the environment (tests/meson.build does): anomaly mode must be on
 * from the start, and log of a negative number must be reported naming ag_log. Exit 0 only
 * then. */
#include <stdio.h>
#include <string.h>

#include "attograd.h"

static char seen[1024];
static void record(const char *message, void *user) {
    (void)user;
    snprintf(seen, sizeof seen, "%s", message);
}

int main(void) {
    ag_set_error_handler(record, NULL);
    if (!ag_anomaly_enabled()) {
        fprintf(stderr, "anomaly mode is off although AG_ANOMALY=1\n");
        return 1;
    }
    ag_tensor *x = ag_from_buffer(AG_F32, AG_SHAPE(2), (const float[]){1.0f, -1.0f});
    ag_log(x);
    if (!strstr(seen, "ag_log") || !strstr(seen, "anomaly in forward") || !strstr(seen, "has NaN at flat index 1")) {
        fprintf(stderr, "expected an anomaly report naming ag_log, got '%s'\n", seen);
        return 1;
    }
    printf("reported: %s\n", seen);
    return 0;
}
