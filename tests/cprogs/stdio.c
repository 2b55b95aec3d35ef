/* stdio on pipes, the calls the shim catches (wrap_stdio.c), N bytes all told, their sum
   printed ("read", "lines", "records": on stdout; "write", "fmt", "put": on stderr),
   "ready" on stderr first. "read" reads stdin with fread only, "lines" with fgets,
   getline, getc and getchar, "records" with getdelim on NUL; "write" writes a known sequence with fwrite only, "fmt" with printf and
   fprintf, "put" with fputs, putc, fputc, putchar and puts (a newline every ~60 bytes). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static unsigned long add(unsigned long sum, const char *b, long n)
{ for (long i = 0; i < n; i++) sum += (unsigned char)b[i]; return sum; }
#define LINE "0123456789abcdefghij\n"
static long lines;
static char record[8193];  /* mode lrecords: a line of two pages and a byte */
static void *lines_out(void *unused)  /* mode threads: one of three writers of stdout */
{
    for (long i = 0; i < lines; i++) {
        fwrite(LINE, 1, sizeof LINE - 1, stdout);
        if (i % 1000 == 0) fflush(stdout);  /* a short write: a pipe page left part full */
    }
    return unused;
}
static int locked;  /* mode flrecords: each record written under the program's flockfile */
static void *records_out(void *unused)  /* mode lrecords: one of three writers of stdout */
{
    for (long i = 0; i < lines; i++) {
        if (locked) flockfile(stdout);
        fwrite(record, 1, sizeof record, stdout);
        if (locked) funlockfile(stdout);
    }
    return unused;
}
int main(int argc, char **argv) {
    long n = atol(argv[2]), done = 0, k = 0; unsigned long sum = 0;
    const char *mode = argv[1];
    if (!strcmp(mode, "threads") || !strcmp(mode, "lrecords") || !strcmp(mode, "flrecords")) {
        /* lrecords: each fwrite on a line-buffered stream writes two pages, then its
           newline alone, a page left part full */
        int recs = mode[0] != 't';
        locked = mode[0] == 'f';
        const char *text = recs ? record : LINE;
        long size = recs ? (long)sizeof record : (long)(sizeof LINE - 1);
        memset(record, 'r', sizeof record - 1);
        record[sizeof record - 1] = '\n';
        if (recs) setvbuf(stdout, NULL, _IOLBF, 4096);
        pthread_t t[3];
        lines = n / 3 / size;
        fputs("ready\n", stderr);
        for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, recs ? records_out : lines_out, NULL);
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
        fflush(stdout);
        fprintf(stderr, "wrote %ld sum %lu\n", 3 * lines * size, 3 * lines * add(0, text, size));
        return 0;
    }
    char buf[20000], *line = NULL; size_t cap = 0;
    for (size_t i = 0; i < sizeof buf - 1; i++) buf[i] = (char)('a' + i % 26);
    buf[sizeof buf - 1] = 0;
    fputs("ready\n", stderr);
    if (!strcmp(mode, "read") || !strcmp(mode, "lines") || !strcmp(mode, "records")) {
        while (done < n) {
            long got = 0; int c; const char *from = buf;
            switch (!strcmp(mode, "read") ? 4 : !strcmp(mode, "records") ? 5 : k++ % 4) {
            case 5: got = getdelim(&line, &cap, 0, stdin); if (got < 0) got = 0; from = line; break;
            case 0: if (fgets(buf, 100, stdin)) got = (long)strlen(buf); break;
            case 1: got = getline(&line, &cap, stdin); if (got < 0) got = 0; from = line; break;
            case 2: if ((c = getc(stdin)) != EOF) { got = 1; buf[0] = (char)c; } break;
            case 3: if ((c = getchar()) != EOF) { got = 1; buf[0] = (char)c; } break;
            default: got = (long)fread(buf, 1, 9000, stdin); break;
            }
            if (got == 0 && feof(stdin)) break;
            sum = add(sum, from, got);
            done += got;
        }
        printf("read %ld sum %lu\n", done, sum);
    } else {
        while (done < n) {
            long left = n - done, put = 0;
            if (!strcmp(mode, "write")) {
                put = left < 17000 ? left : 17000; fwrite(buf, 1, (size_t)put, stdout);
                sum = add(sum, buf, put);
            } else if (!strcmp(mode, "dfmt") || !strcmp(mode, "dlong")) {
                long most = mode[1] == 'l' ? 19000 : 300;  /* dlong: past any guess */
                put = left < most ? left : most; dprintf(1, "%.*s", (int)put, buf);
                sum = add(sum, buf, put);
            } else if (!strcmp(mode, "sfmt") || !strcmp(mode, "lsfmt")) {
                /* long strings through %s: 8 KB lines, past the guessed length */
                if (k++ == 0 && mode[0] == 'l') setvbuf(stdout, NULL, _IOLBF, 4096);
                put = left < 8001 ? left : 8001;
                char c = buf[put - 1]; buf[put - 1] = 0;
                printf("%s\n", buf);
                buf[put - 1] = c;
                sum = add(sum, buf, put - 1) + '\n';
            } else if (!strcmp(mode, "lfmt")) {  /* line-buffered: each newline flushes */
                if (k++ == 0) setvbuf(stdout, NULL, _IOLBF, 0);
                put = left < 300 ? left : 300;
                printf("%.*s\n", (int)put - 1, buf);
                sum = add(sum, buf, put - 1) + '\n';
            } else if (!strcmp(mode, "fmt")) {
                put = left < 300 ? left : 300;
                if (k++ % 2) printf("%.*s", (int)put, buf); else fprintf(stdout, "%.*s", (int)put, buf);
                sum = add(sum, buf, put);
            } else switch (k++ % 6) {
            case 0: { long m = left < 57 ? left : 57; char c = buf[m]; buf[m] = 0;
                      fputs(buf, stdout); buf[m] = c; put = m; sum = add(sum, buf, m); } break;
            case 1: putc('\n', stdout); put = 1; sum += '\n'; break;
            case 2: fputc('x', stdout); put = 1; sum += 'x'; break;
            case 3: putchar('y'); put = 1; sum += 'y'; break;
            case 4: if (left >= 4) { puts("zzz"); put = 4; sum += 3 * 'z' + '\n'; } break;
            default: putc('w', stdout); put = 1; sum += 'w'; break;
            }
            done += put;
        }
        fflush(stdout);
        fprintf(stderr, "wrote %ld sum %lu\n", done, sum);
    }
    return 0;
}
