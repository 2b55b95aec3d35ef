#include <stdio.h>
int ctor_ran(void);
int main(void) { puts(ctor_ran() ? "ok" : "FAILED"); return 0; }
