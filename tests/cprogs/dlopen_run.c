/* dlopen argv[1] with RTLD_LOCAL and call its run(argv[2] == "contend") */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 3; }
    int (*run)(int) = (int (*)(int))dlsym(h, "run");
    int ok = run(strcmp(argv[2], "contend") == 0);
    puts(ok ? "ok" : "FAILED"); return !ok;
}
