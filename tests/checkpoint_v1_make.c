/* Made tests/checkpoint_v1.h5, the format_version 1 fixture that test_checkpoint_flips loads
 * (the checkpoint of tests/checkpoint_fixture.h, saved by the attograd of commit cbd63a5, the
 * last that wrote format 1; the fixture is committed, not rebuilt, since attograd now writes
 * format 2). Build and run against that commit:
 *   cc -Ibuild -I. tests/checkpoint_v1_make.c -Lbuild -lattograd -o make_v1 && ./make_v1 out.h5 */
#include "checkpoint_fixture.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.h5\n", argv[0]);
        return 2;
    }
    ckpt_fixture fx;
    ckpt_fixture_make(&fx, true);
    char msg[1024];
    ag_checkpoint_save_opts o = {.no_fsync = true};
    ag_checkpoint_status s = ag_checkpoint_save(argv[1], fx.p, fx.opt, &fx.st, &o, msg, sizeof msg);
    if (s != AG_CHECKPOINT_OK) fprintf(stderr, "%s\n", msg);
    ckpt_fixture_free(&fx);
    return s == AG_CHECKPOINT_OK ? 0 : 1;
}
