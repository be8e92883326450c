/* What the attograd-translate support tests share (tests/translate_text_util.h). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "translate_text_util.h"

char tmpdir[64];

int text_group_setup(void **state) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tr_text_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return tu_setup(state);
}

int text_group_teardown(void **state) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[PATH_MAX];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name), unlink(p);
    if (d) closedir(d);
    rmdir(tmpdir);
    return tu_teardown(state);
}

const char *write_file(const char *name, const char *data, size_t len) {
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    return path;
}

void assert_contains(const char *s, const char *frag) {
    if (!strstr(s, frag)) fail_msg("'%s' does not contain '%s'", s, frag);
}

char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

int read_corpus(tr_corpus *c, const char *path, bool strict, size_t maxb, char *err) {
    tr_read_opts o = {.strict = strict, .max_line_bytes = maxb};
    err[0] = 0;
    return tr_corpus_read(c, path, &o, err, TR_ERR_SIZE);
}
