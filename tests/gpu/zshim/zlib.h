/* tests/gpu/zshim/zlib.h: the part of zlib's interface the runtime uses
 * (gzip'd IDX files in runtime/rt_idx.c and rt_data.c, deflated .npz
 * members in runtime/rt_npz.c), for GPU hosts that have libz.so.1 but not
 * zlib's development headers. tests/gpu/run.sh uses it only when <zlib.h>
 * is missing, and links -l:libz.so.1; tests/gpu/rehearse.sh builds with it
 * here. The declarations and the z_stream layout are zlib's own (zlib.h
 * 1.2.x / 1.3.x, unchanged since 1.2.0); inflateInit2_ checks the version's
 * first digit and sizeof(z_stream) against the library's. */
#ifndef CDDP_ZSHIM_H
#define CDDP_ZSHIM_H
typedef struct gzFile_s *gzFile;
typedef unsigned char Bytef;
typedef unsigned int uInt;
typedef unsigned long uLong;
typedef void *voidpf;
typedef voidpf (*alloc_func)(voidpf opaque, uInt items, uInt size);
typedef void (*free_func)(voidpf opaque, voidpf address);
struct internal_state;
typedef struct z_stream_s {
    const Bytef *next_in;
    uInt avail_in;
    uLong total_in;
    Bytef *next_out;
    uInt avail_out;
    uLong total_out;
    const char *msg;
    struct internal_state *state;
    alloc_func zalloc;
    free_func zfree;
    voidpf opaque;
    int data_type;
    uLong adler;
    uLong reserved;
} z_stream;
#define ZLIB_VERSION "1.2.13"
#define MAX_WBITS 15
#define Z_NO_FLUSH 0
#define Z_FINISH 4
#define Z_OK 0
#define Z_STREAM_END 1
#define Z_ERRNO (-1)
#define Z_STREAM_ERROR (-2)
#define Z_DATA_ERROR (-3)
#define Z_MEM_ERROR (-4)
#define Z_BUF_ERROR (-5)
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buf, unsigned len);
int gzclose(gzFile file);
const char *gzerror(gzFile file, int *errnum);
int inflateInit2_(z_stream *strm, int windowBits, const char *version, int stream_size);
#define inflateInit2(strm, windowBits) inflateInit2_((strm), (windowBits), ZLIB_VERSION, (int)sizeof(z_stream))
int inflate(z_stream *strm, int flush);
int inflateEnd(z_stream *strm);
uLong crc32(uLong crc, const Bytef *buf, uInt len);
#endif
