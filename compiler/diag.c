/* diag.c: diagnostics, in gcc's format.
 *
 *   models/x.net:5:11: error: unknown layer 'Lin'; did you mean 'Linear'?
 *       5 |     fc1 = Lin(784, 512)
 *         |           ^
 *
 * Every user-facing error of the front end comes through here, so the
 * format, the error count and the cap on output live in one place. */
#include <stdlib.h>
#include <string.h>

#include "cddpc.h"

enum { MAX_SOURCES = 8, MAX_SHOWN = 20 };

static struct {
    const char *file, *text;
} sources[MAX_SOURCES];
static int nsources;
static int nerrors;

void diag_source(const char *file, const char *text)
{
    for (int i = 0; i < nsources; i++)
        if (strcmp(sources[i].file, file) == 0) {
            sources[i].text = text;
            return;
        }
    if (nsources < MAX_SOURCES) {
        sources[nsources].file = file;
        sources[nsources++].text = text;
    }
}

/* Start of line `line` of file's registered text, or NULL. */
static const char *find_line(const char *file, int line)
{
    for (int i = 0; i < nsources; i++) {
        if (strcmp(sources[i].file, file) != 0)
            continue;
        const char *p = sources[i].text;
        for (int l = 1; l < line && p; l++) {
            p = strchr(p, '\n');
            if (p)
                p++;
        }
        return p;
    }
    return NULL;
}

/* The source line, then a caret under col. The caret line copies the
 * line's tabs so the caret lines up whatever the tab width, and counts a
 * UTF-8 character as one column (loc.col counts bytes). Control bytes
 * (fuzzed or binary input) are shown as blanks so the terminal survives. */
static void show_line(Loc loc)
{
    const char *p = find_line(loc.file, loc.line);
    if (!p)
        return;
    size_t n = strcspn(p, "\n");
    fprintf(stderr, "%5d | ", loc.line);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        fputc(c != '\t' && (c < 0x20 || c == 0x7f) ? ' ' : c, stderr);
    }
    fprintf(stderr, "\n      | ");
    for (int i = 0; i < loc.col - 1; i++) {
        unsigned char c = (size_t)i < n ? (unsigned char)p[i] : ' ';
        if ((c & 0xc0) != 0x80)    /* a UTF-8 character is one column wide */
            fputc(c == '\t' ? '\t' : ' ', stderr);
    }
    fprintf(stderr, "^\n");
}

static void report(const char *kind, Loc loc, const char *fmt, va_list ap)
{
    if (loc.file && loc.line > 0)
        fprintf(stderr, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
    else
        fprintf(stderr, "%s: %s: ", loc.file ? loc.file : "cddpc", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (loc.file && loc.line > 0)
        show_line(loc);
}

/* After MAX_SHOWN errors (a binary file, say) further ones are only
 * counted: the first few are the useful ones. */
void diag_error(Loc loc, const char *fmt, ...)
{
    nerrors++;
    if (nerrors > MAX_SHOWN) {
        if (nerrors == MAX_SHOWN + 1)
            fprintf(stderr, "cddpc: note: too many errors; not showing the rest\n");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report("error", loc, fmt, ap);
    va_end(ap);
}

void diag_note(Loc loc, const char *fmt, ...)
{
    if (nerrors > MAX_SHOWN)
        return;
    va_list ap;
    va_start(ap, fmt);
    report("note", loc, fmt, ap);
    va_end(ap);
}

int diag_count(void) { return nerrors; }

void diag_reset(void)
{
    nsources = nerrors = 0;
}

void diag_ice(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cddpc: internal error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(3);
}
