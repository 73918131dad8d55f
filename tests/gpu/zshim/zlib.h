/* tests/gpu/zshim/zlib.h: the part of zlib's interface the runtime uses
 * (runtime/rt_data.c), for GPU hosts that have libz.so.1 but not zlib's
 * development headers. tests/gpu/run.sh uses it only when <zlib.h> is
 * missing, and links -l:libz.so.1. The declarations are zlib's own
 * (zlib.h 1.2.x / 1.3.x, unchanged since 1.2.0). */
#ifndef CDDP_ZSHIM_H
#define CDDP_ZSHIM_H
typedef struct gzFile_s *gzFile;
#define Z_OK 0
#define Z_ERRNO (-1)
#define Z_BUF_ERROR (-5)
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buf, unsigned len);
int gzclose(gzFile file);
const char *gzerror(gzFile file, int *errnum);
#endif
