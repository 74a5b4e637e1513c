/* A user's C program against an installed grantid C library: 1,000 IDs
   from the authority URL given, distinct and rising. Built with pkg-config
   by the package tier (the host's tarball) and by the platforms tier (each
   Linux tarball, run where it runs). */
#include <grantid.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    if (strcmp(GRANTID_VERSION, grantid_version()) != 0) return 3;
    struct grantid_generator_options o;
    grantid_generator_options_default(&o);
    o.namespace_ = "install-v1";
    struct grantid_generator *gen;
    uint64_t ids[1000];
    if (grantid_generator_new_url(&o, argv[1], &gen) != GRANTID_OK
        || grantid_next_ids(gen, ids, 1000) != GRANTID_OK) {
        fprintf(stderr, "%s\n", grantid_last_error_message());
        return 1;
    }
    for (int i = 1; i < 1000; i++)
        if (ids[i] <= ids[i - 1]) return 4;
    struct grantid_generator_stats st;
    if (grantid_stats(gen, &st) != GRANTID_OK || st.ids_issued != 1000) return 5;
    grantid_generator_free(gen);
    printf("c: ok, %s, 1000 IDs, worker %u\n", grantid_version(), st.worker);
    return 0;
}
